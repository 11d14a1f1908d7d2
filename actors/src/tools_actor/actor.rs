//! The ToolActor's single handler: one tool call from gate to `tool_finished`.

use super::approval::{Gate, approval_needed, sandbox_for};
use super::{ToolMsg, prepare_call};
use crate::session::{ApprovalAnswer, SessionMsg};
use crate::tools::{ProgressSink, Tool, ToolContext, ToolOutput};
use crate::turn::TurnMsg;
use foya_protocol::event::Delta;
use foya_protocol::{EventKind, RunId, SessionConfig, SessionId, ToolCall, ToolMessage};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The ToolActor.
#[derive(Debug)]
pub(crate) struct ToolActor;

/// What a ToolActor is started with.
#[derive(Debug)]
pub(crate) struct ToolArgs {
    pub session: ActorRef<SessionMsg>,
    pub turn: ActorRef<TurnMsg>,
    pub session_id: SessionId,
    pub run_id: RunId,
    pub step: u32,
    pub index: usize,
    pub call: ToolCall,
    pub tool: Option<Arc<dyn Tool>>,
    pub config: SessionConfig,
    pub cancel: CancellationToken,
}

/// Progress of a running call: `tool_update` events (persisted, in order with the call's
/// other events: casts to the session keep mailbox order) and live `tool_output` deltas.
struct Progress {
    session: ActorRef<SessionMsg>,
    run_id: RunId,
    call: ToolCall,
}

impl ProgressSink for Progress {
    fn update(&self, message: String) {
        let kind = EventKind::ToolUpdate {
            tool_call_id: self.call.id.clone(),
            message,
        };
        let _ = self.session.cast(SessionMsg::Append {
            run_id: self.run_id,
            kinds: vec![kind],
            reply: None,
        });
    }

    fn output(&self, chunk: String) {
        let delta = Delta::ToolOutput {
            tool_call_id: self.call.id.clone(),
            chunk,
        };
        let _ = self.session.cast(SessionMsg::PublishDelta {
            run_id: self.run_id,
            delta,
        });
    }
}

impl ToolArgs {
    async fn append(&self, kinds: Vec<EventKind>) -> Result<(), ActorProcessingErr> {
        let run_id = self.run_id;
        match self
            .session
            .call(
                |reply| SessionMsg::Append {
                    run_id,
                    kinds,
                    reply: Some(reply),
                },
                None,
            )
            .await?
        {
            CallResult::Success(Ok(_)) => Ok(()),
            CallResult::Success(Err(e)) => Err(e.into()),
            CallResult::Timeout | CallResult::SenderError => Err("append not answered".into()),
        }
    }

    /// Asks the session for a decision; a cancel while waiting reads as "cancelled".
    async fn ask(&self, action: String, reason: String, grant_key: String) -> ApprovalAnswer {
        let request = self.session.call(
            |reply| SessionMsg::RequestApproval {
                run_id: self.run_id,
                tool_call_id: self.call.id.clone(),
                tool_name: self.call.name.clone(),
                action,
                reason,
                grant_key,
                reply,
            },
            None,
        );
        let denied = |m: &str| ApprovalAnswer {
            allowed: false,
            message: Some(m.into()),
        };
        tokio::select! {
            () = self.cancel.cancelled() => denied(crate::turn::CANCELLED),
            answer = request => match answer {
                Ok(CallResult::Success(answer)) => answer,
                _ => denied("the approval request was dropped"),
            },
        }
    }

    /// Runs the call to its result.
    #[tracing::instrument(
        name = "tool_call",
        skip_all,
        fields(session.id = %self.session_id, turn.run_id = %self.run_id, tool.name = %self.call.name)
    )]
    async fn run(&self) -> Result<ToolOutput, ActorProcessingErr> {
        let tool = match prepare_call(self.tool.as_ref(), &self.call) {
            Ok(tool) => tool,
            Err(message) => return Ok(ToolOutput::error(message)),
        };
        let spec = tool.spec();
        let mode = self.config.approval_mode;
        match approval_needed(mode, spec, &self.call.arguments) {
            Gate::Allow => {}
            Gate::Deny(message) => return Ok(ToolOutput::error(message)),
            Gate::Ask {
                action,
                reason,
                grant_key,
            } => {
                let answer = self.ask(action, reason, grant_key).await;
                if !answer.allowed {
                    let message = answer.message.unwrap_or_else(|| "denied".into());
                    return Ok(ToolOutput::error(message));
                }
            }
        }
        self.append(vec![EventKind::ToolStarted {
            tool_call_id: self.call.id.clone(),
            name: self.call.name.clone(),
        }])
        .await?;
        let ctx = ToolContext {
            cwd: self.config.cwd.clone(),
            project_id: self.config.project_id.clone(),
            approval_mode: mode,
            session_id: self.session_id,
            run_id: self.run_id,
            step: self.step,
            tool_call_id: self.call.id.clone(),
            sandbox: sandbox_for(mode),
        };
        let progress = Progress {
            session: self.session.clone(),
            run_id: self.run_id,
            call: self.call.clone(),
        };
        let started = Instant::now();
        let timeout = Duration::from_millis(spec.default_timeout_ms.max(1));
        let call = tool.call(
            &ctx,
            self.call.arguments.clone(),
            self.cancel.clone(),
            &progress,
        );
        let output = match tokio::time::timeout(timeout, call).await {
            Ok(output) => output,
            Err(_) => ToolOutput::error(format!("timed out after {} ms", spec.default_timeout_ms)),
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.append(vec![EventKind::ToolFinished {
            tool_call_id: self.call.id.clone(),
            is_error: output.is_error,
            duration_ms,
        }])
        .await?;
        Ok(output)
    }
}

impl Actor for ToolActor {
    type Msg = ToolMsg;
    type State = ToolArgs;
    type Arguments = ToolArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ToolMsg>,
        args: ToolArgs,
    ) -> Result<ToolArgs, ActorProcessingErr> {
        myself.cast(ToolMsg::Run)?;
        Ok(args)
    }

    async fn handle(
        &self,
        myself: ActorRef<ToolMsg>,
        msg: ToolMsg,
        args: &mut ToolArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolMsg::Run => {
                let output = args.run().await?;
                let result = ToolMessage {
                    tool_call_id: args.call.id.clone(),
                    content: output.content,
                    is_error: output.is_error,
                };
                let _ = args.turn.cast(TurnMsg::ToolDone {
                    index: args.index,
                    result,
                });
                myself.stop(None);
            }
        }
        Ok(())
    }
}
