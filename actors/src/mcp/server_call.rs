//! One `tools/call` of a [`Server`]: progress routed by token, the tool timeout, and
//! `notifications/cancelled` for a call that is abandoned (timeout, cancel, drop).

use super::{Cancels, Server};
use crate::mcp::handler::clip;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How a call ended.
pub(crate) enum CallOutcome {
    /// The server's result (`CallToolResult` as JSON).
    Result(serde_json::Value),
    /// Failed before or without a result (the message says why).
    Failed(String),
    /// The call's cancellation token fired (`notifications/cancelled` was sent).
    Cancelled,
}

impl Server {
    /// Calls tool `tool` (the server's name for it) with `arguments`; progress lines go
    /// to `on_progress`. A timeout or a fired `cancel` sends `notifications/cancelled`
    /// (and so does dropping the future while the request is in flight).
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        cancel: &CancellationToken,
        on_progress: &(dyn Fn(String) + Send + Sync),
    ) -> CallOutcome {
        let (peer, generation) = {
            let mut slot = self.slot.lock().await;
            match self.connect(&mut slot).await {
                Ok(peer) => (peer, slot.generation),
                Err(message) => return CallOutcome::Failed(message),
            }
        };
        let mut progress = self.handler.progress.subscribe();
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(e) => {
                let message = format!("MCP server `{}`: cannot send the call: {e}", self.name);
                self.connection_lost(generation, message.clone()).await;
                return CallOutcome::Failed(message);
            }
        };
        let token = handle.progress_token.clone();
        let mut abandoned = AbandonGuard {
            peer: Some(peer.clone()),
            id: handle.id.clone(),
            reason: "the turn was cancelled",
            sent: Arc::clone(&self.cancels),
        };
        let response = handle.await_response();
        tokio::pin!(response);
        let timeout_ms = self.config.tool_timeout_ms();
        let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                // The server answered (or the connection ended).
                result = &mut response => {
                    abandoned.peer = None;
                    return match result {
                        Ok(ServerResult::CallToolResult(result)) => {
                            serde_json::to_value(&result)
                                .map_or_else(|e| CallOutcome::Failed(e.to_string()), CallOutcome::Result)
                        }
                        Ok(_) => CallOutcome::Failed(format!(
                            "MCP server `{}` answered the call with something that is not a tool result",
                            self.name
                        )),
                        Err(rmcp::ServiceError::McpError(error)) => CallOutcome::Failed(format!(
                            "MCP server `{}` refused the call: {} (code {})",
                            self.name, error.message, error.code.0
                        )),
                        Err(e) => {
                            let message = format!(
                                "MCP server `{}` stopped answering during the call ({e}); it is \
                                 restarted on its next use",
                                self.name
                            );
                            self.connection_lost(generation, message.clone()).await;
                            CallOutcome::Failed(message)
                        }
                    };
                }
                // A progress notification of this call: a `tool_update`.
                Ok((of, text)) = progress.recv() => {
                    if of == token {
                        on_progress(clip(&text, 500));
                    }
                }
                // The turn was cancelled: the guard tells the server.
                () = cancel.cancelled() => {
                    abandoned.reason = "the turn was cancelled";
                    return CallOutcome::Cancelled;
                }
                // Hung past `tool_timeout_ms`: the guard tells the server.
                () = &mut deadline => {
                    abandoned.reason = "timeout";
                    abandoned.send().await;
                    return CallOutcome::Failed(format!(
                        "MCP server `{}` did not answer within {timeout_ms} ms (tool_timeout_ms); \
                         the call was cancelled",
                        self.name
                    ));
                }
            }
        }
    }
}

/// Sends `notifications/cancelled` for a request abandoned before its answer: on a
/// timeout at once, and when the call's future is dropped (a cancelled turn kills its
/// ToolActors) from a task the server's shutdown waits for.
struct AbandonGuard {
    peer: Option<Peer<RoleClient>>,
    id: rmcp::model::RequestId,
    reason: &'static str,
    sent: Cancels,
}

impl AbandonGuard {
    fn notification(&self) -> rmcp::model::CancelledNotification {
        rmcp::model::CancelledNotification::new(rmcp::model::CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some(self.reason.to_owned()),
        ))
    }

    /// Sends it now (bounded by 1 s).
    async fn send(&mut self) {
        if let Some(peer) = self.peer.take() {
            let notification = self.notification();
            let sent = peer.send_notification(notification.into());
            let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
        }
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let notification = self.notification();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let task = runtime.spawn(async move {
                let sent = peer.send_notification(notification.into());
                let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
            });
            let mut pending = self
                .sent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pending.retain(|t| !t.is_finished());
            pending.push(task);
        }
    }
}
