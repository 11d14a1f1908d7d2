//! Approvals: a grant answers at once, without an approver the request waits or is
//! denied (per `WithoutApprover`), a person's decision is persisted before the call
//! hears it.

use super::*;

/// An approval request waiting for a decision.
#[derive(Debug)]
pub(super) struct PendingApproval {
    pub(super) run_id: RunId,
    pub(super) request: ApprovalRequest,
    pub(super) grant_key: String,
}

impl SessionMachine {
    pub(super) fn approval_requested(
        &mut self,
        run_id: RunId,
        request: ApprovalRequest,
        grant_key: String,
        approver_attached: bool,
        fx: &mut Effects,
    ) {
        let request_id = request.request_id;
        // An empty key offers no grant (protected paths, commands that run other code).
        if !grant_key.is_empty() && self.fold.grants.contains(&grant_key) {
            let answer = ApprovalAnswer {
                allowed: true,
                message: None,
            };
            return fx.push(Effect::AnswerApproval { request_id, answer });
        }
        if self.open_run() != Some(run_id) {
            return fx.push(Effect::DropApproval { request_id });
        }
        let mut kinds = vec![EventKind::ApprovalRequested {
            request_id,
            tool_call_id: request.tool_call_id.clone(),
            tool_name: request.tool_name.clone(),
            action: request.action.clone(),
            reason: request.reason.clone(),
            grant: Some(grant_key.clone()),
        }];
        let waits = approver_attached || self.settings.without_approver == WithoutApprover::Wait;
        if !waits {
            kinds.push(EventKind::ApprovalDecided {
                request_id,
                tool_call_id: request.tool_call_id.clone(),
                decision: ApprovalDecision::Deny,
                message: Some(NO_APPROVER.into()),
                grant: None,
            });
        }
        let parked = waits.then(|| {
            Box::new(PendingApproval {
                run_id,
                request,
                grant_key,
            })
        });
        let then = AfterCommit::ApprovalAsked { request_id, parked };
        self.append(Some(run_id), kinds, then, fx);
    }

    pub(super) fn decide(
        &mut self,
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
        fx: &mut Effects,
    ) {
        let Some(pending) = self.approvals.remove(&request_id) else {
            let error = Refusal::UnknownApproval(request_id);
            return fx.push(Effect::Reply(Answer::Done(Err(error))));
        };
        // "Allow for this session" of an action that offers no grant allows it once.
        let grant = (decision == ApprovalDecision::AllowForSession
            && !pending.grant_key.is_empty())
        .then_some(pending.grant_key);
        let allowed = decision != ApprovalDecision::Deny;
        let answer = ApprovalAnswer {
            allowed,
            message: (!allowed).then(|| {
                message
                    .clone()
                    .unwrap_or_else(|| "denied by the user".into())
            }),
        };
        let kind = EventKind::ApprovalDecided {
            request_id,
            tool_call_id: pending.request.tool_call_id,
            decision,
            message,
            grant,
        };
        let then = AfterCommit::ApprovalDecided { request_id, answer };
        self.append(Some(pending.run_id), vec![kind], then, fx);
    }
}
