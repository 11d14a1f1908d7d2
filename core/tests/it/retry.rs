//! A retry policy read from a config file is checked with a typed error.

use foya_core::retry::{MAX_DELAY_LIMIT_MS, RetryPolicy, RetryPolicyError};

#[test]
fn an_insane_policy_is_refused_with_the_key_that_is_wrong() {
    let none = RetryPolicy {
        max_attempts: 0,
        ..RetryPolicy::default()
    };
    assert_eq!(none.check(), Err(RetryPolicyError::NoAttempts));
    let long = RetryPolicy {
        max_delay_ms: MAX_DELAY_LIMIT_MS + 1,
        ..RetryPolicy::default()
    };
    let error = long.check().unwrap_err();
    assert_eq!(
        error,
        RetryPolicyError::MaxDelayTooLong(MAX_DELAY_LIMIT_MS + 1)
    );
    assert_eq!(
        error.to_string(),
        "max_delay_ms = 3600001: at most 3600000 (one hour)"
    );
    assert_eq!(RetryPolicy::default().check(), Ok(()));
}
