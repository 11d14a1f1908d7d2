//! Empty: the test is `tests/turn.rs`.
