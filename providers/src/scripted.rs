//! The scripted provider: replays a file of model responses (tests, demos).
//!
//! Stateless: the response used for a request is the number of assistant messages in the
//! request's history, so one script serves any number of concurrent sessions and works
//! after a restart. Past the end of the script the stream fails with `invalid_request`,
//! a message naming the script, how many responses it has and which one the session
//! asked for (`exhausted_message`).
//!
//! Script JSON (`{"responses":[...]}`), per response: `text`, `reasoning`, `tool_calls`
//! (`[{"id","name","arguments"}]`), `finish_reason` (default `tool_calls` when calls are
//! given, else `stop`), `usage` (`{"input_tokens","output_tokens"}`), `error`
//! (`{"class","message","retry_after_ms"}`: the response is that error), `chunk_chars`
//! (text fragment size, default 8), `delay_ms` (pause before each fragment) and
//! `fail_times` (with `error`: only the first N requests for this response fail, counted
//! per client; then it streams normally — the one piece of state, for retry scenarios).
//!
//! Auxiliary requests — no tools and [`COMPACTION_SYSTEM_PROMPT`] or
//! [`TITLE_SYSTEM_PROMPT`] as system prompt — never consume the script: they are answered
//! with a fixed text derived from the request (`scripted_summary`, `scripted_title`).

use super::{ModelClient, ModelRequest};
use foya_context::{
    COMPACTION_INSTRUCTION, COMPACTION_SYSTEM_PROMPT, OMITTED_NOTE, TITLE_SYSTEM_PROMPT,
};
use foya_protocol::{
    ErrorClass, FinishReason, Message, ProviderError, StreamEvent, ToolCallId, Usage,
};
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A whole script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Script {
    /// Responses, used in order of the number of assistant messages in the history.
    pub responses: Vec<ScriptedResponse>,
}

/// One scripted model response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScriptedResponse {
    /// Answer text.
    pub text: String,
    /// Reasoning text (streamed first).
    pub reasoning: String,
    /// Tool calls.
    pub tool_calls: Vec<ScriptedCall>,
    /// Finish reason; default `tool_calls` when there are calls, else `stop`.
    pub finish_reason: Option<FinishReason>,
    /// Usage reported at the end.
    pub usage: Option<Usage>,
    /// When set, the response is this error (after any text streamed before it).
    pub error: Option<ScriptedError>,
    /// Fragment size in characters (default 8, minimum 1).
    pub chunk_chars: Option<usize>,
    /// Pause before each fragment, in milliseconds.
    pub delay_ms: u64,
    /// With `error`: how many requests fail before the response succeeds (`None`: all).
    pub fail_times: Option<u32>,
}

/// A scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptedCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments (any JSON).
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// A scripted failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptedError {
    /// Error class.
    pub class: ErrorClass,
    /// Message.
    #[serde(default)]
    pub message: String,
    /// Retry-after in milliseconds.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// Failure to load a script file.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("reading script {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not a valid script.
    #[error("parsing script {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Cause.
        source: serde_json::Error,
    },
}

/// A [`ModelClient`] replaying a [`Script`].
#[derive(Debug, Clone)]
pub struct ScriptedClient {
    script: Script,
    failures: Arc<Mutex<HashMap<usize, u32>>>,
    context_window: Option<u64>,
    /// How the script is named in errors (its file), when known.
    source: Option<String>,
}

impl ScriptedClient {
    /// A client for an in-memory script.
    #[must_use]
    pub fn from_script(script: Script) -> Self {
        Self {
            script,
            failures: Arc::default(),
            context_window: None,
            source: None,
        }
    }

    /// The same client naming its script `source` (e.g. the file it was read from) in
    /// its errors.
    #[must_use]
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same client reporting `tokens` as its context window (default 128 000).
    #[must_use]
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// Loads a script file (JSON).
    ///
    /// # Errors
    /// [`ScriptError`] when the file is unreadable or not a script.
    pub fn from_file(path: &Path) -> Result<Self, ScriptError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Io {
            path: shown.clone(),
            source,
        })?;
        let script = serde_json::from_str(&text).map_err(|source| ScriptError::Parse {
            path: shown,
            source,
        })?;
        Ok(Self::from_script(script).with_source(path.display().to_string()))
    }
}

/// The message of a request past the end of a script of `responses` responses, made
/// after `used` assistant messages (so it asked for response `used + 1`), for the script
/// named `source` (`None`: an in-memory script). One line, e.g. `the script s.json has 2
/// responses and this session asked for response 3 (a scripted model answers with
/// response N+1 after N assistant messages); continue the session with a script that has
/// more responses`.
#[must_use]
pub(crate) fn exhausted_message(source: Option<&str>, responses: usize, used: usize) -> String {
    let script = source.map_or_else(|| "the script".to_owned(), |s| format!("the script {s}"));
    let plural = if responses == 1 { "" } else { "s" };
    format!(
        "{script} has {responses} response{plural} and this session asked for response {} \
         (a scripted model answers with response N+1 after N assistant messages); continue \
         the session with a script that has more responses",
        used + 1
    )
}

/// The stream events of one scripted response, with the pause before each.
fn events_of(response: &ScriptedResponse, fail: bool) -> Vec<StreamEvent> {
    let size = response.chunk_chars.unwrap_or(8).max(1);
    let mut out = Vec::new();
    for (text, is_reasoning) in [(&response.reasoning, true), (&response.text, false)] {
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(size) {
            let text: String = chunk.iter().collect();
            out.push(if is_reasoning {
                StreamEvent::ReasoningDelta { text }
            } else {
                StreamEvent::TextDelta { text }
            });
        }
    }
    if let Some(error) = response.error.as_ref().filter(|_| fail) {
        out.push(StreamEvent::Error {
            error: ProviderError {
                class: error.class,
                message: error.message.clone(),
                retry_after_ms: error.retry_after_ms,
                status: None,
            },
        });
        return out;
    }
    for (index, call) in response.tool_calls.iter().enumerate() {
        let args = call.arguments.to_string();
        let chars: Vec<char> = args.chars().collect();
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let mut first = true;
        for chunk in chars.chunks(size) {
            out.push(StreamEvent::ToolCallDelta {
                index,
                id: first.then(|| ToolCallId::new(call.id.clone())),
                name: first.then(|| call.name.clone()),
                arguments: chunk.iter().collect(),
                extra: None,
            });
            first = false;
        }
    }
    if let Some(usage) = response.usage {
        out.push(StreamEvent::Usage { usage });
    }
    let finish = response
        .finish_reason
        .unwrap_or(if response.tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        });
    out.push(StreamEvent::Done {
        finish_reason: Some(finish),
    });
    out
}

/// The answer of the scripted client to a compaction request: `Summary of N messages.
/// Latest request: <the last user text, first 80 characters>`.
#[must_use]
pub(crate) fn scripted_summary(request: &ModelRequest) -> String {
    let texts: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(u.text.as_str()),
            _ => None,
        })
        .filter(|t| *t != COMPACTION_INSTRUCTION && *t != OMITTED_NOTE)
        .collect();
    let latest: String = texts
        .last()
        .map(|t| t.chars().take(80).collect())
        .unwrap_or_default();
    let n = request.messages.len().saturating_sub(1);
    format!("Summary of {n} messages. Latest request: {latest}")
}

/// The answer of the scripted client to a title request: the first 6 words of the first
/// user text, or `Untitled`.
#[must_use]
pub(crate) fn scripted_title(request: &ModelRequest) -> String {
    let first = request.messages.iter().find_map(|m| match m {
        Message::User(u) => Some(u.text.as_str()),
        _ => None,
    });
    let words: Vec<&str> = first
        .unwrap_or_default()
        .split_whitespace()
        .take(6)
        .collect();
    if words.is_empty() {
        "Untitled".into()
    } else {
        words.join(" ")
    }
}

/// The fixed answer to an auxiliary (compaction or title) request, if it is one.
fn auxiliary_answer(request: &ModelRequest) -> Option<String> {
    if !request.tools.is_empty() {
        return None;
    }
    if request.system == COMPACTION_SYSTEM_PROMPT {
        Some(scripted_summary(request))
    } else if request.system == TITLE_SYSTEM_PROMPT {
        Some(scripted_title(request))
    } else {
        None
    }
}

impl ModelClient for ScriptedClient {
    fn context_window(&self) -> u64 {
        self.context_window.unwrap_or(128_000)
    }

    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        if let Some(text) = auxiliary_answer(&request) {
            let events = vec![
                StreamEvent::TextDelta { text },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::Stop),
                },
            ];
            return Box::pin(futures::stream::iter(events));
        }
        let used = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant(_)))
            .count();
        let (events, delay_ms) = match self.script.responses.get(used) {
            Some(r) => {
                let fail = match r.fail_times {
                    None => true,
                    Some(times) => {
                        let mut failures =
                            self.failures.lock().unwrap_or_else(PoisonError::into_inner);
                        let served = failures.entry(used).or_insert(0);
                        *served += 1;
                        *served <= times
                    }
                };
                (events_of(r, fail), r.delay_ms)
            }
            None => (
                vec![StreamEvent::Error {
                    error: ProviderError::new(
                        ErrorClass::InvalidRequest,
                        exhausted_message(
                            self.source.as_deref(),
                            self.script.responses.len(),
                            used,
                        ),
                    ),
                }],
                0,
            ),
        };
        Box::pin(futures::stream::unfold(
            (events.into_iter(), cancel),
            move |(mut events, cancel)| async move {
                let event = events.next()?;
                if delay_ms > 0 {
                    tokio::select! {
                        () = cancel.cancelled() => return None,
                        () = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
                    }
                }
                Some((event, (events, cancel)))
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn streams_chunks_calls_and_done_then_exhausts() {
        let script: Script = serde_json::from_value(serde_json::json!({"responses":[
            {"text":"hello","reasoning":"hm","chunk_chars":3,
             "tool_calls":[{"id":"c1","name":"shell","arguments":{"a":1}}],
             "usage":{"input_tokens":5,"output_tokens":2}}
        ]}))
        .unwrap();
        let client = ScriptedClient::from_script(script);
        let events: Vec<_> = client
            .stream(ModelRequest::default(), CancellationToken::new())
            .collect()
            .await;
        assert_eq!(
            events,
            vec![
                StreamEvent::ReasoningDelta { text: "hm".into() },
                StreamEvent::TextDelta { text: "hel".into() },
                StreamEvent::TextDelta { text: "lo".into() },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    id: Some(ToolCallId::new("c1")),
                    name: Some("shell".into()),
                    arguments: "{\"a".into(),
                    extra: None
                },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    id: None,
                    name: None,
                    arguments: "\":1".into(),
                    extra: None
                },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    id: None,
                    name: None,
                    arguments: "}".into(),
                    extra: None
                },
                StreamEvent::Usage {
                    usage: Usage {
                        input_tokens: 5,
                        output_tokens: 2,
                        ..Usage::default()
                    }
                },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::ToolCalls)
                },
            ]
        );
        let request = ModelRequest {
            messages: vec![Message::Assistant(
                foya_protocol::AssistantMessage::default(),
            )]
            .into(),
            ..ModelRequest::default()
        };
        let events: Vec<_> = client
            .stream(request, CancellationToken::new())
            .collect()
            .await;
        assert_eq!(
            events,
            vec![StreamEvent::Error {
                error: ProviderError::new(
                    ErrorClass::InvalidRequest,
                    "the script has 1 response and this session asked for response 2 (a \
                     scripted model answers with response N+1 after N assistant messages); \
                     continue the session with a script that has more responses"
                )
            }]
        );
    }

    #[test]
    fn the_exhausted_message_names_the_script_and_its_count() {
        assert_eq!(
            exhausted_message(Some("demo/script.json"), 3, 3),
            "the script demo/script.json has 3 responses and this session asked for \
             response 4 (a scripted model answers with response N+1 after N assistant \
             messages); continue the session with a script that has more responses"
        );
        assert_eq!(
            exhausted_message(None, 0, 0),
            "the script has 0 responses and this session asked for response 1 (a scripted \
             model answers with response N+1 after N assistant messages); continue the \
             session with a script that has more responses"
        );
    }
}
