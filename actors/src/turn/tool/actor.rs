//! The ToolActor's single handler: one prepared, allowed call run under its sandbox to
//! its result (the TurnActor's machine adds what the hooks said and commits it with
//! `tool_finished`).

use super::ToolMsg;
use crate::attachments::AttachmentStore;
use crate::tools::builtin::CappedOutput;
use crate::tools::protected::Protected;
use crate::tools::{PreparedCall, ProgressSink, SandboxPolicy, ToolContext, ToolOutput, ToolSpec};
use crate::turn::TurnMsg;
use crate::turn::port::Port;
use foya_protocol::event::Delta;
use foya_protocol::{
    AttachmentRef, EventKind, RunId, SessionConfig, SessionId, ToolCall, ToolCallId, ToolMessage,
};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The ToolActor.
#[derive(Debug)]
pub(crate) struct ToolActor;

/// What a ToolActor is started with: what every call of its turn shares.
#[derive(Debug)]
pub(crate) struct ToolEnv {
    /// The session that runs the turn.
    pub session: Port,
    pub turn: ActorRef<TurnMsg>,
    pub session_id: SessionId,
    pub run_id: RunId,
    pub config: SessionConfig,
    /// The runtime's tool state, handed to the call.
    pub shared: crate::tools::ToolState,
    /// Where the images a tool returns are kept (none: they are only named in the
    /// result's text).
    pub attachments: Option<Arc<AttachmentStore>>,
}

/// One call for a ToolActor to run ([`super::ToolMsg::Run`]): everything that is the
/// call's own, so nothing of a previous call on the same actor reaches it.
#[derive(Debug)]
pub(crate) struct ToolJob {
    pub step: u32,
    pub index: usize,
    pub call: ToolCall,
    /// The validated call to run.
    pub prepared: PreparedCall,
    /// The sandbox the Approval Gateway (or a person) decided.
    pub sandbox: SandboxPolicy,
    /// The working directory's protected paths (with the hook scripts of the runtime).
    pub protected: Protected,
    /// The call's token: a child of the turn's.
    pub cancel: CancellationToken,
    /// The call's live output so far (what `tool_output` deltas carried, capped like a
    /// tool's output), shared with the turn: a cancel kills this actor and the turn
    /// keeps what the call had printed in its "cancelled" result.
    pub partial: PartialOutput,
}

/// Output a running call has streamed so far; see [`ToolJob::partial`].
pub(crate) type PartialOutput = Arc<std::sync::Mutex<CappedOutput>>;

/// Extra time, in milliseconds, the backstop timeout gives a tool beyond its own limit,
/// so a tool that enforces its limit itself (`shell` kills its process group and reports
/// the output so far) always does so first.
pub(crate) const TIMEOUT_GRACE_MS: u64 = 2_000;

/// The backstop timeout of a call, in milliseconds: the larger of the tool's
/// `default_timeout_ms` and the call's `timeout_ms` argument (only when the tool's
/// schema declares one, which bounds it), plus [`TIMEOUT_GRACE_MS`].
fn backstop_ms(spec: &ToolSpec, args: &serde_json::Value) -> u64 {
    let declared = spec.parameters.pointer("/properties/timeout_ms").is_some();
    let asked = args
        .get("timeout_ms")
        .and_then(serde_json::Value::as_u64)
        .filter(|_| declared);
    spec.default_timeout_ms
        .max(asked.unwrap_or(0))
        .saturating_add(TIMEOUT_GRACE_MS)
}

/// Progress of a running call: `tool_update` events (persisted, in order with the call's
/// other events: casts to the session keep mailbox order) and live `tool_output` deltas.
struct Progress {
    session: Port,
    run_id: RunId,
    call: ToolCall,
    partial: PartialOutput,
}

impl ProgressSink for Progress {
    fn update(&self, message: String) {
        let kind = EventKind::ToolUpdate {
            tool_call_id: self.call.id.clone(),
            message,
        };
        self.session.append_later(self.run_id, vec![kind]);
    }

    fn output(&self, chunk: String) {
        // Recorded before the delta is sent: whoever saw the chunk can rely on a cancel
        // keeping it.
        self.partial
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(chunk.as_bytes());
        let delta = Delta::ToolOutput {
            tool_call_id: self.call.id.clone(),
            chunk,
        };
        self.session.publish(self.run_id, vec![delta]);
    }
}

impl ToolEnv {
    /// Runs `job` to its result.
    #[tracing::instrument(
        name = "tool_call",
        skip_all,
        fields(session.id = %self.session_id, turn.run_id = %self.run_id, tool.name = %job.call.name)
    )]
    async fn run(&self, job: &mut ToolJob) -> (ToolOutput, u64) {
        let tool = Arc::clone(&job.prepared.tool);
        let args = std::mem::take(&mut job.prepared.args);
        let sandbox = job.sandbox;
        let spec = tool.spec();
        let mode = self.config.approval_mode;
        // The call's own token: fires with the turn's, and when the call times out (its
        // future is dropped then, but work it started may go on and must learn).
        let cancel = job.cancel.child_token();
        let ctx = ToolContext {
            cwd: self.config.cwd.clone(),
            project_id: self.config.project_id.clone(),
            approval_mode: mode,
            session_id: self.session_id,
            run_id: self.run_id,
            step: job.step,
            tool_call_id: job.call.id.clone(),
            sandbox,
            protected: job.protected.clone(),
            shared: self.shared.clone(),
            cancel: cancel.clone(),
        };
        let progress = Progress {
            session: self.session.clone(),
            run_id: self.run_id,
            call: job.call.clone(),
            partial: Arc::clone(&job.partial),
        };
        let started = Instant::now();
        let limit_ms = backstop_ms(spec, &args);
        let call = tool.call(&ctx, args, cancel.clone(), &progress);
        let output = match tokio::time::timeout(Duration::from_millis(limit_ms), call).await {
            Ok(output) => output,
            Err(_) => {
                cancel.cancel();
                ToolOutput::error(format!("timed out after {limit_ms} ms"))
            }
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        (output, duration_ms)
    }
}

impl Actor for ToolActor {
    type Msg = ToolMsg;
    type State = ToolEnv;
    type Arguments = ToolEnv;

    async fn pre_start(
        &self,
        _myself: ActorRef<ToolMsg>,
        env: ToolEnv,
    ) -> Result<ToolEnv, ActorProcessingErr> {
        Ok(env)
    }

    async fn handle(
        &self,
        myself: ActorRef<ToolMsg>,
        msg: ToolMsg,
        env: &mut ToolEnv,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolMsg::Run(mut job) => {
                let outcome = env.run(&mut job).await;
                if job.cancel.is_cancelled() {
                    // The turn is being cancelled (its token fires before `Cancel` is
                    // sent): it writes this call's "cancelled" result itself. Reporting
                    // now would race that. Nothing more will run here.
                    myself.stop(None);
                    return Ok(());
                }
                let (output, duration_ms) = outcome;
                let result =
                    result_message(job.call.id.clone(), output, env.attachments.clone()).await;
                // Back in the turn's pool once this is handled: the next call may come.
                let _ = env.turn.cast(TurnMsg::ToolDone {
                    index: job.index,
                    result,
                    duration_ms,
                });
            }
        }
        Ok(())
    }
}

/// The result of call `id`: `output`'s text, with its images kept in `store` and
/// referenced by attachment id. An image the store refuses (not an image of its declared
/// type, unreadable header) or cannot write gets a line saying so; without a store the
/// images stay named in the text only.
async fn result_message(
    id: ToolCallId,
    output: ToolOutput,
    store: Option<Arc<AttachmentStore>>,
) -> ToolMessage {
    let mut message = ToolMessage::text(id, output.content, output.is_error);
    let Some(store) = store.filter(|_| !output.images.is_empty()) else {
        return message;
    };
    let kept = tokio::task::spawn_blocking(move || {
        output
            .images
            .iter()
            .map(|image| {
                store
                    .put(&image.bytes, &image.media_type)
                    .map(|id| AttachmentRef {
                        id,
                        media_type: Some(image.media_type.clone()),
                    })
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    for (n, kept) in kept.into_iter().enumerate() {
        match kept {
            Ok(reference) => message.images.push(reference),
            Err(e) => message.content.push_str(&format!(
                "\n[image {} of the result not shown to the model: {e}]",
                n + 1
            )),
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::{TIMEOUT_GRACE_MS, backstop_ms};
    use crate::tools::Tool;
    use crate::tools::builtin::{SHELL_DEFAULT_TIMEOUT_MS, Shell, read_file};
    use crate::tools::sandbox::SandboxRunner;
    use serde_json::json;

    #[test]
    fn the_backstop_covers_a_declared_timeout_argument_plus_grace() {
        let shell = Shell::new(SandboxRunner::new("/nonexistent"));
        let read = read_file();
        let cases = [
            (
                shell.spec(),
                json!({"command": "x"}),
                SHELL_DEFAULT_TIMEOUT_MS,
            ),
            (
                shell.spec(),
                json!({"timeout_ms": 1_000}),
                SHELL_DEFAULT_TIMEOUT_MS,
            ),
            (shell.spec(), json!({"timeout_ms": 500_000}), 500_000),
            // Not declared by read_file: ignored.
            (read.spec(), json!({"timeout_ms": 500_000}), 30_000),
        ];
        for (spec, args, limit) in cases {
            assert_eq!(backstop_ms(spec, &args), limit + TIMEOUT_GRACE_MS, "{args}");
        }
    }
}
