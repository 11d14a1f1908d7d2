//! The turn's model streams: a task per model request (`stream.rs`), and the live relay of
//! a step's stream to the session (`relay.rs`). `crate::provider` stays a leaf (the
//! neutral request, the `ModelClient` seam and its backends); what a stream means for a
//! session or a turn lives here.

pub(crate) mod relay;
pub(crate) mod stream;
