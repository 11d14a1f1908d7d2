//! Retry policy for model requests: which failures retry, and how long to wait.
//!
//! Transient classes (see [`foya_protocol::ErrorClass::is_transient`]) retry with exponential backoff and
//! full jitter, honouring the provider's retry-after, bounded by `max_attempts` and
//! `max_delay_ms`. Everything else fails the step at once; context overflow is handed to
//! the turn for its one compaction retry and is never retried as is.
//!
//! `invalid_response` (a `data:` payload that is not JSON, or a stream with no output at
//! all) is transient like `stream_interrupted`: it is what a corrupted or truncated
//! transfer looks like (a proxy, a gateway, an overloaded server), and a new request
//! usually succeeds. The alternative, skipping the bad chunk as Codex does, loses text
//! silently; failing at once (the AI SDK, opencode) makes the user resend by hand. A
//! server that always answers garbage costs at most `max_attempts` requests, then the
//! step fails with the error's message (format and excerpt). Bytes that are not UTF-8
//! are the same case. Not retried: an `invalid_response` that carries an HTTP status,
//! which is about the whole response rather than its transfer (a 200 that is not an
//! event stream, e.g. an HTML page from a wrong base URL: the same URL answers the same).

use foya_protocol::ProviderError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The most attempts a configured policy may make, the first included: 100.
///
/// Codex CLI caps its request and stream retries at 100 too. A few attempts ride out a
/// blip; a hundred already cover many minutes of backoff, and more only prolong an
/// outage while the turn looks stuck (a typo such as `4000000000` would retry forever).
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;

/// The longest single wait a configured policy may ask for (`max_delay_ms`): one hour
/// (3 600 000 ms). A turn that would wait longer is better failed and resent by hand.
pub const MAX_DELAY_LIMIT_MS: u64 = 3_600_000;

/// Why a retry policy cannot be loaded ([`RetryPolicy::check`]): one line naming the
/// TOML key and its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryPolicyError {
    /// `max_attempts = 0`.
    #[error(
        "max_attempts = 0: it counts every attempt, the first included, so it is at least 1 \
         (1 disables retries)"
    )]
    NoAttempts,
    /// `max_attempts` above [`MAX_ATTEMPTS_LIMIT`].
    #[error(
        "max_attempts = {0}: at most {MAX_ATTEMPTS_LIMIT} (every attempt, the first \
         included); more only prolong an outage"
    )]
    TooManyAttempts(u32),
    /// `base_delay_ms = 0`.
    #[error(
        "base_delay_ms = 0: at least 1 (with 0 every retry is sent at once, a busy loop \
         against a failing server)"
    )]
    NoBaseDelay,
    /// `max_delay_ms` below `base_delay_ms`.
    #[error(
        "max_delay_ms = {max_delay_ms} is below base_delay_ms = {base_delay_ms}: it caps \
         every wait, so it is at least the base delay"
    )]
    MaxBelowBase {
        /// The configured cap.
        max_delay_ms: u64,
        /// The configured base.
        base_delay_ms: u64,
    },
    /// `max_delay_ms` above [`MAX_DELAY_LIMIT_MS`].
    #[error("max_delay_ms = {0}: at most {MAX_DELAY_LIMIT_MS} (one hour)")]
    MaxDelayTooLong(u64),
}

/// How a failed model request is retried.
///
/// As TOML (`[profiles.NAME.retry]`) every field is optional and an unknown one is an
/// error (a misspelt `max_attempt` must not silently leave the default); a loaded policy
/// must pass [`RetryPolicy::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (default 4). 1 disables retries.
    pub max_attempts: u32,
    /// Backoff base in milliseconds: attempt n waits up to `base * 2^(n-2)` (default 1000).
    pub base_delay_ms: u64,
    /// Cap on any single wait, retry-after included, in milliseconds (default 60 000).
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay_ms: 1_000,
            max_delay_ms: 60_000,
        }
    }
}

impl RetryPolicy {
    /// Whether this policy is sane enough to load from a config file: `max_attempts` in
    /// `1..=`[`MAX_ATTEMPTS_LIMIT`], `base_delay_ms` at least 1, and `max_delay_ms`
    /// between `base_delay_ms` and [`MAX_DELAY_LIMIT_MS`]. Policies built in code are not
    /// checked (tests use 0 ms delays under paused time).
    ///
    /// # Errors
    /// The first field that is out of range, as `key = value: why` (one line, naming
    /// the TOML key).
    pub fn check(&self) -> Result<(), RetryPolicyError> {
        let Self {
            max_attempts,
            base_delay_ms,
            max_delay_ms,
        } = *self;
        if max_attempts == 0 {
            return Err(RetryPolicyError::NoAttempts);
        }
        if max_attempts > MAX_ATTEMPTS_LIMIT {
            return Err(RetryPolicyError::TooManyAttempts(max_attempts));
        }
        if base_delay_ms == 0 {
            return Err(RetryPolicyError::NoBaseDelay);
        }
        if max_delay_ms < base_delay_ms {
            return Err(RetryPolicyError::MaxBelowBase {
                max_delay_ms,
                base_delay_ms,
            });
        }
        if max_delay_ms > MAX_DELAY_LIMIT_MS {
            return Err(RetryPolicyError::MaxDelayTooLong(max_delay_ms));
        }
        Ok(())
    }

    /// The wait before attempt `next_attempt` (2 = first retry) after `error`, or `None`
    /// when the request must not be retried (non-transient class, or attempts used up).
    ///
    /// `jitter` is a number in `[0, 1)` (pass a random one; tests pass a fixed one). A
    /// provider retry-after is honoured exactly (capped at `max_delay_ms`); otherwise the
    /// wait is `jitter`-scaled exponential backoff with a floor of half the step.
    #[must_use]
    pub fn delay_for(
        &self,
        next_attempt: u32,
        error: &ProviderError,
        jitter: f64,
    ) -> Option<Duration> {
        if !retryable(error) || next_attempt > self.max_attempts || next_attempt < 2 {
            return None;
        }
        let ms = match error.retry_after_ms {
            Some(after) => after,
            None => {
                let exp = self
                    .base_delay_ms
                    .saturating_mul(1u64 << (next_attempt - 2).min(30));
                let jitter = jitter.clamp(0.0, 1.0);
                // Half fixed, half jittered ("equal jitter"): never a zero wait.
                exp / 2 + ((exp / 2) as f64 * jitter) as u64
            }
        };
        Some(Duration::from_millis(ms.min(self.max_delay_ms)))
    }
}

/// Whether `error` may be retried at all: a transient class, except an
/// `invalid_response` of a whole response (one with an HTTP status).
fn retryable(error: &ProviderError) -> bool {
    error.class.is_transient()
        && !(error.class == foya_protocol::ErrorClass::InvalidResponse && error.status.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use foya_protocol::ErrorClass;

    #[test]
    fn transient_errors_back_off_and_respect_retry_after_and_bounds() {
        let p = RetryPolicy::default();
        let server = ProviderError::new(ErrorClass::Server, "500");
        assert_eq!(
            p.delay_for(2, &server, 0.0),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            p.delay_for(3, &server, 1.0),
            Some(Duration::from_millis(2_000))
        );
        assert_eq!(p.delay_for(5, &server, 0.5), None);
        let mut limited = ProviderError::new(ErrorClass::RateLimited, "429");
        limited.retry_after_ms = Some(250);
        assert_eq!(
            p.delay_for(2, &limited, 0.9),
            Some(Duration::from_millis(250))
        );
        limited.retry_after_ms = Some(3_600_000);
        assert_eq!(
            p.delay_for(2, &limited, 0.9),
            Some(Duration::from_millis(60_000))
        );
        let garbled = ProviderError::new(ErrorClass::InvalidResponse, "not JSON");
        assert_eq!(
            p.delay_for(2, &garbled, 0.0),
            p.delay_for(
                2,
                &ProviderError::new(ErrorClass::StreamInterrupted, "cut"),
                0.0
            )
        );
        assert_eq!(
            p.delay_for(2, &garbled, 0.0),
            Some(Duration::from_millis(500))
        );
        assert_eq!(p.delay_for(5, &garbled, 0.0), None);
        let mut not_a_stream = ProviderError::new(ErrorClass::InvalidResponse, "text/html");
        not_a_stream.status = Some(200);
        assert_eq!(p.delay_for(2, &not_a_stream, 0.0), None);
        for class in [
            ErrorClass::QuotaExhausted,
            ErrorClass::ContextOverflow,
            ErrorClass::Auth,
        ] {
            assert_eq!(p.delay_for(2, &ProviderError::new(class, "x"), 0.5), None);
        }
    }
}
