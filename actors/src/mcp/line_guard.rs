//! Owns [`LineGuard`]: a stdio server's stdout as rmcp reads it, with a message too long
//! to take answered at once instead of dropped.
//!
//! rmcp's stdio transport drops a line longer than its
//! [`rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH`] (only logging it), so the call
//! it answered would wait for its whole tool timeout and then read as "did not answer".
//! The guard ends such a line early for rmcp (a truncated line, which rmcp ignores as
//! unparsable), drops the rest, and then hands rmcp a JSON-RPC error response with the
//! line's id (read from its first bytes) saying how long the message was: the call
//! fails at once with the real cause. A line whose id is not among its first
//! [`HEAD_BYTES`] is only dropped, as rmcp would.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Longest line passed on: under rmcp's limit, with room for the line end the guard adds.
pub(super) const MAX_LINE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH - 1024;

/// How much of a line's start is kept to find its id.
const HEAD_BYTES: usize = 4096;

/// `inner` (a server's stdout) with lines over `limit` bytes answered as errors.
pub(super) struct LineGuard<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line seen so far (passed on or dropped).
    line_len: usize,
    /// The current line's first [`HEAD_BYTES`].
    head: Vec<u8>,
    /// Whether the current line is over the limit (its rest is dropped).
    dropping: bool,
    /// Bytes the guard owes the reader (passed-on input, then its own lines).
    pending: Vec<u8>,
    scratch: Vec<u8>,
    /// Set when a `notifications/tools/list_changed` line is read: here, in the order of
    /// the stream, so that a call answered after it never sees the old list (rmcp hands
    /// notifications to the handler on a task of their own).
    tools_changed: Option<Arc<AtomicBool>>,
}

impl<R> LineGuard<R> {
    /// `inner` guarded with [`MAX_LINE_BYTES`].
    pub(super) fn new(inner: R) -> Self {
        Self::with_limit(inner, MAX_LINE_BYTES)
    }

    /// `inner` guarded with `limit` bytes per line.
    pub(super) fn with_limit(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit,
            line_len: 0,
            head: Vec::new(),
            dropping: false,
            pending: Vec::new(),
            scratch: vec![0; 64 * 1024],
            tools_changed: None,
        }
    }

    /// Sets `flag` when the server announces that its tool list changed.
    pub(super) fn flagging_tools_changed(mut self, flag: Arc<AtomicBool>) -> Self {
        self.tools_changed = Some(flag);
        self
    }

    /// Takes in `bytes` read from the server, putting in `pending` what the reader gets.
    fn take_in(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|b| *b == b'\n');
            let (part, rest) = match end {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            let room = HEAD_BYTES.saturating_sub(self.head.len());
            self.head.extend_from_slice(&part[..part.len().min(room)]);
            if !self.dropping {
                let passed = part.len().min(self.limit.saturating_sub(self.line_len));
                self.pending.extend_from_slice(&part[..passed]);
                if passed < part.len() {
                    // Over the limit: end the line for rmcp (it ignores a truncated one).
                    self.dropping = true;
                    self.pending.push(b'\n');
                }
            }
            self.line_len = self.line_len.saturating_add(part.len());
            if end.is_some() {
                self.end_line();
            }
            bytes = rest;
        }
    }

    /// At a line's end: passes the newline on, or answers an oversized line's request.
    fn end_line(&mut self) {
        if self.dropping {
            tracing::warn!(
                bytes = self.line_len,
                limit = self.limit,
                "MCP server message over the line limit"
            );
            if let Some(id) = head_id(&self.head) {
                let message = format!(
                    "the MCP server's answer was {} bytes, over the {}-byte limit of one message",
                    self.line_len, self.limit
                );
                let error = serde_json::json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32603, "message": message}});
                self.pending.extend_from_slice(error.to_string().as_bytes());
                self.pending.push(b'\n');
            }
        } else {
            self.pending.push(b'\n');
            if let Some(flag) = &self.tools_changed
                && self.line_len <= HEAD_BYTES
                && is_tools_list_changed(&self.head)
            {
                flag.store(true, Ordering::SeqCst);
            }
        }
        self.dropping = false;
        self.line_len = 0;
        self.head.clear();
    }

    /// Moves owed bytes into `buf`.
    fn give(&mut self, buf: &mut ReadBuf<'_>) {
        let n = self.pending.len().min(buf.remaining());
        buf.put_slice(&self.pending[..n]);
        self.pending.drain(..n);
    }
}

/// Whether `line` is the JSON-RPC notification `notifications/tools/list_changed`.
fn is_tools_list_changed(line: &[u8]) -> bool {
    const METHOD: &[u8] = b"notifications/tools/list_changed";
    if !line.windows(METHOD.len()).any(|w| w == METHOD) {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|message| {
        message.get("id").is_none()
            && message.get("method").and_then(serde_json::Value::as_str)
                == Some("notifications/tools/list_changed")
    })
}

/// The top-level `id` of a JSON-RPC message from its first bytes: the value after the
/// first `"id":` that comes before any `"result"` or `"error"` key.
fn head_id(head: &[u8]) -> Option<serde_json::Value> {
    let text = String::from_utf8_lossy(head);
    let at = text.find("\"id\"")?;
    let body = ["\"result\"", "\"error\""]
        .iter()
        .filter_map(|k| text.find(k))
        .min()
        .unwrap_or(usize::MAX);
    if at > body {
        return None;
    }
    let rest = text[at + 4..].trim_start().strip_prefix(':')?;
    let value = serde_json::Deserializer::from_str(rest)
        .into_iter::<serde_json::Value>()
        .next()?
        .ok()?;
    (value.is_number() || value.is_string()).then_some(value)
}

impl<R: AsyncRead + Unpin> AsyncRead for LineGuard<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                this.give(buf);
                return Poll::Ready(Ok(()));
            }
            let mut scratch = std::mem::take(&mut this.scratch);
            let mut read = ReadBuf::new(&mut scratch);
            let polled = Pin::new(&mut this.inner).poll_read(cx, &mut read);
            let filled = read.filled().len();
            if let Poll::Ready(Ok(())) = polled
                && filled > 0
            {
                this.take_in(&scratch[..filled]);
            }
            this.scratch = scratch;
            match polled {
                Poll::Ready(Ok(())) if filled == 0 => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncReadExt as _;

    async fn through(input: &[u8], limit: usize) -> String {
        let mut out = String::new();
        LineGuard::with_limit(input, limit)
            .read_to_string(&mut out)
            .await
            .unwrap();
        out
    }

    #[tokio::test]
    async fn a_tools_list_changed_notification_is_flagged_before_the_next_line_is_read() {
        let input: &[u8] =
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\
            {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n";
        let flag = Arc::new(AtomicBool::new(false));
        let mut guard = LineGuard::new(input).flagging_tools_changed(Arc::clone(&flag));
        let mut out = String::new();
        guard.read_to_string(&mut out).await.unwrap();
        assert_eq!(out.as_bytes(), input);
        assert!(flag.load(Ordering::SeqCst));
        // Only the notification itself: a result or request naming it is not one.
        for other in [
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"text\":\"notifications/tools/list_changed\"}}\n"[..],
            b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"notifications/tools/list_changed\"}\n",
        ] {
            let flag = Arc::new(AtomicBool::new(false));
            let mut guard = LineGuard::new(other).flagging_tools_changed(Arc::clone(&flag));
            let mut out = String::new();
            guard.read_to_string(&mut out).await.unwrap();
            assert!(!flag.load(Ordering::SeqCst), "{out}");
        }
    }

    #[tokio::test]
    async fn short_lines_pass_unchanged() {
        let input = b"{\"id\":1}\n\n{\"a\":2}\npartial";
        assert_eq!(through(input, 16).await.as_bytes(), input);
    }

    #[tokio::test]
    async fn an_oversized_answer_becomes_an_error_response_with_its_id() {
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n{{\"id\":8}}\n",
            "x".repeat(100)
        );
        let out = through(long.as_bytes(), 40).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], &long[..40]);
        let error: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(error["id"], 7);
        assert_eq!(
            error["error"]["message"],
            "the MCP server's answer was 136 bytes, over the 40-byte limit of one message"
        );
        assert_eq!(lines[2..], ["{\"id\":8}"]);
    }

    #[tokio::test]
    async fn an_oversized_line_without_an_id_is_only_dropped() {
        let long = format!(
            "{{\"result\":{{\"id\":3,\"x\":\"{}\"}}}}\nok\n",
            "y".repeat(80)
        );
        let out = through(long.as_bytes(), 30).await;
        assert_eq!(out, format!("{}\nok\n", &long[..30]));
        assert_eq!(head_id(b"{\"id\": \"a-1\", \"error\""), Some("a-1".into()));
        assert_eq!(head_id(b"{\"id\": {\"x\":1}}"), None);
    }
}
