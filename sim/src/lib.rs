//! `foya-sim`: the simulated model provider, for load generation and tests without a
//! paid API.
//!
//! Owns: [`SimConfig`] (latency, token rate, response shape, injected errors, seed), the
//! pure response planner ([`SimModel`], [`SimResponse`]), the SSE producers that speak
//! the real wire formats ([`wire`]) and, behind the `server` feature, the axum server
//! that serves them (`serve_sim`). The in-process `SimClient` (a `ModelClient`) is
//! `foya_actors::provider::sim`, an adapter over [`SimModel`]. Must not: depend on the
//! runtime (`foya-actors`); read the clock outside tokio time; keep per-session state.
//!
//! Behaviour is a pure function of the configuration and the request history: the step
//! number is the number of assistant messages after the last user message, plus one;
//! steps before `steps_per_turn` ask for `tool_calls_per_step` tool calls, the last
//! step answers with text only. A call's arguments are [`SimConfig::tool_args`] with the
//! step number and the call's index filled in (see there), so calls can differ. The
//! only state is a per-request attempt counter so that a retried request draws its
//! injected error afresh (see [`SimModel`]).

use serde::{Deserialize, Serialize};

mod args;
mod format;
mod history;
mod plan;
mod rng;
#[cfg(feature = "server")]
mod server;
pub mod wire;

pub use args::{CALL_PLACEHOLDER, STEP_PLACEHOLDER};
pub use history::HistorySummary;
pub use plan::{SimModel, SimOutcome, SimRejection, SimResponse, TimedEvent};
#[cfg(feature = "server")]
pub use server::{serve_sim, serve_sim_with_shutdown, sim_router};

/// How the simulated model behaves. Every field has a default, so `{}` is a valid config.
///
/// Read from TOML/JSON (`serde`); unknown fields are rejected so typos surface.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Time to first token in milliseconds: the delay before the first content event
    /// (default 0).
    pub ttft_ms: u64,
    /// Output speed in tokens per second after the first token; `0` means as fast as
    /// possible (no pacing at all). Default 0.
    pub tokens_per_s: f64,
    /// Answer-text length of the final step, in tokens (≈ 4 characters each). Default 64.
    pub response_tokens: u32,
    /// Tool calls in each step before the last (default 1). With 0 every step is final.
    pub tool_calls_per_step: u32,
    /// Steps per turn, the final text step included (default 3; 0 is treated as 1).
    pub steps_per_turn: u32,
    /// Reasoning tokens streamed at the start of every step (default 0: no reasoning).
    pub reasoning_tokens: u32,
    /// Probabilities of injected failures per request attempt.
    pub error_rates: ErrorRates,
    /// The `retry-after` a rate-limited answer asks for, in milliseconds (default 250).
    pub retry_after_ms: u64,
    /// Seed of every random choice; the same seed and request give the same response.
    pub seed: u64,
    /// Name of the tool the model calls (default `read_file`).
    pub tool_name: String,
    /// Arguments of the tool calls, a template: in every string value, at any depth,
    /// `{step}` becomes the step number in the turn (1-based) and `{call}` the call's
    /// index within its step (0-based); object keys and other values stay as written
    /// (there is no escape: a literal `{step}` cannot be sent). So
    /// `{"path": "docs/step-{step}-call-{call}.md"}` asks for a different file in each
    /// call of a turn, and the same files in every turn ([`SimConfig::tool_call_args`]
    /// renders one call's). Default `{"path": "README.md"}`: the same call every time,
    /// which reads the README of any project directory; run protection blocks the third
    /// identical call of a turn (`duplicate_threshold`) and ends the turn
    /// `failed/loop_detected` at the fourth, so with the default only turns of at most
    /// two calls (the default 3 steps × 1 call) run every call.
    pub tool_args: serde_json::Value,
    /// Context window reported to the runtime, in tokens (default 128 000).
    pub context_window_tokens: u64,
    /// Model name used in wire bodies when the request names none (default `sim-1`).
    pub model: String,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            ttft_ms: 0,
            tokens_per_s: 0.0,
            response_tokens: 64,
            tool_calls_per_step: 1,
            steps_per_turn: 3,
            reasoning_tokens: 0,
            error_rates: ErrorRates::default(),
            retry_after_ms: 250,
            seed: 0,
            tool_name: "read_file".to_owned(),
            tool_args: serde_json::json!({"path": "README.md"}),
            context_window_tokens: 128_000,
            model: "sim-1".to_owned(),
        }
    }
}

/// Probabilities (each in `0.0..=1.0`) that one request attempt fails in a given way.
///
/// They are exclusive and drawn in field order; when they sum above 1 the later ones are
/// cut short. All default to 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ErrorRates {
    /// HTTP 429 with `retry-after-ms` ([`ErrorClass::RateLimited`](foya_protocol::ErrorClass)).
    pub rate_limited: f64,
    /// Anthropic 529 / OpenAI 503 ([`ErrorClass::Overloaded`](foya_protocol::ErrorClass)).
    pub overloaded: f64,
    /// HTTP 400 context length exceeded
    /// ([`ErrorClass::ContextOverflow`](foya_protocol::ErrorClass)).
    pub context_overflow: f64,
    /// The stream stops after some content, without its end marker (the caller reports
    /// [`ErrorClass::StreamInterrupted`](foya_protocol::ErrorClass)).
    pub stream_cut: f64,
}
