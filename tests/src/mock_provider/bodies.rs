//! SSE body builders shaped byte for byte like the vendors' streams (modelled on
//! `actors/tests/fixtures/providers`): a text answer and a single tool call per protocol.

/// Splits text into a few deltas the way token streams do (at word boundaries).
fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in text.chars() {
        cur.push(ch);
        if ch == ' ' {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() || out.is_empty() {
        out.push(cur);
    }
    out
}

/// OpenAI Chat Completions stream bodies.
pub mod openai_chat {
    use serde_json::{Value, json};

    fn chunk(delta: &Value, finish: Option<&str>) -> String {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_764_400_000,
                   "model": "mock-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    }

    fn tail(finish: &str) -> String {
        let usage = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_764_400_000,
            "model": "mock-1", "choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}});
        format!(
            "{}data: {usage}\n\ndata: [DONE]\n\n",
            chunk(&json!({}), Some(finish))
        )
    }

    /// A text answer: role chunk, content deltas, finish `stop`, usage chunk (42 in,
    /// 7 out), `[DONE]`.
    #[must_use]
    pub fn text(text: &str) -> String {
        let mut out = chunk(&json!({"role": "assistant", "content": ""}), None);
        for p in super::pieces(text) {
            out.push_str(&chunk(&json!({"content": p}), None));
        }
        out + &tail("stop")
    }

    /// One tool call: first fragment with id and name, arguments in two fragments,
    /// finish `tool_calls`, usage, `[DONE]`.
    #[must_use]
    pub fn tool_call(id: &str, name: &str, args_json: &str) -> String {
        let mid = args_json.len() / 2;
        let mid = (0..=mid)
            .rev()
            .find(|i| args_json.is_char_boundary(*i))
            .unwrap_or(0);
        let mut out = chunk(&json!({"role": "assistant", "content": null}), None);
        out.push_str(&chunk(&json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}), None));
        for part in [&args_json[..mid], &args_json[mid..]] {
            out.push_str(&chunk(
                &json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}),
                None,
            ));
        }
        out + &tail("tool_calls")
    }

    /// Several tool calls in one answer, `(id, name, arguments JSON)` each: a first
    /// fragment with id and name then the arguments per call, finish `tool_calls`,
    /// usage, `[DONE]`.
    #[must_use]
    pub fn tool_calls(calls: &[(&str, &str, &str)]) -> String {
        let mut out = chunk(&json!({"role": "assistant", "content": null}), None);
        for (index, (id, name, args_json)) in calls.iter().enumerate() {
            out.push_str(&chunk(&json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}), None));
            out.push_str(&chunk(
                &json!({"tool_calls": [{"index": index, "function": {"arguments": args_json}}]}),
                None,
            ));
        }
        out + &tail("tool_calls")
    }
}

/// Anthropic Messages stream bodies.
pub mod anthropic {
    use serde_json::{Value, json};

    fn event(v: &Value) -> String {
        format!(
            "event: {}\ndata: {v}\n\n",
            v["type"].as_str().unwrap_or("message")
        )
    }

    fn head() -> String {
        event(
            &json!({"type": "message_start", "message": {"id": "msg_mock", "type": "message", "role": "assistant",
            "model": "mock-2", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 250, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
        ) + &event(&json!({"type": "ping"}))
    }

    fn tail(stop: &str) -> String {
        event(
            &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        ) + &event(&json!({"type": "message_stop"}))
    }

    /// A text answer in one text block; usage 250 in, 9 out; `end_turn`.
    #[must_use]
    pub fn text(text: &str) -> String {
        let mut out = head();
        out.push_str(&event(&json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
        for p in super::pieces(text) {
            out.push_str(&event(&json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}})));
        }
        out.push_str(&event(&json!({"type": "content_block_stop", "index": 0})));
        out + &tail("end_turn")
    }

    /// One `tool_use` block with `input_json_delta`s; `tool_use` stop reason.
    #[must_use]
    pub fn tool_call(id: &str, name: &str, args_json: &str) -> String {
        let mut out = head();
        out.push_str(&event(&json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
        out.push_str(&event(&json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": args_json}})));
        out.push_str(&event(&json!({"type": "content_block_stop", "index": 0})));
        out + &tail("tool_use")
    }
}

/// OpenAI Responses stream bodies.
pub mod responses {
    use serde_json::{Value, json};

    fn event(v: &Value) -> String {
        format!(
            "event: {}\ndata: {v}\n\n",
            v["type"].as_str().unwrap_or("message")
        )
    }

    fn created() -> String {
        event(&json!({"type": "response.created", "sequence_number": 0,
            "response": {"id": "resp_mock", "object": "response", "status": "in_progress", "model": "mock-3", "output": []}}))
    }

    fn completed() -> String {
        event(
            &json!({"type": "response.completed", "response": {"id": "resp_mock", "object": "response",
            "status": "completed", "model": "mock-3", "output": [],
            "usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 40,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 340}}}),
        )
    }

    /// A text answer (`output_text` deltas); usage 300 in, 40 out.
    #[must_use]
    pub fn text(text: &str) -> String {
        let mut out = created();
        out.push_str(&event(&json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}})));
        for p in super::pieces(text) {
            out.push_str(&event(
                &json!({"type": "response.output_text.delta", "item_id": "msg_1",
                "output_index": 0, "content_index": 0, "delta": p}),
            ));
        }
        out.push_str(&event(
            &json!({"type": "response.output_text.done", "item_id": "msg_1",
            "output_index": 0, "content_index": 0, "text": text}),
        ));
        out + &completed()
    }

    /// One function call: item added (call id `id`, item id `fc_<id>`), argument deltas
    /// keyed by item id, done events, completed.
    #[must_use]
    pub fn tool_call(id: &str, name: &str, args_json: &str) -> String {
        let item_id = format!("fc_{id}");
        let mut out = created();
        out.push_str(&event(&json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": item_id, "type": "function_call", "status": "in_progress", "call_id": id, "name": name, "arguments": ""}})));
        out.push_str(&event(
            &json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
            "output_index": 0, "delta": args_json}),
        ));
        out.push_str(&event(
            &json!({"type": "response.function_call_arguments.done", "item_id": item_id,
            "output_index": 0, "arguments": args_json}),
        ));
        out.push_str(&event(&json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"id": item_id, "type": "function_call", "status": "completed", "call_id": id, "name": name, "arguments": args_json}})));
        out + &completed()
    }
}
