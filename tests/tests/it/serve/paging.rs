//! `GET /sessions` and `GET /overview` page: on a store of more sessions than a page
//! (`foya store populate`), the default page is the 50 most recently updated, newest
//! first, with a `next` cursor; walking the cursors lists every session exactly once in
//! the listing's order, also when a session is created between two pages (it goes to
//! the front: a new first page shows it, the walk neither repeats nor skips one); the
//! last page's `next` is null. A bad cursor or limit is a 400 with its code.
//! `GET /overview?live=true` lists only the sessions with a turn running.

use super::{Server, Stream, of_type, start, within};
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::HashSet;

/// Sessions in the store: more than two default pages.
const SESSIONS: usize = 120;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_the_overview_page_by_cursor_in_the_listing_order() {
    within(paging()).await;
}

/// Fills `dir/data` with `n` idle sessions.
pub(crate) fn populate(data: &std::path::Path, n: usize) {
    let out = foya_tests::foya_bin::foya()
        .args([
            "store",
            "populate",
            "--sessions",
            &n.to_string(),
            "--turns",
            "0",
            "--data-dir",
        ])
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// `(updated_at_ms, id)` of each listed session.
fn keys(page: &Value) -> Vec<(u64, String)> {
    page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let at = s["updated_at_ms"]
                .as_u64()
                .or_else(|| s["last_activity_ms"].as_u64())
                .unwrap();
            (at, s["id"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The listing's order: newest update first, ties the newer (larger) id first.
fn assert_ordered(keys: &[(u64, String)]) {
    for pair in keys.windows(2) {
        assert!(pair[0] > pair[1], "out of order: {pair:?}");
    }
}

/// Walks `path` (`/sessions` or `/overview`) page by page, `limit` at a time; after the
/// first page, `between` runs once. Returns the ids in the order listed.
async fn walk(
    s: &Server,
    path: &str,
    schema: &str,
    limit: usize,
    between: impl AsyncFnOnce(),
) -> Vec<(u64, String)> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    let mut between = Some(between);
    loop {
        let query = match &cursor {
            Some(c) => format!("{path}?limit={limit}&cursor={c}"),
            None => format!("{path}?limit={limit}"),
        };
        let page = s.get(&query, schema).await;
        let listed = keys(&page);
        assert!(listed.len() <= limit);
        all.extend(listed);
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert_eq!(page["next"], Value::Null);
                return all;
            }
        }
        if let Some(between) = between.take() {
            between().await;
        }
    }
}

async fn create(s: &Server) -> String {
    let created = s
        .call(
            s.req(Method::POST, "/sessions")
                .json(&json!({"title": "new"})),
            StatusCode::CREATED,
            Some("SessionCreated"),
        )
        .await;
    created["id"].as_str().unwrap().to_owned()
}

async fn paging() {
    let dir = tempfile::tempdir().unwrap();
    populate(&dir.path().join("data"), SESSIONS);
    let provider = MockProvider::start().await;
    provider.push(
        MockResponse::sse(openai_chat::text(
            "a slow answer, word after word after word",
        ))
        .chunk_delay_ms(300),
    );
    let s = start(&provider, dir.path()).await;

    // The default page: the 50 most recently updated, newest first, and a cursor.
    for (path, schema) in [("/sessions", "SessionList"), ("/overview", "Overview")] {
        let first = s.get(path, schema).await;
        let listed = keys(&first);
        assert_eq!(listed.len(), 50, "{path}");
        assert_ordered(&listed);
        assert!(first["next"].is_string(), "{path}: {first}");
    }

    // Every session once, in order, whatever the page size.
    let everything = walk(&s, "/sessions", "SessionList", 1000, async || {}).await;
    assert_eq!(everything.len(), SESSIONS);
    assert_ordered(&everything);
    for limit in [7, 50] {
        let walked = walk(&s, "/sessions", "SessionList", limit, async || {}).await;
        assert_eq!(walked, everything, "limit {limit}");
    }
    let overview = walk(&s, "/overview", "Overview", 33, async || {}).await;
    assert_eq!(overview, everything);

    // A session created between two pages: the walk goes on where it was (no session
    // twice, none missing), and a new first page starts with the new one.
    let mut created = None;
    let walked = walk(&s, "/sessions", "SessionList", 40, async || {
        created = Some(create(&s).await);
    })
    .await;
    let created = created.unwrap();
    assert_eq!(walked, everything);
    let ids: HashSet<&String> = walked.iter().map(|(_, id)| id).collect();
    assert_eq!(ids.len(), SESSIONS);
    let first = keys(&s.get("/sessions?limit=1", "SessionList").await);
    assert_eq!(first[0].1, created);
    let again = walk(&s, "/overview", "Overview", 50, async || {}).await;
    assert_eq!(again.len(), SESSIONS + 1);
    assert_eq!(again[0].1, created);
    assert_eq!(again[1..], everything[..]);

    // Bad cursors and limits: 400 with a code naming which.
    for (query, code) in [
        ("cursor=garbage", "bad_cursor"),
        ("cursor=12-not-an-id", "bad_cursor"),
        (
            "cursor=x-0193a0a0-0000-7000-8000-000000000000",
            "bad_cursor",
        ),
        ("limit=0", "bad_limit"),
        ("limit=1001", "bad_limit"),
        ("limit=ten", "bad_limit"),
        ("live=maybe", "bad_request"),
    ] {
        for path in ["/sessions", "/overview"] {
            let body = s
                .call(
                    s.req(Method::GET, &format!("{path}?{query}")),
                    StatusCode::BAD_REQUEST,
                    Some("Error"),
                )
                .await;
            assert_eq!(body["error"]["code"], code, "{path}?{query}: {body}");
        }
    }

    // Live: nothing runs, then only the session whose turn runs.
    let live = s.get("/overview?live=true", "Overview").await;
    assert_eq!(live, json!({"sessions": [], "next": null}));
    let mut stream = Stream::open(&s, &created, "", None).await;
    s.call(
        s.req(Method::POST, &format!("/sessions/{created}/inputs"))
            .json(&json!({"text": "hi"})),
        StatusCode::ACCEPTED,
        Some("InputAccepted"),
    )
    .await;
    stream.until(&s.doc, of_type("turn_started")).await;
    let live = s.get("/overview?live=true", "Overview").await;
    assert_eq!(live["sessions"].as_array().unwrap().len(), 1, "{live}");
    assert_eq!(live["sessions"][0]["id"], json!(created));
    assert_eq!(live["sessions"][0]["state"], "running");
    assert_eq!(live["next"], Value::Null);
    let live = s.get("/sessions?live=true", "SessionList").await;
    assert_eq!(keys(&live).len(), 1);
    stream.until(&s.doc, of_type("turn_complete")).await;
    let live = s.get("/overview?live=true", "Overview").await;
    assert_eq!(live["sessions"], json!([]));
}
