//! Owns the local token estimate and its calibration against provider-reported usage.
//!
//! Method (no tokenizer download, no network): the text is split into runs of one
//! character class and each run is priced like a BPE tokenizer (cl100k/o200k-style)
//! roughly prices it:
//! - a word run (ASCII letters/digits, `_`, and non-ASCII letters such as `é` or `ж`) costs
//!   `ceil(weight / 4)` where ASCII counts 1 and non-ASCII letters 2 (they take more
//!   bytes, so more merges are missing);
//! - a CJK ideograph, kana or hangul syllable costs 1 token each;
//! - an ASCII punctuation run costs `ceil(len / 2)` (operators like `->`, `::` merge);
//! - a whitespace run costs `ceil((len - 1) / 4)`: one space is absorbed by the next
//!   word, indentation merges in fours;
//! - any other character (emoji, symbols) costs 2.
//!
//! Every run's cost grows with its length, and adding text only extends the last run or
//! adds a run, so the estimate is monotone: `estimate(a) <= estimate(a + b)` and
//! `estimate(b) <= estimate(a + b)`. It tends to over-count slightly for prose, which is
//! the safe side for a budget; [`Calibration`] corrects the rest from real usage.

use foya_protocol::{Message, ReasoningPart};

/// Estimated tokens of `text` (see the module docs for the method).
#[must_use]
pub fn estimate_tokens(text: &str) -> u64 {
    if text.is_ascii() {
        estimate_ascii(text.as_bytes())
    } else {
        estimate_chars(text)
    }
}

/// The class of every ASCII byte, as [`Class::of`] gives it for the same character.
const ASCII_CLASS: [Class; 128] = {
    let mut table = [Class::Other; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        table[b] = if c.is_ascii_alphanumeric() || c == b'_' {
            Class::Word
        } else if matches!(c, b'\t'..=b'\r' | b' ') {
            // `char::is_whitespace` on ASCII: U+0009..=U+000D and the space.
            Class::Space
        } else if c.is_ascii_punctuation() {
            Class::Punct
        } else {
            Class::Other
        };
        b += 1;
    }
    table
};

/// [`estimate_chars`] for ASCII text, by byte (the context's common case: code, JSON,
/// English prose), with the same result.
fn estimate_ascii(bytes: &[u8]) -> u64 {
    let mut total = 0u64;
    let mut class = Class::None;
    let mut run = 0u64;
    for &b in bytes {
        let next = ASCII_CLASS[usize::from(b & 0x7f)];
        if next != class || !next.merges() {
            total += class.cost(run);
            class = next;
            run = 0;
        }
        run += 1;
    }
    total + class.cost(run)
}

fn estimate_chars(text: &str) -> u64 {
    let mut total = 0u64;
    let mut class = Class::None;
    let mut run = 0u64;
    for c in text.chars() {
        let next = Class::of(c);
        if next != class || !next.merges() {
            total += class.cost(run);
            class = next;
            run = 0;
        }
        run += if next == Class::Word && !c.is_ascii() {
            2
        } else {
            1
        };
    }
    total + class.cost(run)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    None,
    Word,
    Cjk,
    Punct,
    Space,
    Other,
}

impl Class {
    fn of(c: char) -> Self {
        if c.is_ascii_alphanumeric() || c == '_' {
            Self::Word
        } else if c.is_whitespace() {
            Self::Space
        } else if c.is_ascii_punctuation() {
            Self::Punct
        } else if is_cjk(c) {
            Self::Cjk
        } else if c.is_alphanumeric() {
            Self::Word
        } else {
            Self::Other
        }
    }

    /// Whether consecutive characters of this class form one run.
    fn merges(self) -> bool {
        matches!(self, Self::Word | Self::Punct | Self::Space)
    }

    fn cost(self, run: u64) -> u64 {
        match self {
            Self::None => 0,
            Self::Word => run.div_ceil(4),
            Self::Punct => run.div_ceil(2),
            Self::Space => run.saturating_sub(1).div_ceil(4),
            Self::Cjk => run,
            Self::Other => 2 * run,
        }
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF00..=0xFFEF    // half/full-width forms
        | 0x20000..=0x2FA1F) // CJK extensions B..F, supplement
}

/// Correction factor for [`estimate_tokens`]: provider-reported input tokens divided by
/// the local estimate of the same request. Range `[MIN_RATIO, MAX_RATIO]`; `1.0` when
/// nothing is known yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// actual / estimated.
    pub ratio: f64,
}

impl Calibration {
    /// Smallest ratio accepted (a report far below the estimate is likely cache-only noise).
    pub const MIN_RATIO: f64 = 0.25;
    /// Largest ratio accepted.
    pub const MAX_RATIO: f64 = 4.0;

    /// The ratio `reported / estimated` of the previous step, clamped to
    /// `[MIN_RATIO, MAX_RATIO]`; the default (1.0) when either count is 0.
    #[must_use]
    pub fn from_usage(estimated: u64, reported: u64) -> Self {
        if estimated == 0 || reported == 0 {
            return Self::default();
        }
        #[expect(
            clippy::cast_precision_loss,
            reason = "token counts are far below 2^52"
        )]
        let ratio = reported as f64 / estimated as f64;
        Self {
            ratio: ratio.clamp(Self::MIN_RATIO, Self::MAX_RATIO),
        }
    }

    /// `tokens × ratio`, rounded up. A non-finite or non-positive ratio counts as 1.0.
    #[must_use]
    pub fn apply(&self, tokens: u64) -> u64 {
        let ratio = if self.ratio.is_finite() && self.ratio > 0.0 {
            self.ratio
        } else {
            1.0
        };
        #[expect(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "token counts are far below 2^52 and the product is positive"
        )]
        let scaled = (tokens as f64 * ratio).ceil() as u64;
        scaled
    }
}

impl Default for Calibration {
    fn default() -> Self {
        Self { ratio: 1.0 }
    }
}

/// Fixed per-message overhead of the chat formats (role markers, separators), in tokens.
pub(super) const MESSAGE_OVERHEAD_TOKENS: u64 = 4;
/// Estimated tokens of one image input (a ~1 MP image on the major providers).
pub(super) const IMAGE_TOKENS: u64 = 1_600;
/// Fixed per-tool overhead of the function-calling formats, in tokens.
const TOOL_OVERHEAD_TOKENS: u64 = 8;

/// Estimated tokens of one tool schema: [`TOOL_OVERHEAD_TOKENS`] + name, description and
/// the JSON Schema text.
pub(super) fn tool_tokens(t: &foya_core::request::ToolSchema) -> u64 {
    TOOL_OVERHEAD_TOKENS
        + estimate_tokens(&t.name)
        + estimate_tokens(&t.description)
        + estimate_tokens(&t.parameters.to_string())
}

/// Estimated tokens of one message: overhead + text, kept reasoning, tool calls
/// (name and JSON arguments), tool results and [`IMAGE_TOKENS`] per image (of a user
/// input or a tool result).
pub(super) fn message_tokens(message: &Message) -> u64 {
    MESSAGE_OVERHEAD_TOKENS
        + match message {
            Message::System { text } => estimate_tokens(text),
            Message::User(input) => {
                estimate_tokens(&input.text) + IMAGE_TOKENS * input.images.len() as u64
            }
            Message::Assistant(a) => {
                estimate_tokens(&a.text)
                    + estimate_tokens(&a.reasoning)
                    + a.reasoning_parts
                        .iter()
                        .map(|p| match p {
                            ReasoningPart::Thinking { text, signature } => {
                                estimate_tokens(text)
                                    + signature.as_deref().map_or(0, estimate_tokens)
                            }
                            ReasoningPart::Redacted { data } => estimate_tokens(data),
                        })
                        .sum::<u64>()
                    + a.tool_calls
                        .iter()
                        .map(|c| {
                            estimate_tokens(&c.name) + estimate_tokens(&c.arguments.to_string())
                        })
                        .sum::<u64>()
            }
            Message::Tool(t) => estimate_tokens(&t.content) + IMAGE_TOKENS * t.images.len() as u64,
        }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_ascii_path_prices_like_the_char_path() {
        // Every ASCII character next to every other one, plus longer runs of each class.
        let all: Vec<char> = (0u8..128).map(char::from).collect();
        for &a in &all {
            for &b in &all {
                let text: String = [a, b, b, a, ' ', b].iter().collect();
                assert_eq!(
                    estimate_ascii(text.as_bytes()),
                    estimate_chars(&text),
                    "{text:?}"
                );
            }
        }
        let code = "fn main() {\n    let x_1 = a->b::c;  // ok\r\n\t}\x0b\x0c\x00";
        assert_eq!(estimate_ascii(code.as_bytes()), estimate_chars(code));
    }

    #[test]
    fn prices_runs_by_class() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("hello"), 2);
        assert_eq!(estimate_tokens("hello world"), 4);
        assert_eq!(estimate_tokens("fn main() {}"), 4);
        assert_eq!(estimate_tokens("        x"), 3);
        assert_eq!(estimate_tokens("日本語"), 3);
        assert_eq!(estimate_tokens("é"), 1);
        assert_eq!(estimate_tokens("🙂"), 2);
        let prose = "The quick brown fox jumps over the lazy dog. ".repeat(100);
        // 10 cl100k tokens per sentence; the estimate is 30 % above (the safe side).
        assert_eq!(estimate_tokens(&prose), 1300);
    }

    #[test]
    fn calibration_scales_and_clamps() {
        assert_eq!(Calibration::default(), Calibration { ratio: 1.0 });
        assert_eq!(
            Calibration::from_usage(1000, 1200),
            Calibration { ratio: 1.2 }
        );
        assert_eq!(Calibration::from_usage(0, 1200), Calibration { ratio: 1.0 });
        assert_eq!(Calibration::from_usage(1000, 0), Calibration { ratio: 1.0 });
        assert_eq!(
            Calibration::from_usage(10, 1000),
            Calibration { ratio: 4.0 }
        );
        assert_eq!(
            Calibration::from_usage(1000, 1),
            Calibration { ratio: 0.25 }
        );
        assert_eq!(Calibration::from_usage(1000, 1200).apply(500), 600);
        assert_eq!(Calibration { ratio: 0.5 }.apply(3), 2);
        assert_eq!(Calibration { ratio: f64::NAN }.apply(7), 7);
    }

    proptest! {
        #[test]
        fn estimate_is_monotone_under_concatenation(a in "\\PC{0,40}", b in "\\PC{0,40}") {
            let joined = format!("{a}{b}");
            prop_assert!(estimate_tokens(&a) <= estimate_tokens(&joined));
            prop_assert!(estimate_tokens(&b) <= estimate_tokens(&joined));
        }

        #[test]
        fn calibrated_estimate_is_monotone(a in 0u64..1_000_000, b in 0u64..1_000_000, r in 0.25f64..4.0) {
            let c = Calibration { ratio: r };
            prop_assert!(c.apply(a.min(b)) <= c.apply(a.max(b)));
        }
    }
}
