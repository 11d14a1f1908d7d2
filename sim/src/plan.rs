//! The pure planner: from a configuration and a request history to a timed script of
//! [`StreamEvent`]s (or a rejection), the same for the in-process client and the server.

use super::SimConfig;
use super::args::ToolArgs;
use super::history::HistorySummary;
use super::rng::{Fnv, SplitMix};
use dashmap::DashMap;
use foya_protocol::{ErrorClass, FinishReason, ProviderError, StreamEvent, ToolCallId, Usage};
use std::time::Duration;

/// One scripted event and when it is due, counted from the start of the request.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedEvent {
    /// Offset from the start of the request.
    pub at: Duration,
    /// The event.
    pub event: StreamEvent,
}

/// A request refused before any streaming (an HTTP error status on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimRejection {
    /// HTTP 429; the client should wait `retry_after_ms` milliseconds.
    RateLimited {
        /// Requested wait in milliseconds.
        retry_after_ms: u64,
    },
    /// Anthropic 529 / OpenAI 503.
    Overloaded,
    /// HTTP 400: the input does not fit the context window.
    ContextOverflow {
        /// Tokens the request is said to have (always above the window).
        input_tokens: u64,
        /// The model's context window in tokens.
        context_window_tokens: u64,
    },
}

impl SimRejection {
    /// The classified error a wire decoder would produce for this rejection.
    #[must_use]
    pub fn to_error(self) -> ProviderError {
        match self {
            Self::RateLimited { retry_after_ms } => ProviderError {
                class: ErrorClass::RateLimited,
                message: "rate limit reached (simulated)".to_owned(),
                retry_after_ms: Some(retry_after_ms),
                status: Some(429),
            },
            Self::Overloaded => ProviderError {
                status: Some(529),
                ..ProviderError::new(ErrorClass::Overloaded, "overloaded (simulated)")
            },
            Self::ContextOverflow {
                input_tokens,
                context_window_tokens,
            } => ProviderError {
                status: Some(400),
                ..ProviderError::new(
                    ErrorClass::ContextOverflow,
                    format!(
                        "prompt is too long: {input_tokens} tokens > {context_window_tokens} maximum (simulated)"
                    ),
                )
            },
        }
    }
}

/// What the simulated model does with one request attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum SimOutcome {
    /// Refused up front.
    Rejected(SimRejection),
    /// Streamed: content events, then `Usage` and `Done`, unless `cut`, in which case
    /// the events stop part-way and no `Usage`/`Done` follows.
    Streamed {
        /// The events in order, with non-decreasing offsets.
        events: Vec<TimedEvent>,
        /// Whether the stream was cut off.
        cut: bool,
    },
}

/// The simulated response to one request attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResponse {
    /// The request key ([`HistorySummary::key`]); response and tool-call ids derive from it.
    pub key: u64,
    /// Step number in the turn (1-based).
    pub step: u32,
    /// Attempt number of this exact request (0 for the first).
    pub attempt: u32,
    /// Input tokens reported (≈ input characters / 4).
    pub input_tokens: u64,
    /// Model name for wire bodies.
    pub model: String,
    /// What happens.
    pub outcome: SimOutcome,
}

impl SimResponse {
    /// Whether the attempt fails (rejected or cut).
    #[must_use]
    pub fn is_failure(&self) -> bool {
        matches!(
            self.outcome,
            SimOutcome::Rejected(_) | SimOutcome::Streamed { cut: true, .. }
        )
    }
}

/// The simulated model: a [`SimConfig`] plus the attempt counter.
///
/// Content depends only on the configuration and the history; injected errors depend
/// on those and on the attempt number, which is counted per request key (an entry lives
/// from a failed attempt until the next attempt of the same request succeeds), so a
/// retried request is not doomed to fail the same way forever.
#[derive(Debug)]
pub struct SimModel {
    config: SimConfig,
    tool_args: ToolArgs,
    attempts: DashMap<u64, u32>,
}

/// Three-letter words; each token is one word and a space (exactly 4 characters).
const WORDS: [&str; 16] = [
    "sim", "the", "fox", "map", "log", "run", "key", "set", "use", "for", "tip", "box", "bit",
    "cat", "dog", "sun",
];

impl SimModel {
    /// A model with `config`.
    #[must_use]
    pub fn new(config: SimConfig) -> Self {
        let tool_args = ToolArgs::new(&config.tool_args);
        Self {
            config,
            tool_args,
            attempts: DashMap::new(),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Plans the response to the next attempt of the request `history` describes, and
    /// counts the attempt.
    pub fn respond(&self, history: &HistorySummary) -> SimResponse {
        let key = history.key(self.config.seed);
        let attempt = self.attempts.get(&key).map_or(0, |a| *a);
        let response = self.plan(history, attempt);
        if response.is_failure() {
            self.attempts.insert(key, attempt.saturating_add(1));
        } else if attempt > 0 {
            self.attempts.remove(&key);
        }
        response
    }

    /// Plans attempt `attempt` of the request `history` describes. Pure.
    #[must_use]
    pub fn plan(&self, history: &HistorySummary, attempt: u32) -> SimResponse {
        let c = &self.config;
        let key = history.key(c.seed);
        let input_tokens = history.input_chars.div_ceil(4);
        let model = history.model.clone().unwrap_or_else(|| c.model.clone());
        let mut errors = SplitMix::new(Fnv::new().u64(key).u64(2).u64(u64::from(attempt)).finish());
        let base = SimResponse {
            key,
            step: history.step,
            attempt,
            input_tokens,
            model,
            outcome: SimOutcome::Streamed {
                events: Vec::new(),
                cut: false,
            },
        };
        let r = errors.unit();
        let rates = c.error_rates;
        let mut threshold = 0.0;
        let mut hit = |p: f64| {
            threshold += p.clamp(0.0, 1.0);
            r < threshold
        };
        let rejection = if hit(rates.rate_limited) {
            Some(SimRejection::RateLimited {
                retry_after_ms: c.retry_after_ms,
            })
        } else if hit(rates.overloaded) {
            Some(SimRejection::Overloaded)
        } else if hit(rates.context_overflow) {
            Some(SimRejection::ContextOverflow {
                input_tokens: input_tokens.max(c.context_window_tokens.saturating_add(1)),
                context_window_tokens: c.context_window_tokens,
            })
        } else {
            None
        };
        if let Some(rejection) = rejection {
            return SimResponse {
                outcome: SimOutcome::Rejected(rejection),
                ..base
            };
        }
        let cut = hit(rates.stream_cut);

        let mut script = Script::new(c, SplitMix::new(Fnv::new().u64(key).u64(1).finish()));
        script.words(c.reasoning_tokens, |text| StreamEvent::ReasoningDelta {
            text,
        });
        let final_step = history.step >= c.steps_per_turn.max(1)
            || c.tool_calls_per_step == 0
            || !history.tools_offered;
        if final_step {
            script.words(c.response_tokens, |text| StreamEvent::TextDelta { text });
        } else {
            for index in 0..c.tool_calls_per_step {
                let args = self.tool_args.render(history.step, index);
                script.tool_call(index, &format!("call_{key:016x}_{index}"), &args);
            }
        }
        if cut {
            let len = script.events.len() as u64;
            let keep = if len >= 2 {
                errors.range(1, len - 1)
            } else {
                0
            };
            script
                .events
                .truncate(usize::try_from(keep).unwrap_or(usize::MAX));
            return SimResponse {
                outcome: SimOutcome::Streamed {
                    events: script.events,
                    cut,
                },
                ..base
            };
        }
        let usage = Usage {
            input_tokens,
            output_tokens: script.tokens,
            cached_input_tokens: None,
            reasoning_tokens: (c.reasoning_tokens > 0).then_some(u64::from(c.reasoning_tokens)),
        };
        let finish = if final_step {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        script.push(0, StreamEvent::Usage { usage });
        script.push(
            0,
            StreamEvent::Done {
                finish_reason: Some(finish),
            },
        );
        SimResponse {
            outcome: SimOutcome::Streamed {
                events: script.events,
                cut,
            },
            ..base
        }
    }
}

/// Builds the event list and its timing: token `n` (0-based) is produced at
/// `ttft + n / tokens_per_s`, and an event is due when its last token is.
struct Script<'a> {
    config: &'a SimConfig,
    rng: SplitMix,
    events: Vec<TimedEvent>,
    tokens: u64,
}

impl<'a> Script<'a> {
    fn new(config: &'a SimConfig, rng: SplitMix) -> Self {
        Self {
            config,
            rng,
            events: Vec::new(),
            tokens: 0,
        }
    }

    fn push(&mut self, tokens: u64, event: StreamEvent) {
        self.tokens += tokens;
        let last = self.tokens.saturating_sub(1);
        let tps = self.config.tokens_per_s;
        let gen_ns = if tps.is_finite() && tps > 0.0 {
            (last as f64 * 1e9 / tps).round() as u64
        } else {
            0
        };
        let at = Duration::from_millis(self.config.ttft_ms) + Duration::from_nanos(gen_ns);
        self.events.push(TimedEvent { at, event });
    }

    /// `total` tokens of words, a few (1 to 4) tokens per event.
    fn words(&mut self, total: u32, make: impl Fn(String) -> StreamEvent) {
        let mut left = u64::from(total);
        while left > 0 {
            let n = self.rng.range(1, 4).min(left);
            let mut text = String::with_capacity(4 * n as usize);
            for i in 0..n {
                let word = WORDS[(self.rng.next_u64() % WORDS.len() as u64) as usize];
                text.push_str(word);
                text.push(if i + 1 == left { '.' } else { ' ' });
            }
            left -= n;
            self.push(n, make(text));
        }
    }

    /// One tool call: a fragment with id and name, then the arguments 16 characters
    /// (4 tokens) at a time.
    fn tool_call(&mut self, index: u32, id: &str, args: &str) {
        let name = self.config.tool_name.clone();
        self.push(
            0,
            StreamEvent::ToolCallDelta {
                index,
                id: Some(ToolCallId::new(id)),
                name: Some(name),
                arguments: String::new(),
                extra: None,
            },
        );
        let chars: Vec<char> = args.chars().collect();
        for piece in chars.chunks(16) {
            let arguments: String = piece.iter().collect();
            let tokens = (piece.len() as u64).div_ceil(4);
            self.push(
                tokens,
                StreamEvent::ToolCallDelta {
                    index,
                    id: None,
                    name: None,
                    arguments,
                    extra: None,
                },
            );
        }
    }
}
