//! What the scenario of `webview.rs` reads from and does to the page: the answers and
//! turn ends rendered, a tool card's state, sending an input, waiting until every
//! persisted event is rendered once, screenshots.

use super::TOKEN;
use foya_tests::browser::{Browser, screenshot_dir};
use serde_json::{Value, json};

/// Texts of the answers rendered, in order (tool-call-only messages included, empty).
pub(crate) async fn answers(b: &Browser) -> Vec<String> {
    let v = b
        .js("return [...document.querySelectorAll('#transcript .assistant .answer')].map(e => e.textContent)")
        .await;
    serde_json::from_value(v).unwrap()
}

/// Statuses of the turn ends rendered, in order.
pub(crate) async fn turn_ends(b: &Browser) -> Vec<String> {
    let v = b
        .js("return [...document.querySelectorAll('#transcript [data-kind=turn_end]')].map(e => e.dataset.status)")
        .await;
    serde_json::from_value(v).unwrap()
}

/// Waits for the `n`-th turn end; returns its status.
pub(crate) async fn turn_end(b: &Browser, n: usize) -> String {
    b.until(
        &format!("turn end {n}"),
        &format!("document.querySelectorAll('#transcript [data-kind=turn_end]').length >= {n}"),
    )
    .await;
    let ends = turn_ends(b).await;
    assert_eq!(ends.len(), n, "{ends:?}");
    ends[n - 1].clone()
}

pub(crate) async fn send(b: &Browser, text: &str) {
    b.type_into("#input-text", text).await;
    b.click("#send").await;
}

/// The state a tool card shows.
pub(crate) async fn tool_state(b: &Browser, id: &str) -> String {
    let v = b
        .js(&format!(
            "return document.querySelector('[data-tool-call-id={id}]').dataset.state"
        ))
        .await;
    v.as_str().unwrap().to_owned()
}

/// Waits until the page has rendered every persisted event of the session, checks it
/// rendered each once (as many renders as seqs: no gap, no duplicate).
pub(crate) async fn caught_up(b: &Browser, http: &reqwest::Client, base: &str, id: &str) -> u64 {
    let summary: Value = http
        .get(format!("{base}/sessions/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let last = summary["last_seq"].as_u64().unwrap();
    b.until(
        &format!("seq {last} rendered"),
        &format!("document.getElementById('transcript').dataset.lastSeq === '{last}'"),
    )
    .await;
    let rendered = b
        .js("return document.getElementById('transcript').dataset.rendered")
        .await;
    assert_eq!(rendered, json!(last.to_string()));
    last
}

pub(crate) async fn shot(b: &Browser, name: &str) {
    if let Some(dir) = screenshot_dir() {
        b.screenshot(&dir.join(name)).await;
    }
}
