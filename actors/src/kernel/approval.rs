//! What the actors hand the façade about approvals.

use foya_protocol::{ApprovalRequestId, ToolCallId};

/// A tool call waiting for a decision ([`crate::SessionHandle::pending_approvals`],
/// answered with [`crate::SessionHandle::decide_approval`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// Answer it with this id.
    pub request_id: ApprovalRequestId,
    /// The call.
    pub tool_call_id: ToolCallId,
    /// Tool name.
    pub tool_name: String,
    /// The exact command or path.
    pub action: String,
    /// Why approval is needed.
    pub reason: String,
}
