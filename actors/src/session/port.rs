//! The session's side of the turn's port ([`crate::turn::port::SessionPort`]): each call
//! is a message to the SessionActor.

use super::SessionMsg;
use crate::turn::port::{ApprovalQuestion, SessionPort};
use foya_core::session::ApprovalAnswer;
use foya_protocol::{Delta, EventKind, RunId};
use ractor::rpc::CallResult;
use ractor::{ActorProcessingErr, ActorRef};

#[async_trait::async_trait]
impl SessionPort for ActorRef<SessionMsg> {
    async fn append(&self, run_id: RunId, kinds: Vec<EventKind>) -> Result<(), ActorProcessingErr> {
        let answer = self
            .call(
                |reply| SessionMsg::Append {
                    run_id,
                    kinds,
                    reply: Some(reply),
                },
                None,
            )
            .await?;
        match answer {
            CallResult::Success(Ok(())) => Ok(()),
            CallResult::Success(Err(e)) => Err(e.into()),
            CallResult::Timeout | CallResult::SenderError => {
                Err("the session did not answer an append".into())
            }
        }
    }

    fn append_later(&self, run_id: RunId, kinds: Vec<EventKind>) {
        // The session gone means the turn is going too; nothing to tell.
        let _ = self.cast(SessionMsg::Append {
            run_id,
            kinds,
            reply: None,
        });
    }

    fn publish(&self, run_id: RunId, deltas: Vec<Delta>) {
        let _ = self.cast(SessionMsg::PublishDeltas { run_id, deltas });
    }

    async fn ask_approval(&self, question: ApprovalQuestion) -> Option<ApprovalAnswer> {
        let ApprovalQuestion {
            run_id,
            tool_call_id,
            tool_name,
            action,
            reason,
            grant_key,
        } = question;
        let answer = self
            .call(
                |reply| SessionMsg::RequestApproval {
                    run_id,
                    tool_call_id,
                    tool_name,
                    action,
                    reason,
                    grant_key,
                    reply,
                },
                None,
            )
            .await;
        match answer {
            Ok(CallResult::Success(answer)) => Some(answer),
            _ => None,
        }
    }
}
