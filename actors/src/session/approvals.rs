//! Approval plumbing of the SessionActor: a ToolActor's request is answered from a
//! persisted grant, denied at once when no approver subscription is attached, or parked
//! until `decide_approval` (the decision is persisted before the ToolActor hears it).

use super::ApprovalAnswer;
use super::SessionMsg;
use super::actor::{NO_APPROVER, PendingApproval, Session};
use crate::kernel::{RuntimeError, WithoutApprover};
use crate::outcome::ApprovalRequest;
use foya_protocol::{ApprovalDecision, ApprovalRequestId, EventKind};

impl Session {
    pub(super) async fn request_approval(&mut self, msg: SessionMsg) -> Result<(), RuntimeError> {
        let SessionMsg::RequestApproval {
            run_id,
            tool_call_id,
            tool_name,
            action,
            reason,
            grant_key,
            reply,
        } = msg
        else {
            return Ok(());
        };
        // An empty key offers no grant (protected paths, commands that run other code).
        if !grant_key.is_empty() && self.fold.grants.contains(&grant_key) {
            let _ = reply.send(ApprovalAnswer {
                allowed: true,
                message: None,
            });
            return Ok(());
        }
        let request_id = ApprovalRequestId::new();
        let request = ApprovalRequest {
            request_id,
            tool_call_id: tool_call_id.clone(),
            tool_name,
            action,
            reason,
        };
        let mut kinds = vec![EventKind::ApprovalRequested {
            request_id,
            tool_call_id: tool_call_id.clone(),
            tool_name: request.tool_name.clone(),
            action: request.action.clone(),
            reason: request.reason.clone(),
            grant: Some(grant_key.clone()),
        }];
        let approver = self.has_approver() || self.deps.without_approver == WithoutApprover::Wait;
        if !approver {
            kinds.push(EventKind::ApprovalDecided {
                request_id,
                tool_call_id: tool_call_id.clone(),
                decision: ApprovalDecision::Deny,
                message: Some(NO_APPROVER.into()),
                grant: None,
            });
        }
        if self.fold.open_turn.as_ref().map(|t| t.run_id) != Some(run_id) {
            return Ok(());
        }
        self.persist(Some(run_id), kinds).await?;
        if approver {
            self.approvals.insert(
                request_id,
                PendingApproval {
                    run_id,
                    request,
                    grant_key,
                    reply,
                },
            );
        } else {
            let _ = reply.send(ApprovalAnswer {
                allowed: false,
                message: Some(NO_APPROVER.into()),
            });
        }
        Ok(())
    }

    /// The requests waiting for a decision, oldest first.
    pub(super) fn pending_approvals(&self) -> Vec<ApprovalRequest> {
        let mut pending: Vec<ApprovalRequest> =
            self.approvals.values().map(|p| p.request.clone()).collect();
        pending.sort_by_key(|r| r.request_id);
        pending
    }

    pub(super) async fn decide(
        &mut self,
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
    ) -> Result<(), RuntimeError> {
        let Some(pending) = self.approvals.remove(&request_id) else {
            return Err(RuntimeError::UnknownApproval(request_id));
        };
        // "Allow for this session" of an action that offers no grant allows it once.
        let grant = (decision == ApprovalDecision::AllowForSession
            && !pending.grant_key.is_empty())
        .then(|| pending.grant_key.clone());
        self.persist(
            Some(pending.run_id),
            vec![EventKind::ApprovalDecided {
                request_id,
                tool_call_id: pending.request.tool_call_id,
                decision,
                message: message.clone(),
                grant,
            }],
        )
        .await?;
        let allowed = decision != ApprovalDecision::Deny;
        let message = if allowed {
            None
        } else {
            Some(message.unwrap_or_else(|| "denied by the user".into()))
        };
        let _ = pending.reply.send(ApprovalAnswer { allowed, message });
        Ok(())
    }
}
