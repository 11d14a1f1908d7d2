//! The web view scenario of `webview.rs`, step by step, in one session of one browser.

use super::page::{answers, caught_up, send, shot, tool_state, turn_end};
use super::{TOKEN, serve, slow};
use foya_tests::browser::Browser;
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::{Value, json};

/// A 1×1 grey PNG.
const PNG_1X1: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x04\0\0\0\xb5\x1c\x0c\x02\0\0\0\x0bIDATx\xdacd`\0\0\0\x06\0\x020\x81\xd0/\0\0\0\0IEND\xaeB`\x82";

/// A model answer that would run script or hide text if it were rendered as HTML.
const HOSTILE: &str = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"> \
                       \u{202E}txt.exe\u{202C} zero\u{200B}width \u{1b}[31mred";

/// Every kind of character the page marks, and how it shows them.
const HIDDEN: &str = "a\u{0}b\u{7}c\r\nd\u{1b}e\u{7f}f\u{85}g\u{9b}h\u{200b}i\u{200d}j\u{200e}k\u{202a}l\u{202e}m\u{2066}n\u{2069}o\u{feff}p\u{61c}q\tr\rs";
const HIDDEN_MARKED: &str = "a^@b^Gc\nd^[e^?f\\u{85}g\\u{9b}h\\u{200b}i\\u{200d}j\\u{200e}k\\u{202a}l\\u{202e}m\\u{2066}n\\u{2069}o\\u{feff}p\\u{61c}q\tr^Ms";

const STREAMED: &str = "Hello from the mock model, streaming word by word.";
const REASONING: &str = "Let me think about a greeting.";

/// [`STREAMED`] word by word after a reasoning delta (`reasoning_content`, as DeepSeek
/// and other Chat-compatible servers stream it).
fn reasoned() -> MockResponse {
    let body = openai_chat::text(STREAMED);
    let chunk = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_764_400_000,
        "model": "mock-1", "choices": [{"index": 0, "delta": {"reasoning_content": REASONING}, "finish_reason": null}]});
    let cut = body.find("\n\n").unwrap() + 2;
    let body = format!("{}data: {chunk}\n\n{}", &body[..cut], &body[cut..]);
    MockResponse::sse(body).chunk_delay_ms(200)
}

const RELOADED: &str = "Reloading the page while this answer streams must not show anything twice.";

#[allow(clippy::too_many_lines)]
pub(crate) async fn scenario() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let notes: String = std::iter::once("the notes say hi\n".to_owned())
        .chain((2..=30).map(|i| format!("line {i}\n")))
        .collect();
    std::fs::write(work.join("notes.txt"), notes).unwrap();
    let provider = MockProvider::start().await;
    provider.push(reasoned());
    // The call's id and name come first, its arguments 300 ms apart: `queued` shows.
    let read = openai_chat::tool_call("call_read", "read_file", r#"{"path":"notes.txt"}"#);
    provider.push(MockResponse::sse(read).chunk_delay_ms(300));
    provider.push(MockResponse::sse(openai_chat::text("The notes say hi.")));
    let write = r#"{"path":"out.txt","content":"from the web"}"#;
    provider.push(MockResponse::sse(openai_chat::tool_call(
        "call_write",
        "write_file",
        write,
    )));
    provider.push(MockResponse::sse(openai_chat::text("Written.")));
    let shell = r#"{"command":"touch denied.txt"}"#;
    provider.push(MockResponse::sse(openai_chat::tool_call(
        "call_shell",
        "shell",
        shell,
    )));
    provider.push(MockResponse::sse(openai_chat::text("Not run, then.")));
    provider.push(MockResponse::sse(openai_chat::text(HOSTILE)));
    provider.push(MockResponse::sse(openai_chat::text("A grey pixel.")));
    provider.push(MockResponse::sse(openai_chat::text(
        "Summary: a greeting, notes read, a file written.",
    )));
    provider.push(slow("This answer is long and slow so that it is cancelled before it ends, word after word after word after word.", 300));
    provider.push(slow(RELOADED, 300));
    provider.push(MockResponse::sse(openai_chat::text(
        "Back after the restart.",
    )));
    provider.push(slow("Busy while the list watches.", 700));
    provider.push(MockResponse::sse(openai_chat::text("The queued one.")));
    let mut server = serve(&provider, dir.path(), "127.0.0.1:0").await;
    let http = reqwest::Client::new();
    let b = Browser::start().await;

    // Sign in: a wrong token is refused, the right one kept in the tab only.
    b.client.goto(&format!("{}/", server.base)).await.unwrap();
    b.until(
        "the sign-in form",
        "!document.getElementById('login').hidden",
    )
    .await;
    // No token kept yet: nothing to forget.
    assert_eq!(
        b.js("return document.getElementById('logout').hidden")
            .await,
        json!(true)
    );
    b.type_into("#token", "wrong").await;
    b.click("#login-button").await;
    b.until(
        "the refusal",
        "document.getElementById('login-message').textContent.includes('refused')",
    )
    .await;
    b.type_into("#token", TOKEN).await;
    b.click("#login-button").await;
    b.until(
        "the session list",
        "!document.getElementById('list').hidden",
    )
    .await;
    assert_eq!(
        b.js("return sessionStorage.getItem('foya.token')").await,
        json!(TOKEN)
    );
    assert_eq!(
        b.js("return document.getElementById('logout').hidden")
            .await,
        json!(false),
        "a kept token can be forgotten"
    );
    assert!(
        !b.client
            .current_url()
            .await
            .unwrap()
            .as_str()
            .contains(TOKEN)
    );

    // Hidden and control characters are shown as marks (the page's own module).
    let marked = b
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             import('/web/text.js').then(m => done(m.plain(arguments[0]))).catch(e => done(String(e)));",
            vec![json!(HIDDEN)],
        )
        .await
        .unwrap();
    assert_eq!(marked, json!(HIDDEN_MARKED));

    // A session created from the list opens its page.
    b.type_into("#new-title", "Web view test").await;
    b.click("#create").await;
    b.until("the session page", "!document.getElementById('session').hidden && document.getElementById('session-title').textContent === 'Web view test'").await;
    let url = b.client.current_url().await.unwrap();
    let id = url
        .fragment()
        .unwrap()
        .strip_prefix("/s/")
        .unwrap()
        .to_owned();
    b.until(
        "the stream",
        "document.getElementById('conn').dataset.state === 'live'",
    )
    .await;

    // 1. The answer streams in, then stands as persisted.
    send(&b, "Say hello").await;
    b.until("streamed text", &format!("(() => {{ const a = document.querySelector('#transcript .assistant.live .answer'); return a && a.textContent.length > 0 && a.textContent !== {STREAMED:?}; }})()")).await;
    assert_eq!(turn_end(&b, 1).await, "completed");
    assert_eq!(answers(&b).await, [STREAMED]);
    let reasoning = b.js("const d = document.querySelector('#transcript details.reasoning'); return [d.hidden, d.open, d.querySelector('pre').textContent]").await;
    assert_eq!(
        reasoning,
        json!([false, false, REASONING]),
        "reasoning shown collapsed"
    );
    let usage = b.js("return [...document.querySelectorAll('#transcript .note.usage')].map(e => e.textContent)").await;
    assert_eq!(usage, json!(["usage · input 42 · output 7"]));

    // 2. A tool call goes queued → running → finished, arguments and output shown.
    b.js("window.__states = {}; new MutationObserver(rs => { for (const r of rs) { const id = r.target.dataset.toolCallId; if (id) (window.__states[id] ||= []).push(r.oldValue); } }).observe(document.getElementById('transcript'), {subtree: true, attributes: true, attributeOldValue: true, attributeFilter: ['data-state']}); return true").await;
    send(&b, "Read the notes").await;
    b.until(
        "the call queued",
        "document.querySelector('[data-tool-call-id=call_read]')?.dataset.state === 'queued'",
    )
    .await;
    assert_eq!(turn_end(&b, 2).await, "completed");
    assert_eq!(tool_state(&b, "call_read").await, "finished");
    let olds = b.js("return window.__states.call_read").await;
    assert_eq!(
        olds,
        json!([null, "queued", "running"]),
        "states before `finished`"
    );
    let card = b.js("const c = document.querySelector('[data-tool-call-id=call_read]'); return [c.querySelector('.tool-args').textContent, c.querySelector('.tool-result').textContent]").await;
    assert!(card[0].as_str().unwrap().contains("notes.txt"), "{card}");
    assert!(
        card[1].as_str().unwrap().contains("the notes say hi"),
        "{card}"
    );

    // 30 lines of output are folded.
    let folded = b.js("const d = document.querySelector('[data-tool-call-id=call_read] .tool-result details.fold'); return d ? d.open : null").await;
    assert_eq!(folded, json!(false), "long output folded (closed)");

    // 3. An approval answered from the page ("allow for this session", its grant shown).
    send(&b, "Write out.txt").await;
    b.until(
        "the approval",
        "document.querySelector('[data-tool-call-id=call_write] button.allow_for_session')",
    )
    .await;
    assert_eq!(tool_state(&b, "call_write").await, "waiting");
    let grant = b
        .js("return document.querySelector('[data-tool-call-id=call_write] .grant').textContent")
        .await;
    assert!(grant.as_str().unwrap().contains("write_file:*"), "{grant}");
    shot(&b, "web-view-approval.png").await;
    b.click("[data-tool-call-id=call_write] button.allow_for_session")
        .await;
    assert_eq!(turn_end(&b, 3).await, "completed");
    assert_eq!(tool_state(&b, "call_write").await, "finished");
    assert_eq!(
        std::fs::read_to_string(work.join("out.txt")).unwrap(),
        "from the web"
    );
    let decided = b
        .js("return document.querySelector('[data-tool-call-id=call_write] .decided').textContent")
        .await;
    assert_eq!(
        decided,
        json!("approval: allowed for this session (grant write_file:*)")
    );

    // A denial from the page: the command never runs.
    send(&b, "Touch a file").await;
    b.until(
        "the second approval",
        "document.querySelector('[data-tool-call-id=call_shell] button.deny')",
    )
    .await;
    let grant = b
        .js("return document.querySelector('[data-tool-call-id=call_shell] .grant').textContent")
        .await;
    assert!(
        grant.as_str().unwrap().contains("shell:=touch denied.txt"),
        "{grant}"
    );
    b.click("[data-tool-call-id=call_shell] button.deny").await;
    assert_eq!(turn_end(&b, 4).await, "completed");
    assert_eq!(tool_state(&b, "call_shell").await, "error");
    assert!(!work.join("denied.txt").exists());

    // 4. Markup and hidden characters from the model are text.
    send(&b, "Show me markup").await;
    assert_eq!(turn_end(&b, 5).await, "completed");
    let seen = b.js("const a = [...document.querySelectorAll('#transcript .assistant .answer')].pop(); return {pwned: typeof window.__pwned, imgs: document.querySelectorAll('#transcript img').length, scripts: document.querySelectorAll('#transcript script').length, elements: a.querySelectorAll(':not(.ctl)').length, text: a.textContent, marks: [...a.querySelectorAll('.ctl')].map(e => e.textContent)}").await;
    assert_eq!(seen["pwned"], "undefined", "{seen}");
    assert_eq!(seen["imgs"], 0, "{seen}");
    assert_eq!(seen["scripts"], 0, "{seen}");
    assert_eq!(seen["elements"], 0, "{seen}");
    let text = seen["text"].as_str().unwrap();
    assert!(
        text.starts_with(
            "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"
        ),
        "{text}"
    );
    // The server's event stream already shows hidden characters as visible marks
    // (`foya_protocol::visible`); the page renders those marks as text and never sees
    // the raw characters.
    for mark in ["<U+202E>", "<U+202C>", "<U+200B>", "^["] {
        assert!(text.contains(mark), "{mark} in {text}");
    }
    for raw in ['\u{202e}', '\u{202c}', '\u{200b}', '\u{1b}'] {
        assert!(!text.contains(raw), "{raw:?} in {text}");
    }
    shot(&b, "web-view-session.png").await;

    // 5. An image upload and a command.
    let png = dir.path().join("pixel.png");
    std::fs::write(&png, PNG_1X1).unwrap();
    b.find("#input-images")
        .await
        .send_keys(png.to_str().unwrap())
        .await
        .unwrap();
    send(&b, "What is in the image?").await;
    assert_eq!(turn_end(&b, 6).await, "completed");
    let image = b
        .js("return [...document.querySelectorAll('#transcript .user .image')].length")
        .await;
    assert_eq!(image, json!(1));
    let sent = provider.requests().last().unwrap().body.to_string();
    assert!(
        sent.contains("data:image/png;base64,"),
        "the image reached the model"
    );
    b.type_into("#input-command", "/compact").await;
    b.click("#send").await;
    assert_eq!(turn_end(&b, 7).await, "completed");
    let checkpoint = b
        .js("return document.querySelector('#transcript [data-kind=checkpoint]').textContent")
        .await;
    assert!(
        checkpoint.as_str().unwrap().contains("Summary: a greeting"),
        "{checkpoint}"
    );
    assert!(
        b.js("return document.querySelector('#transcript .user .command').textContent")
            .await
            == json!("/compact")
    );

    // 6. Cancel a running turn.
    send(&b, "Tell me a long story").await;
    b.until(
        "the story streaming",
        "document.querySelector('#transcript .assistant.live .answer')?.textContent.length > 0",
    )
    .await;
    b.click("#cancel").await;
    assert_eq!(turn_end(&b, 8).await, "cancelled");

    // 7. Reload mid-turn: the same transcript, nothing twice.
    send(&b, "Stream while I reload").await;
    b.until(
        "the answer streaming",
        "document.querySelector('#transcript .assistant.live .answer')?.textContent.length > 0",
    )
    .await;
    b.client.refresh().await.unwrap();
    b.until(
        "the session page again",
        "!document.getElementById('session').hidden",
    )
    .await;
    assert_eq!(turn_end(&b, 9).await, "completed");
    let last = caught_up(&b, &http, &server.base, &id).await;
    let all = answers(&b).await;
    assert_eq!(all.iter().filter(|a| *a == RELOADED).count(), 1, "{all:?}");
    assert_eq!(all.iter().filter(|a| *a == STREAMED).count(), 1, "{all:?}");
    let users = b
        .js("return document.querySelectorAll('#transcript .user').length")
        .await;
    assert_eq!(users, json!(9));
    let before = b
        .js("return document.getElementById('transcript').innerText")
        .await;
    b.client.refresh().await.unwrap();
    b.until(
        "the page re-read",
        &format!("document.getElementById('transcript').dataset.lastSeq === '{last}'"),
    )
    .await;
    assert_eq!(
        b.js("return document.getElementById('transcript').innerText")
            .await,
        before
    );

    // 8. A server restart: the page resumes from its last seq.
    let listen = server.base.trim_start_matches("http://").to_owned();
    server.stop().await;
    b.until(
        "the stream lost",
        "document.getElementById('conn').dataset.state !== 'live'",
    )
    .await;
    server = serve(&provider, dir.path(), &listen).await;
    b.until(
        "the stream back",
        "document.getElementById('conn').dataset.state === 'live'",
    )
    .await;
    send(&b, "Are you back?").await;
    assert_eq!(turn_end(&b, 10).await, "completed");
    caught_up(&b, &http, &server.base, &id).await;
    assert_eq!(answers(&b).await.last().unwrap(), "Back after the restart.");

    // 9. Title set from the page; the list shows state and queue live.
    b.type_into("#title-input", "Renamed <b>here</b>").await;
    b.click("#set-title").await;
    b.until(
        "the new title",
        "document.getElementById('session-title').textContent === 'Renamed <b>here</b>'",
    )
    .await;
    b.click("a.back").await;
    let row = format!("#sessions tr[data-id='{id}']");
    b.until(
        "the row",
        &format!("document.querySelector(\"{row} .title\")?.textContent === 'Renamed <b>here</b>'"),
    )
    .await;
    for text in ["Keep busy", "Then this"] {
        let resp = http
            .post(format!("{}/sessions/{id}/inputs", server.base))
            .bearer_auth(TOKEN)
            .json(&json!({"text": text}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
    }
    b.until("running with one queued", &format!("document.querySelector(\"{row}\")?.dataset.state === 'running' && document.querySelector(\"{row} .queue\").textContent === '1'")).await;
    shot(&b, "web-view-list.png").await;
    b.until("idle again", &format!("document.querySelector(\"{row}\")?.dataset.state === 'idle' && document.querySelector(\"{row} .queue\").textContent === '0'")).await;

    // 10. Delete from the page.
    b.click(&format!("{row} a.open")).await;
    b.until(
        "the session page",
        "document.getElementById('conn').dataset.state === 'live'",
    )
    .await;
    b.click("#delete").await;
    b.accept_dialog().await;
    b.until("the list without it", &format!("!document.getElementById('list').hidden && document.querySelector('#sessions tr') === null && !document.getElementById('empty').hidden && !document.querySelector(\"{row}\")")).await;
    let summary: Value = http
        .get(format!("{}/sessions/{id}", server.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(summary["deleted"], true);
    b.close().await;
    server.stop().await;
}
