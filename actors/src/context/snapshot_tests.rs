//! Snapshot tests of compiled contexts.
