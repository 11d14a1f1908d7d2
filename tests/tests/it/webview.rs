//! Browser tests of the web view of `foya serve`, in real headless Chromium over
//! WebDriver (`foya_tests::browser`; Chromium from `.ci/setup-browser`), against the
//! real binary with the OpenAI Chat provider pointed at the mock provider. One session
//! goes through: sign-in with the token (a wrong one refused), creating a session from
//! the list, an answer streaming in (its reasoning collapsed, usage per step shown), a tool call going from
//! queued to finished (its long output folded), an approval answered from the page
//! ("allow for this session", the grant shown) and the tool running, another denied (its
//! command never run), model text with `<script>`, `<img onerror>`, bidi and zero-width
//! characters rendered as text (no element made, no script run, the characters marked;
//! every class of hidden character checked against the page's own `text.js`),
//! an image upload and the `/compact` command (its checkpoint shown), a cancelled turn,
//! a reload mid-turn (the same transcript, no event twice), a server restart the page
//! resumes from (no gap, no duplicate), the live session list, the title set and the
//! session deleted from the page. Without a token, behind the server's browser guard, the
//! page still creates, streams and cancels. On a store of more sessions than a page, the
//! list shows the 50 most recent and walks the rest with "older" and "newer". The load-test report: `webview/report.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod page;
mod report;
mod steps;

use foya_tests::foya_bin::foya_bin;
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;

pub(crate) const TOKEN: &str = "web-view-token";

/// A running `foya serve`.
pub(crate) struct Serve {
    pub(crate) child: tokio::process::Child,
    pub(crate) base: String,
}

/// Starts `foya serve` in `dir` (data in `dir/data`, cwd `dir/work`) on `listen`.
pub(crate) async fn serve(provider: &MockProvider, dir: &Path, listen: &str) -> Serve {
    serve_with(provider, dir, listen, true).await
}

/// [`serve`], with the token [`TOKEN`] (`--token-file`) or without one.
pub(crate) async fn serve_with(
    provider: &MockProvider,
    dir: &Path,
    listen: &str,
    token: bool,
) -> Serve {
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let base_url = format!("{}/v1", provider.base_url());
    let mut command = tokio::process::Command::new(foya_bin());
    command
        .arg("serve")
        .args(["--provider", "openai-chat", "--model", "mock-1"])
        .args(["--base-url", &base_url, "--approval", "ask"])
        .args(["--listen", listen])
        .arg("--data-dir")
        .arg(dir.join("data"));
    if token {
        command.arg("--token-file").arg(&token_file);
    }
    let mut child = command
        .current_dir(dir.join("work"))
        .env("OPENAI_API_KEY", "sk-test")
        .env_remove("FOYA_DATA_DIR")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let base = lines.next_line().await.unwrap().unwrap();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    Serve { child, base }
}

impl Serve {
    /// SIGTERM, then the exit status (0: a graceful shutdown).
    pub(crate) async fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id().unwrap()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = self.child.wait().await.unwrap();
        assert_eq!(status.code(), Some(0));
    }
}

/// Runs a scenario under one global timeout, the binary built before its clock starts.
pub(crate) async fn within(secs: u64, scenario: impl std::future::Future<Output = ()>) {
    foya_tests::browser::require_installed();
    tokio::task::spawn_blocking(foya_bin).await.unwrap();
    tokio::time::timeout(Duration::from_secs(secs), scenario)
        .await
        .expect("the scenario finished in time");
}

/// A slow text answer: one word every `ms` milliseconds.
pub(crate) fn slow(text: &str, ms: u64) -> MockResponse {
    MockResponse::sse(openai_chat::text(text)).chunk_delay_ms(ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_drives_a_session_in_headless_chromium() {
    within(240, steps::scenario()).await;
}

/// "forget token" is offered only while the tab holds a token: never by a server started
/// without `--token-file` (the page opens on the list without asking for one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_token_offers_no_forget_token() {
    within(120, async {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let provider = MockProvider::start().await;
        let server = serve_with(&provider, dir.path(), "127.0.0.1:0", false).await;
        let b = foya_tests::browser::Browser::start().await;
        b.client.goto(&format!("{}/", server.base)).await.unwrap();
        b.until(
            "the session list",
            "!document.getElementById('list').hidden",
        )
        .await;
        let shown = b
            .js("const l = document.getElementById('logout'); \
                 return {hidden: l.hidden, display: getComputedStyle(l).display, \
                         width: l.getBoundingClientRect().width}")
            .await;
        assert_eq!(
            shown,
            serde_json::json!({"hidden": true, "display": "none", "width": 0}),
            "forget token is offered without a token"
        );
        page::shot(&b, "web-view-no-token.png").await;
        b.close().await;
        server.stop().await;
    })
    .await;
}

/// The page's security headers, and the token never needed for the page itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_with_a_strict_policy_and_the_api_still_needs_the_token() {
    within(60, async {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let provider = MockProvider::start().await;
        let server = serve(&provider, dir.path(), "127.0.0.1:0").await;
        let http = reqwest::Client::new();
        for (path, kind) in [
            ("/", "text/html"),
            ("/web/app.js", "text/javascript"),
            ("/web/transcript.js", "text/javascript"),
            ("/web/text.js", "text/javascript"),
            ("/web/app.css", "text/css"),
        ] {
            let resp = http
                .get(format!("{}{path}", server.base))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            let h = resp.headers();
            assert!(
                h["content-type"].to_str().unwrap().starts_with(kind),
                "{path}"
            );
            let csp = h["content-security-policy"].to_str().unwrap();
            assert!(csp.contains("script-src 'self'"), "{csp}");
            assert!(csp.contains("default-src 'none'"), "{csp}");
            assert!(
                !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
                "{csp}"
            );
            assert_eq!(h["x-content-type-options"], "nosniff");
        }
        // The data still needs the token.
        let resp = http
            .get(format!("{}/overview", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        let resp = http
            .get(format!("{}/overview", server.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body, serde_json::json!({"sessions": [], "next": null}));
        server.stop().await;
    })
    .await;
}

/// Without a token, behind the server's browser guard (its Host, its Origin, JSON only):
/// the page opens on the list, creates a session, streams an answer and cancels a turn
/// (an empty `POST`, which the page sends as JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_works_without_a_token_behind_the_browser_guard() {
    within(120, async {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let provider = MockProvider::start().await;
        provider.push(MockResponse::sse(openai_chat::text("Hello without a token.")));
        provider.push(slow("A long answer that is cancelled before it ends, word after word after word.", 300));
        let server = serve_with(&provider, dir.path(), "127.0.0.1:0", false).await;
        let b = foya_tests::browser::Browser::start().await;
        b.client.goto(&format!("{}/", server.base)).await.unwrap();
        b.until("the session list", "!document.getElementById('list').hidden")
            .await;
        b.type_into("#new-title", "No token").await;
        b.click("#create").await;
        b.until("the session page", "!document.getElementById('session').hidden && document.getElementById('session-title').textContent === 'No token'").await;
        b.until(
            "the stream",
            "document.getElementById('conn').dataset.state === 'live'",
        )
        .await;
        page::send(&b, "hi").await;
        assert_eq!(page::turn_end(&b, 1).await, "completed");
        page::send(&b, "a long one").await;
        b.until(
            "the answer streaming",
            "document.querySelector('#transcript .assistant.live .answer')?.textContent.length > 0",
        )
        .await;
        b.click("#cancel").await;
        assert_eq!(page::turn_end(&b, 2).await, "cancelled");
        assert_eq!(
            b.js("return document.getElementById('error').hidden").await,
            serde_json::json!(true)
        );
        b.close().await;
        server.stop().await;
    })
    .await;
}

/// On a store of more sessions than a page (`foya store populate`), the list shows the
/// 50 most recently updated in the API's order; "older" shows the rest, "newer" goes
/// back; the page polls only the page it shows (the rows stay those of that page).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_list_pages_with_older_and_newer() {
    within(120, async {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let out = foya_tests::foya_bin::foya()
            .args(["store", "populate", "--sessions", "60", "--turns", "0", "--data-dir"])
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let provider = MockProvider::start().await;
        let server = serve(&provider, dir.path(), "127.0.0.1:0").await;
        let listing: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/sessions?limit=1000", server.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let ids: Vec<String> = listing["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids.len(), 60);
        let b = foya_tests::browser::Browser::start().await;
        b.client.goto(&format!("{}/", server.base)).await.unwrap();
        b.until("the sign-in", "!document.getElementById('login').hidden")
            .await;
        b.type_into("#token", TOKEN).await;
        b.click("#login-button").await;
        let rows = "[...document.querySelectorAll('#sessions tr.session-row')].map(r => r.dataset.id)";
        let shown = |page: &str, n: usize| {
            format!(
                "document.getElementById('page-no').textContent === '{page}' && \
                 document.querySelectorAll('#sessions tr.session-row').length === {n}"
            )
        };
        b.until("the first page", &shown("page 1", 50)).await;
        assert_eq!(b.js(&format!("return {rows}")).await, serde_json::json!(ids[..50]));
        assert_eq!(
            b.js("return [document.getElementById('newer').disabled, document.getElementById('older').disabled]")
                .await,
            serde_json::json!([true, false])
        );
        b.click("#older").await;
        b.until("the second page", &shown("page 2", 10)).await;
        assert_eq!(b.js(&format!("return {rows}")).await, serde_json::json!(ids[50..]));
        assert_eq!(
            b.js("return [document.getElementById('newer').disabled, document.getElementById('older').disabled]")
                .await,
            serde_json::json!([false, true])
        );
        page::shot(&b, "web-view-older-page.png").await;
        b.click("#newer").await;
        b.until("the first page again", &shown("page 1", 50)).await;
        assert_eq!(b.js(&format!("return {rows}")).await, serde_json::json!(ids[..50]));
        b.close().await;
        server.stop().await;
    })
    .await;
}
