//! Provider failures: retries with backoff, the retry limit, non-retryable classes, a
//! crashed provider. Replaces, as rules, `turn_pressure_http`'s retry checks and the
//! retry cases of `session::tests` (the HTTP and timing tests stay end-to-end).

use super::*;
use expect_test::expect;

#[test]
fn a_transient_error_retries_after_a_backoff_until_the_attempts_are_used() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::RateLimited))
        .on(TurnInput::RetryElapsed { request: 1 })
        .on(failed(2, ErrorClass::Overloaded))
        .on(TurnInput::RetryElapsed { request: 2 })
        .on(failed(3, ErrorClass::Server));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(error rate_limited)
        < Append[provider_retry(2/3, 500 ms, rate_limited)]
        < StartTimer#1(500 ms)
        > RetryElapsed#1
        < StartStream#2(rebuilt from 3 events)
        > StreamEnded#2(error overloaded)
        < Append[provider_retry(3/3, 1437 ms, overloaded)]
        < StartTimer#2(1437 ms)
        > RetryElapsed#2
        < StartStream#3(rebuilt from 3 events)
        > StreamEnded#3(error server)
        < Append[turn_complete(failed, "server", server: Server)]
        < Finish
    "#]]);
}

#[test]
fn a_retry_that_succeeds_completes_the_turn() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::Network))
        .on(TurnInput::RetryElapsed { request: 1 })
        .on(answer(2, "ok"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(error network)
        < Append[provider_retry(2/3, 500 ms, network)]
        < StartTimer#1(500 ms)
        > RetryElapsed#1
        < StartStream#2(rebuilt from 3 events)
        > StreamEnded#2(done, "ok")
        < Append[assistant_message("ok"), usage, turn_complete(completed)]
        < Finish
    "#]]);
}

#[test]
fn a_non_retryable_error_fails_the_turn_with_its_class() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::Auth));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(error auth)
        < Append[turn_complete(failed, "auth", auth: Auth)]
        < Finish
    "#]]);
}

#[test]
fn a_stale_request_or_timer_is_ignored() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::RateLimited))
        .on(answer(1, "late"))
        .on(TurnInput::RetryElapsed { request: 7 });
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(error rate_limited)
        < Append[provider_retry(2/3, 500 ms, rate_limited)]
        < StartTimer#1(500 ms)
        > StreamEnded#1(done, "late")
        > RetryElapsed#7
    "#]]);
}

#[test]
fn an_overflow_without_automatic_compaction_fails_and_says_what_to_do() {
    let mut s = Scenario::started(TurnConfig {
        auto_compact: false,
        ..config()
    });
    s.on(failed(1, ErrorClass::ContextOverflow));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(error context_overflow)
        < Append[turn_complete(failed, "context_overflow", context_overflow: ContextOverflow (automatic compaction is off; send /compact or start a new session))]
        < Finish
    "#]]);
}
