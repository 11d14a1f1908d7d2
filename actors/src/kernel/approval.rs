//! What the actors hand the façade about approvals (the value is the session machine's,
//! in `foya-core`).

pub use foya_core::session::ApprovalRequest;
