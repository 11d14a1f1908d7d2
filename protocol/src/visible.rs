//! What a person reads is what runs: text from a model, a tool or a repository shown
//! with its invisible and control characters made visible.
//!
//! Owns: the one neutraliser the terminal renderer, the approval prompts and the HTTP
//! service's SSE payloads all use. C0 controls other than newline and tab are shown as
//! `^X` (`^[` for ESC, `^?` for DEL); C1 controls, bidirectional controls (U+202A–U+202E,
//! U+2066–U+2069, U+200E/U+200F, U+061C), zero-width and other invisible format
//! characters (U+200B–U+200D, U+2060–U+2064, U+FEFF, U+00AD, tag characters, …) and line
//! or paragraph separators as `<U+XXXX>`. A carriage return before a newline is dropped.

use std::borrow::Cow;

/// Whether `c` is shown as an escape rather than as itself.
#[must_use]
pub fn is_hidden(c: char) -> bool {
    if c == '\n' || c == '\t' {
        return false;
    }
    if c.is_control() {
        return true;
    }
    matches!(
        u32::from(c),
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0E
            | 0xFEFF
            | 0xFFA0
            | 0xFFF9..=0xFFFB
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

/// `text` with every [`is_hidden`] character shown visibly; borrowed when there is none.
#[must_use]
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.contains(is_hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            c if is_hidden(c) => match u32::from(c) {
                b @ 0..=0x1f => {
                    out.push('^');
                    out.push(char::from_u32(b + 0x40).unwrap_or('?'));
                }
                0x7f => out.push_str("^?"),
                code => out.push_str(&format!("<U+{code:04X}>")),
            },
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Every string inside `value` (object keys too) passed through [`visible`].
pub fn visible_json(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => {
            if let Cow::Owned(shown) = visible(s) {
                *s = shown;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(visible_json),
        serde_json::Value::Object(map) => {
            let hidden_keys = map.keys().any(|k| k.contains(is_hidden));
            if hidden_keys {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    visible_json(&mut v);
                    map.insert(visible(&k).into_owned(), v);
                }
            } else {
                map.values_mut().for_each(visible_json);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::visible;

    #[test]
    fn invisible_and_control_characters_are_shown() {
        let cases = [
            ("plain text\n\tok", "plain text\n\tok"),
            ("rm -rf /\u{202E}txt.exe", "rm -rf /<U+202E>txt.exe"),
            (
                "a\u{2066}b\u{2069}c\u{202A}\u{202B}\u{202C}\u{202D}",
                "a<U+2066>b<U+2069>c<U+202A><U+202B><U+202C><U+202D>",
            ),
            (
                "zero\u{200B}width\u{200D}\u{FEFF}",
                "zero<U+200B>width<U+200D><U+FEFF>",
            ),
            ("tag\u{E0041}", "tag<U+E0041>"),
            ("a\x1b[2Jb\r\nc\rd\u{9b}e", "a^[[2Jb\nc^Md<U+009B>e"),
            ("del\x7f", "del^?"),
            ("line\u{2028}sep", "line<U+2028>sep"),
        ];
        for (text, expected) in cases {
            assert_eq!(visible(text), expected, "{text:?}");
        }
    }
}
