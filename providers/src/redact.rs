//! Keeping credentials out of what a provider failure shows: the endpoint as displayed
//! (no userinfo, query or fragment), and the configured API key (also JSON-escaped) and
//! the base URL's password (`secrets_of`) removed from error messages and excerpts (a server or proxy may echo the key in an error body or in
//! garbled stream data, which would otherwise be persisted in `provider_retry` and
//! `turn_complete`).

use foya_protocol::StreamEvent;

/// What replaces a credential.
pub(crate) const REDACTED: &str = "[redacted]";

/// Shortest cut-off key prefix that is redacted before an ellipsis (`sk-p…`): shorter
/// ones give nothing away and would match ordinary text.
const MIN_PREFIX_CHARS: usize = 4;

/// `url` as shown in messages and reports: userinfo replaced with `[redacted]`
/// (`http://user:pw@host/v1` → `http://[redacted]@host/v1`), query and fragment dropped
/// (either may carry a key). Works on any text, URL or not (no parsing, no
/// normalisation: the rest is shown as configured).
#[must_use]
pub fn display_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}{REDACTED}{}", &rest[at..]),
        None => url.to_owned(),
    }
}

/// `text` with every occurrence of `secret` replaced by `[redacted]`, and a prefix of
/// `secret` (at least 4 characters) cut off by an ellipsis (`…`, as excerpts and long
/// messages end) replaced too. An empty `secret` changes nothing.
#[must_use]
pub(crate) fn redact_secret(text: &str, secret: &str) -> String {
    if secret.is_empty() {
        return text.to_owned();
    }
    let text = text.replace(secret, REDACTED);
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(pos) = rest.find('…') {
        let before = &rest[..pos];
        let cut = secret
            .char_indices()
            .map(|(i, _)| i)
            .chain([secret.len()])
            .filter(|&n| n >= MIN_PREFIX_CHARS && before.ends_with(&secret[..n]))
            .max();
        match cut {
            Some(n) => {
                out.push_str(&before[..before.len() - n]);
                out.push_str(REDACTED);
            }
            None => out.push_str(before),
        }
        out.push('…');
        rest = &rest[pos + '…'.len_utf8()..];
    }
    out.push_str(rest);
    out
}

/// Shortest secret that is redacted: a shorter one (a one-letter test key) would match
/// ordinary text everywhere and give nothing away.
#[cfg_attr(not(feature = "http"), allow(dead_code))] // used by the HTTP client only
const MIN_SECRET_CHARS: usize = 3;

/// What a provider's messages must not show: the API key, also as JSON writes it with
/// escaped slashes (`a/b` → `a\/b`, so a raw body that does not parse still hides it),
/// and the password of the base URL's userinfo (`http://user:PW@host`), which a server
/// may echo like a key. Secrets shorter than 3 characters are left out.
#[must_use]
#[cfg_attr(not(feature = "http"), allow(dead_code))] // used by the HTTP client only
pub(crate) fn secrets_of(api_key: Option<&str>, base_url: &str) -> Vec<String> {
    let mut secrets: Vec<String> = Vec::new();
    if let Some(key) = api_key {
        secrets.push(key.to_owned());
        secrets.push(key.replace('/', "\\/"));
    }
    let rest = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if let Some((userinfo, _)) = authority.rsplit_once('@') {
        let password = userinfo.split_once(':').map_or(userinfo, |(_, pw)| pw);
        secrets.push(password.to_owned());
    }
    secrets.retain(|s| s.chars().count() >= MIN_SECRET_CHARS);
    // Longest first, so a secret containing another is replaced whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
}

/// `redact_secret` for each of `secrets` in turn.
#[must_use]
pub(crate) fn redact_secrets(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_owned(), |text, secret| redact_secret(&text, secret))
}

/// Redacts secrets from a provider's stream, whose text fragments may split a secret
/// (a server echoing the key in the model's text, one token at a time): text and
/// reasoning are held back while they end with what may be the start of a secret, and
/// released, redacted, once they cannot be (at the latest before the next event of
/// another kind). Tool-call argument fragments are held back the same way, per call
/// index (released before any event that is not a tool-call fragment); error messages
/// are redacted whole.
#[derive(Debug, Default)]
pub struct StreamRedactor {
    secrets: Vec<String>,
    text: String,
    reasoning: String,
    /// Held-back argument text of each tool call, by index.
    arguments: std::collections::BTreeMap<u32, String>,
}

impl StreamRedactor {
    /// A redactor of `secrets` (`secrets_of`).
    #[must_use]
    pub fn new(secrets: Vec<String>) -> Self {
        Self {
            secrets,
            ..Self::default()
        }
    }

    /// The events to pass on for `event`.
    pub fn push(&mut self, event: StreamEvent) -> Vec<StreamEvent> {
        if let StreamEvent::ToolCallDelta {
            index,
            id,
            name,
            arguments,
            extra,
        } = event
        {
            // Text and reasoning held back are released first, in stream order.
            let mut out = self.release_text();
            let held = self.arguments.entry(index).or_default();
            held.push_str(&arguments);
            let arguments = release(held, &self.secrets, false);
            out.push(StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
                extra,
            });
            return out;
        }
        // Any other event first releases what tool-call fragments held back.
        let mut out: Vec<StreamEvent> = std::mem::take(&mut self.arguments)
            .into_iter()
            .filter(|(_, held)| !held.is_empty())
            .map(|(index, mut held)| StreamEvent::ToolCallDelta {
                index,
                id: None,
                name: None,
                arguments: release(&mut held, &self.secrets, true),
                extra: None,
            })
            .collect();
        match event {
            StreamEvent::TextDelta { text } => {
                self.text.push_str(&text);
                let text = self.release(false, false);
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta { text });
                }
                out
            }
            StreamEvent::ReasoningDelta { text } => {
                self.reasoning.push_str(&text);
                let text = self.release(true, false);
                if !text.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { text });
                }
                out
            }
            other => {
                out.extend(self.release_text());
                out.push(match other {
                    StreamEvent::Error { mut error } => {
                        error.message = redact_secrets(&error.message, &self.secrets);
                        StreamEvent::Error { error }
                    }
                    other => other,
                });
                out
            }
        }
    }

    /// Everything text and reasoning held back, redacted, as events.
    fn release_text(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let reasoning = self.release(true, true);
        if !reasoning.is_empty() {
            out.push(StreamEvent::ReasoningDelta { text: reasoning });
        }
        let text = self.release(false, true);
        if !text.is_empty() {
            out.push(StreamEvent::TextDelta { text });
        }
        out
    }

    /// The redacted text that can be released from the text (or reasoning) buffer; with
    /// `all`, everything (the buffer is emptied).
    fn release(&mut self, reasoning: bool, all: bool) -> String {
        let buffer = if reasoning {
            &mut self.reasoning
        } else {
            &mut self.text
        };
        release(buffer, &self.secrets, all)
    }
}

/// The redacted text that can be released from `buffer`: all of it but a tail that may
/// be the start of one of `secrets` (with `all`, everything; the buffer is emptied).
fn release(buffer: &mut String, secrets: &[String], all: bool) -> String {
    if buffer.is_empty() || secrets.is_empty() {
        return std::mem::take(buffer);
    }
    let redacted = redact_secrets(buffer, secrets);
    let hold = if all {
        0
    } else {
        secrets
            .iter()
            .filter_map(|s| {
                (1..s.len())
                    .rev()
                    .filter(|n| s.is_char_boundary(*n))
                    .find(|n| redacted.ends_with(&s[..*n]))
            })
            .max()
            .unwrap_or(0)
    };
    let cut = redacted.len() - hold;
    *buffer = redacted[cut..].to_owned();
    redacted[..cut].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_split_across_text_fragments_is_redacted() {
        let mut r = StreamRedactor::new(secrets_of(Some("sk-CANARY-123"), "http://h/v1"));
        let mut out = Vec::new();
        for text in ["your key is s", "k-CAN", "ARY-1", "23, yes", "s"] {
            out.extend(r.push(StreamEvent::TextDelta { text: text.into() }));
        }
        out.extend(r.push(StreamEvent::ToolCallDelta {
            index: 0,
            id: None,
            name: None,
            arguments: "{\"k\":\"sk-CANARY-123\"}".into(),
            extra: None,
        }));
        let text: String = out
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "your key is [redacted], yess");
        assert!(matches!(
            out.last(),
            Some(StreamEvent::ToolCallDelta { arguments, .. }) if arguments == "{\"k\":\"[redacted]\"}"
        ));
    }

    #[test]
    fn a_key_split_across_tool_call_fragments_is_redacted() {
        let mut r = StreamRedactor::new(secrets_of(Some("sk-CANARY-123"), "http://h/v1"));
        let mut out = Vec::new();
        for (index, arguments) in [
            (0, "{\"k\":\"sk-CA"),
            (1, "{\"x\":1}"),
            (0, "NARY-"),
            (0, "123\"}"),
        ] {
            out.extend(r.push(StreamEvent::ToolCallDelta {
                index,
                id: None,
                name: None,
                arguments: arguments.into(),
                extra: None,
            }));
        }
        out.extend(r.push(StreamEvent::Done {
            finish_reason: None,
        }));
        let of = |i: u32| -> String {
            out.iter()
                .filter_map(|e| match e {
                    StreamEvent::ToolCallDelta {
                        index, arguments, ..
                    } if *index == i => Some(arguments.as_str()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(of(0), "{\"k\":\"[redacted]\"}");
        assert_eq!(of(1), "{\"x\":1}");
        assert!(matches!(out.last(), Some(StreamEvent::Done { .. })));
    }

    #[test]
    fn the_key_its_json_escaped_form_and_the_url_password_are_redacted() {
        let secrets = secrets_of(
            Some("sk-a/b/LONG1234"),
            "http://user9:hunter2@127.0.0.1:1/v1",
        );
        assert_eq!(
            redact_secrets(
                r#"{"error":{"message":"bad key sk-a\/b\/LONG1234 for hunter2 (sk-a/b/LONG1234)"#,
                &secrets
            ),
            r#"{"error":{"message":"bad key [redacted] for [redacted] ([redacted])"#
        );
        // A one-letter key is not redacted (it would garble every message).
        assert_eq!(secrets_of(Some("e"), "http://h/v1"), Vec::<String>::new());
    }

    #[test]
    fn display_url_hides_userinfo_query_and_fragment() {
        let shown: Vec<String> = [
            "http://user:PW@127.0.0.1:8000/v1/chat/completions?key=K#f",
            "https://TOKEN@api.example.com/v1",
            "http://127.0.0.1:8000/v1?api-key=K",
            "http://host/v1/a@b",
            "no-scheme:pw@host/x",
        ]
        .iter()
        .map(|u| display_url(u))
        .collect();
        assert_eq!(
            shown,
            vec![
                "http://[redacted]@127.0.0.1:8000/v1/chat/completions",
                "https://[redacted]@api.example.com/v1",
                "http://127.0.0.1:8000/v1",
                "http://host/v1/a@b",
                "[redacted]@host/x",
            ]
        );
    }

    #[test]
    fn redact_secret_removes_whole_and_cut_off_keys() {
        let key = "sk-test-SECRET123";
        assert_eq!(
            redact_secret(
                "invalid key sk-test-SECRET123 (sk-test-SECRET123); `{\"k\": \"sk-test-SEC…",
                key
            ),
            "invalid key [redacted] ([redacted]); `{\"k\": \"[redacted]…"
        );
        assert_eq!(
            redact_secret("ends sk-…, sk-t… and nothing", key),
            "ends sk-…, [redacted]… and nothing"
        );
        assert_eq!(redact_secret("a … b", ""), "a … b");
    }
}
