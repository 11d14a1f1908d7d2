//! Owns the YAML-ish front matter of `.foya` Markdown files (rules, skills, commands).
//!
//! Format (a strict subset of YAML, enough for our files and for the `SKILL.md` files
//! other agents write):
//!
//! ```text
//! ---
//! name: review
//! description: "Review a diff"
//! always: true
//! paths: ["src/**/*.rs", 'tests/*.rs']
//! tags:
//!   - a
//!   - b
//! ---
//! body...
//! ```
//!
//! Scalars are `true`/`false` or strings (optionally single/double quoted); lists are
//! inline `[a, "b"]` or block `- item` lines under an empty key. Comments (`# ...` lines)
//! and blank lines are ignored. A file that does not start with `---` has no front matter.

use std::collections::BTreeMap;

/// One front-matter value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrontValue {
    /// `true` / `false`.
    Bool(bool),
    /// Any other scalar, unquoted.
    Str(String),
    /// An inline or block list of strings.
    List(Vec<String>),
}

/// A parsed document: its front matter fields and the body after the closing `---`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Document {
    /// Front-matter fields by key (empty when the file has none).
    pub fields: BTreeMap<String, FrontValue>,
    /// The Markdown body, trimmed of surrounding blank lines.
    pub body: String,
}

impl Document {
    /// A string field (a scalar; a bool is rendered as `true`/`false`).
    #[must_use]
    pub(crate) fn str(&self, key: &str) -> Option<&str> {
        match self.fields.get(key)? {
            FrontValue::Str(s) => Some(s),
            FrontValue::Bool(true) => Some("true"),
            FrontValue::Bool(false) => Some("false"),
            FrontValue::List(_) => None,
        }
    }

    /// A boolean field; `None` when absent.
    ///
    /// # Errors
    /// A message when the value is not `true` or `false`.
    pub(crate) fn bool(&self, key: &str) -> Result<Option<bool>, String> {
        match self.fields.get(key) {
            None => Ok(None),
            Some(FrontValue::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(format!("`{key}` must be true or false, got {other:?}")),
        }
    }

    /// A list field; a single scalar counts as a one-element list.
    #[must_use]
    pub(crate) fn list(&self, key: &str) -> Vec<String> {
        match self.fields.get(key) {
            None | Some(FrontValue::Bool(_)) => Vec::new(),
            Some(FrontValue::Str(s)) => vec![s.clone()],
            Some(FrontValue::List(items)) => items.clone(),
        }
    }
}

/// Splits `text` into front matter and body.
///
/// # Errors
/// A human-readable message (with the 1-based line number) when the front matter is not
/// closed or a line is not `key: value`, `- item` or a comment.
pub(crate) fn parse(text: &str) -> Result<Document, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Ok(Document {
            fields: BTreeMap::new(),
            body: text.trim().to_owned(),
        });
    }
    let mut fields = BTreeMap::new();
    let mut open_list: Option<String> = None;
    let mut closed = false;
    let mut consumed = 1;
    for (index, raw) in lines.by_ref().enumerate() {
        consumed += 1;
        let line_no = index + 2;
        let line = raw.trim_end();
        if line == "---" {
            closed = true;
            break;
        }
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(item) =
            trimmed
                .strip_prefix("- ")
                .or(if trimmed == "-" { Some("") } else { None })
        {
            let Some(key) = &open_list else {
                return Err(format!("line {line_no}: list item without a key"));
            };
            if let Some(FrontValue::List(items)) = fields.get_mut(key) {
                items.push(unquote(item.trim()));
            }
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(format!(
                "line {line_no}: expected `key: value`, got {trimmed:?}"
            ));
        };
        let key = key.trim().to_owned();
        if key.is_empty() {
            return Err(format!("line {line_no}: empty key"));
        }
        let value = value.trim();
        open_list = None;
        let parsed = if value.is_empty() {
            open_list = Some(key.clone());
            FrontValue::List(Vec::new())
        } else if let Some(inner) = value.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return Err(format!("line {line_no}: unclosed `[` in {key}"));
            };
            FrontValue::List(split_inline_list(inner))
        } else if value == "true" {
            FrontValue::Bool(true)
        } else if value == "false" {
            FrontValue::Bool(false)
        } else {
            FrontValue::Str(unquote(value))
        };
        fields.insert(key, parsed);
    }
    if !closed {
        return Err("front matter starts with `---` but is never closed".to_owned());
    }
    let body: Vec<&str> = text.lines().skip(consumed).collect();
    Ok(Document {
        fields,
        body: body.join("\n").trim().to_owned(),
    })
}

fn split_inline_list(inner: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in inner.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                current.push(c);
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                current.push(c);
            }
            (None, ',') => {
                items.push(unquote(current.trim()));
                current.clear();
            }
            _ => current.push(c),
        }
    }
    if !current.trim().is_empty() {
        items.push(unquote(current.trim()));
    }
    items.retain(|s| !s.is_empty());
    items
}

fn unquote(value: &str) -> String {
    for q in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(q) && value.ends_with(q) {
            return value[1..value.len() - 1].to_owned();
        }
    }
    value.to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_scalars_inline_and_block_lists() {
        let doc = parse(
            "---\nname: review\ndescription: \"Review: a diff\"\nalways: true\n\
             paths: [\"src/**/*.rs\", 'a,b.md']\n# comment\ntags:\n  - x\n  - \"y\"\n---\n\nBody\ntext\n",
        )
        .unwrap();
        let expected: BTreeMap<String, FrontValue> = [
            ("always".to_owned(), FrontValue::Bool(true)),
            (
                "description".to_owned(),
                FrontValue::Str("Review: a diff".into()),
            ),
            ("name".to_owned(), FrontValue::Str("review".into())),
            (
                "paths".to_owned(),
                FrontValue::List(vec!["src/**/*.rs".into(), "a,b.md".into()]),
            ),
            (
                "tags".to_owned(),
                FrontValue::List(vec!["x".into(), "y".into()]),
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            doc,
            Document {
                fields: expected,
                body: "Body\ntext".into()
            }
        );
    }

    #[test]
    fn no_front_matter_and_errors() {
        assert_eq!(
            parse("# Title\nx").unwrap(),
            Document {
                fields: BTreeMap::new(),
                body: "# Title\nx".into()
            }
        );
        assert_eq!(
            parse("---\na: 1\n").unwrap_err(),
            "front matter starts with `---` but is never closed"
        );
        assert_eq!(
            parse("---\nnot a pair\n---\n").unwrap_err(),
            "line 2: expected `key: value`, got \"not a pair\""
        );
        let doc = parse("---\nalways: yes\n---\n").unwrap();
        assert_eq!(
            doc.bool("always").unwrap_err(),
            "`always` must be true or false, got Str(\"yes\")"
        );
    }
}
