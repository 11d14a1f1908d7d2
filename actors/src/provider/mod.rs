//! Model providers: the `foya-providers` crate (the `ModelClient` seam, wire codecs, HTTP,
//! classification, retry, redaction, scripted and simulated clients), re-exported under
//! the path they had in this crate.

pub use foya_providers::*;
pub mod config;
