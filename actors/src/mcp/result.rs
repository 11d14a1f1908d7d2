//! An MCP `CallToolResult` as the text result the model reads. Pure.
//!
//! Owns: how each content block reads (text as is; an image or audio block as a line
//! naming its type and size; an embedded resource as its URI then its text, or a line
//! naming a binary blob; a resource link as its URI and name), `structuredContent`
//! (its JSON, after the blocks, only when no block is text: a server that sends text
//! meant it for the model, and the spec asks it to put the same JSON there),
//! `isError` → `is_error`, and the cap: like the shell tool's output, the first
//! [`OUTPUT_HEAD_BYTES`] and last [`OUTPUT_TAIL_BYTES`] bytes are kept with
//! `[... N bytes of output cut ...]` between them. Control characters are kept (the log
//! holds what the server sent; terminals neutralise them when they show it).

use crate::tools::ToolOutput;
use crate::tools::builtin::{CappedOutput, OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES};
use serde_json::Value;

/// The model's view of `result` (a `CallToolResult` in its JSON form).
#[must_use]
pub fn render(result: &Value) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for block in blocks {
        parts.push(block_text(block));
    }
    let has_text = blocks
        .iter()
        .any(|b| b.get("type").and_then(Value::as_str) == Some("text"));
    if let Some(structured) = result.get("structuredContent")
        && !has_text
    {
        parts.push(format!("structured content: {structured}"));
    }
    let text = if parts.is_empty() {
        "(the tool returned no content)".to_owned()
    } else {
        parts.join("\n")
    };
    let mut capped = CappedOutput::new(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES);
    capped.push(text.as_bytes());
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    ToolOutput {
        content: capped.render(),
        is_error,
    }
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Bytes of base64 `data` once decoded.
fn decoded_len(data: &str) -> usize {
    let data = data.trim_end();
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

fn block_text(block: &Value) -> String {
    match str_of(block, "type") {
        "text" => str_of(block, "text").to_owned(),
        "image" => format!(
            "[image: {}, {} bytes]",
            str_of(block, "mimeType"),
            decoded_len(str_of(block, "data"))
        ),
        "audio" => format!(
            "[audio: {}, {} bytes]",
            str_of(block, "mimeType"),
            decoded_len(str_of(block, "data"))
        ),
        "resource" => {
            let resource = block.get("resource").unwrap_or(&Value::Null);
            let uri = str_of(resource, "uri");
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => format!(
                    "[resource {uri}: {}, {} bytes of binary data]",
                    str_of(resource, "mimeType"),
                    decoded_len(str_of(resource, "blob"))
                ),
            }
        }
        "resource_link" => format!(
            "[resource link {} ({})]",
            str_of(block, "uri"),
            str_of(block, "name")
        ),
        other => format!("[content of type {other:?}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_content_kind_reads_as_text_and_is_error_carries_over() {
        let result = json!({
            "content": [
                {"type": "image", "mimeType": "image/png", "data": "AAAA"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///b", "mimeType": "application/zip", "blob": "AAAAAAAA"}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"}
            ],
            "structuredContent": {"n": 1},
            "isError": true
        });
        assert_eq!(
            render(&result),
            ToolOutput {
                content: "[image: image/png, 3 bytes]\n[resource file:///a.txt]\ninside\n\
                          [resource file:///b: application/zip, 6 bytes of binary data]\n\
                          [resource link file:///c (c)]\nstructured content: {\"n\":1}"
                    .into(),
                is_error: true,
            }
        );
    }

    #[test]
    fn structured_content_is_left_out_next_to_text_and_output_is_capped() {
        let result = json!({"content": [{"type": "text", "text": "a\u{1b}[31m"}], "structuredContent": {"result": "a"}});
        assert_eq!(
            render(&result),
            ToolOutput::ok("a\u{1b}[31m"),
            "control characters kept"
        );
        assert_eq!(
            render(&json!({})),
            ToolOutput::ok("(the tool returned no content)")
        );
        let huge = "x".repeat(100_000);
        let out = render(&json!({"content": [{"type": "text", "text": huge}]}));
        let cut = 100_000 - OUTPUT_HEAD_BYTES - OUTPUT_TAIL_BYTES;
        assert!(
            out.content
                .contains(&format!("[... {cut} bytes of output cut ...]"))
        );
        assert!(out.content.len() < OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES + 100);
    }
}
