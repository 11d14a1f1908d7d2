//! The client side of one MCP connection: what Foya announces in `initialize` and what
//! it does with the server's notifications.
//!
//! Owns: routing `notifications/progress` to the running call (by progress token, over a
//! broadcast channel each call subscribes to before it sends its request), marking the
//! tool list stale on `notifications/tools/list_changed`. Must not: block (each callback
//! returns at once).

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::broadcast;

/// A progress notification: its token and the text shown as a `tool_update`.
pub(crate) type Progress = (ProgressToken, String);

/// The handler of one server's connection (shared by its restarts).
#[derive(Debug, Clone)]
pub(crate) struct Handler {
    pub(crate) server: Arc<str>,
    pub(crate) progress: broadcast::Sender<Progress>,
    /// Set by `notifications/tools/list_changed`: the next listing asks the server again.
    pub(crate) tools_changed: Arc<AtomicBool>,
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let amount = match params.total {
            Some(total) => format!("{}/{}", params.progress, total),
            None => format!("{}", params.progress),
        };
        let text = match params.message {
            Some(message) => format!("{message} ({amount})"),
            None => format!("progress {amount}"),
        };
        // No receiver: the call already ended.
        let _ = self.progress.send((params.progress_token, text));
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::debug!(mcp.server = %self.server, "tools/list_changed");
        self.tools_changed.store(true, Ordering::SeqCst);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("foya", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// At most `max` chars of `text`, with `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
