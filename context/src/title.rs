//! Owns the pure halves of title generation: the request's prompt and the cleaning of
//! the model's answer. When to ask is the session's job (its TitleActor).

use super::estimate_tokens;
use foya_protocol::{Input, Message};

/// System prompt of a title request (sent without tools).
pub const TITLE_SYSTEM_PROMPT: &str = "You name conversations. Reply with a short title \
(at most 6 words) for the conversation that starts with the user's message. Reply with \
the title only: no quotes, no punctuation at the end.";

/// Longest title kept, in characters.
pub const MAX_TITLE_CHARS: usize = 80;

/// Most estimated tokens of the user's text sent in a title request.
const TITLE_INPUT_TOKENS: u64 = 500;

/// Messages of a title request for a conversation whose first user text is `first_text`
/// (cut to about 500 tokens).
#[must_use]
pub fn title_request(first_text: &str) -> Vec<Message> {
    let mut text = first_text.trim().to_owned();
    while estimate_tokens(&text) > TITLE_INPUT_TOKENS && !text.is_empty() {
        let keep = text.chars().count() * 3 / 4;
        text = text.chars().take(keep).collect();
    }
    vec![Message::User(Input::text(text))]
}

/// The title in a model's answer: its first non-empty line, without surrounding quotes,
/// `#`/`Title:` prefixes and final punctuation, cut to [`MAX_TITLE_CHARS`]. `None` when
/// nothing is left.
#[must_use]
pub fn clean_title(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.trim_start_matches('#').trim();
    let line = line
        .strip_prefix("Title:")
        .or_else(|| line.strip_prefix("title:"))
        .unwrap_or(line)
        .trim();
    let line = line
        .trim_matches(|c| matches!(c, '"' | '\'' | '`' | '*'))
        .trim_end_matches(['.', '!', '?', ':', ';', ','])
        .trim();
    let title: String = line.chars().take(MAX_TITLE_CHARS).collect();
    let title = title.trim().to_owned();
    (!title.is_empty()).then_some(title)
}

/// A title set by hand, as it is stored: every run of whitespace (line breaks included)
/// becomes one space and the ends are trimmed, so a title is always one line; `None`
/// when nothing is left (an empty title is refused, or means "generate one" for
/// `/title`).
#[must_use]
pub fn normalize_title(title: &str) -> Option<String> {
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_set_by_hand_is_one_trimmed_line() {
        assert_eq!(
            normalize_title("  Fix\n the \t parser\r\n"),
            Some("Fix the parser".to_owned())
        );
        assert_eq!(normalize_title(" \n\t "), None);
    }

    #[test]
    fn cleans_answers() {
        assert_eq!(
            clean_title("\n  \"Fix the parser.\"  \nmore"),
            Some("Fix the parser".to_owned())
        );
        assert_eq!(
            clean_title("Title: Add retries"),
            Some("Add retries".to_owned())
        );
        assert_eq!(clean_title(" \n\"\" "), None);
        assert_eq!(clean_title(&"x".repeat(200)), Some("x".repeat(80)));
    }

    #[test]
    fn request_is_the_trimmed_text() {
        assert_eq!(
            title_request("  hello  "),
            vec![Message::User(Input::text("hello"))]
        );
    }
}
