//! Nothing reaches `foya serve` from another web page: the real binary, without a token on
//! loopback, is sent raw HTTP requests as a browser would send them for a page of
//! `evil.example` — after DNS rebinding (`Host: evil.example:PORT`, `Origin:
//! http://evil.example:PORT`) and as a cross-site request (the server's own `Host`, a
//! foreign `Origin` or `Sec-Fetch-Site: cross-site`). `GET /sessions`, `POST /sessions`
//! asking for `bypass`, `POST …/inputs` and `GET …/events?approver=true` are refused
//! (403), and so are an empty cross-origin `POST /sessions`, a form's content types and
//! an empty `POST` without `Content-Type: application/json` (415): no session is made, the
//! model is never asked. The server's own page (same `Host`, same `Origin`) still does
//! everything; a tokened server refuses a foreign `Host` too, takes its clients' empty
//! `POST`s (`curl -X POST` with the token) and a reverse proxy's name given with
//! `--allowed-host`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{foya_bin, test_home};
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

const TOKEN: &str = "web-guard-token";

/// A running `foya serve` and its `host:port`.
struct Serve {
    _child: tokio::process::Child,
    addr: String,
}

/// Starts `foya serve` (OpenAI Chat at `provider`, `--approval ask`) in `dir` with `extra`
/// arguments.
async fn serve(provider: &MockProvider, dir: &Path, extra: &[&str]) -> Serve {
    let base_url = format!("{}/v1", provider.base_url());
    let mut child = tokio::process::Command::new(foya_bin())
        .arg("serve")
        .args(["--provider", "openai-chat", "--model", "mock-1"])
        .args(["--base-url", &base_url, "--approval", "ask"])
        .args(["--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(extra)
        .current_dir(dir)
        .env("OPENAI_API_KEY", "sk-test")
        .env("HOME", test_home())
        .env_remove("FOYA_DATA_DIR")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let base = tokio::io::BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .unwrap()
        .unwrap();
    let addr = base.strip_prefix("http://").unwrap().to_owned();
    Serve {
        _child: child,
        addr,
    }
}

/// One raw HTTP/1.1 request to `addr` with exactly these headers (and `Content-Length`
/// when there is a body); the status and the body (what has come of it once the head
/// is in, for a stream).
async fn raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    raw_bytes(addr, request.as_bytes()).await
}

/// `request`, exactly these bytes, sent to `addr`; the answer as [`raw`] reads it.
async fn raw_bytes(addr: &str, request: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed before the head: {answer:?}");
        answer.extend_from_slice(&chunk[..n]);
        if let Some(i) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&answer[..head_end]).to_ascii_lowercase();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse::<usize>().unwrap());
    if let Some(length) = length {
        while answer.len() < head_end + length {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the body ended early");
            answer.extend_from_slice(&chunk[..n]);
        }
    }
    (
        status,
        String::from_utf8_lossy(&answer[head_end..]).into_owned(),
    )
}

/// The `error.code` of a JSON error body.
fn code(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    value["error"]["code"].as_str().unwrap().to_owned()
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_reaches_nothing_and_the_servers_own_page_everything() {
    // The binary is built before the clock starts.
    tokio::task::spawn_blocking(foya_bin).await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), async {
        let tmp = tempfile::tempdir().unwrap();
        let provider = MockProvider::start().await;
        let server = serve(&provider, tmp.path(), &[]).await;
        let addr = server.addr.as_str();
        let port = addr.rsplit_once(':').unwrap().1;
        let own_host = ("Host", addr);
        let own_origin = format!("http://{addr}");
        let evil_host = format!("evil.example:{port}");
        let evil_origin = format!("http://evil.example:{port}");
        let work = tmp.path().display().to_string();
        let bypass = format!(r#"{{"approval_mode":"bypass","cwd":{work:?}}}"#);

        // A session of the server's own page (same Host and Origin, JSON).
        let (status, body) = raw(
            addr,
            "POST",
            "/sessions",
            &[own_host, ("Origin", &own_origin), JSON],
            r#"{"title":"mine"}"#,
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let inputs = format!("/sessions/{id}/inputs");
        let events = format!("/sessions/{id}/events?approver=true");

        // Rebound: another name for this machine, and the page's own origin.
        let rebound = [
            ("Host", evil_host.as_str()),
            ("Origin", evil_origin.as_str()),
        ];
        // Cross-site: the server's name, another page's origin.
        let cross = [own_host, ("Origin", evil_origin.as_str())];
        for (headers, expected) in [(&rebound, "forbidden_host"), (&cross, "forbidden_origin")] {
            let with_json = [headers[0], headers[1], JSON];
            for (method, path, headers, body) in [
                ("GET", "/sessions", &headers[..], ""),
                ("POST", "/sessions", &with_json[..], bypass.as_str()),
                (
                    "POST",
                    inputs.as_str(),
                    &with_json[..],
                    r#"{"text":"run rm -rf ~"}"#,
                ),
                ("GET", events.as_str(), &headers[..], ""),
                // An empty POST, as a plain form or a no-cors fetch sends it.
                ("POST", "/sessions", &headers[..], ""),
            ] {
                let (status, answer) = raw(addr, method, path, headers, body).await;
                assert_eq!(status, 403, "{method} {path} {headers:?}: {answer}");
                assert_eq!(code(&answer), expected, "{method} {path}");
            }
        }
        // A request another site's page made without Origin (an <img>, a no-cors GET).
        let (status, answer) = raw(
            addr,
            "GET",
            &events,
            &[own_host, ("Sec-Fetch-Site", "cross-site")],
            "",
        )
        .await;
        assert_eq!((status, code(&answer).as_str()), (403, "forbidden_origin"));
        // What a form sends, even with the right Host and no Origin (an old browser).
        for (content_type, body) in [
            ("application/x-www-form-urlencoded", "approval_mode=bypass"),
            ("multipart/form-data; boundary=x", "--x--"),
            ("text/plain", bypass.as_str()),
        ] {
            let (status, answer) = raw(
                addr,
                "POST",
                "/sessions",
                &[own_host, ("Content-Type", content_type)],
                body,
            )
            .await;
            assert_eq!(status, 415, "{content_type}: {answer}");
            assert_eq!(code(&answer), "form_content_type");
        }
        let (status, answer) = raw(addr, "POST", "/sessions", &[own_host], "").await;
        assert_eq!((status, code(&answer).as_str()), (415, "form_content_type"));
        let (status, answer) = raw(
            addr,
            "POST",
            &format!("/sessions/{id}/cancel"),
            &[own_host],
            "",
        )
        .await;
        assert_eq!((status, code(&answer).as_str()), (415, "form_content_type"));

        // Nothing was made and the model was never asked.
        let (status, body) = raw(addr, "GET", "/sessions", &[own_host], "").await;
        assert_eq!(status, 200, "{body}");
        let list: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
        assert!(provider.requests().is_empty());

        // The server's own page and a proxy's name still do everything.
        provider.push(MockResponse::sse(openai_chat::text("hello")));
        let (status, body) = raw(
            addr,
            "POST",
            &inputs,
            &[own_host, ("Origin", &own_origin), JSON],
            r#"{"text":"hi"}"#,
        )
        .await;
        assert_eq!(status, 202, "{body}");
        let (status, _) = raw(
            addr,
            "GET",
            &events,
            &[own_host, ("Sec-Fetch-Site", "same-origin")],
            "",
        )
        .await;
        assert_eq!(status, 200);
        let (status, body) = raw(addr, "POST", "/sessions", &[own_host, JSON], "").await;
        assert_eq!(status, 201, "an empty JSON POST: {body}");
        let (status, _) = raw(addr, "GET", "/sessions", &[("Host", "localhost")], "").await;
        assert_eq!(status, 403, "localhost without the port is another server");
        let localhost = format!("localhost:{port}");
        let (status, _) = raw(addr, "GET", "/sessions", &[("Host", &localhost)], "").await;
        assert_eq!(status, 200);
        assert_eq!(provider.requests().len(), 1);
    })
    .await
    .expect("within the timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokened_server_refuses_foreign_hosts_and_takes_its_clients_empty_posts() {
    tokio::task::spawn_blocking(foya_bin).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        let tmp = tempfile::tempdir().unwrap();
        let token_file = tmp.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let provider = MockProvider::start().await;
        let token_path = token_file.display().to_string();
        // Behind a reverse proxy named foya.example.com.
        let server = serve(
            &provider,
            tmp.path(),
            &[
                "--token-file",
                &token_path,
                "--allowed-host",
                "foya.example.com",
            ],
        )
        .await;
        let addr = server.addr.as_str();
        let port = addr.rsplit_once(':').unwrap().1;
        let bearer = format!("Bearer {TOKEN}");
        let auth = ("Authorization", bearer.as_str());
        let evil_host = format!("evil.example:{port}");
        let (status, answer) =
            raw(addr, "GET", "/sessions", &[("Host", &evil_host), auth], "").await;
        assert_eq!((status, code(&answer).as_str()), (403, "forbidden_host"));
        // curl -X POST with the token: an empty body, no content type.
        let (status, body) = raw(addr, "POST", "/sessions", &[("Host", addr), auth], "").await;
        assert_eq!(status, 201, "{body}");
        let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let cancel = format!("/sessions/{id}/cancel");
        let (status, body) = raw(addr, "POST", &cancel, &[("Host", addr), auth], "").await;
        assert_eq!(status, 204, "{body}");
        let (status, _) = raw(addr, "POST", &cancel, &[("Host", addr)], "").await;
        assert_eq!(status, 401);
        // The proxy's name and origin are the server's own.
        let proxied = [
            ("Host", "foya.example.com"),
            ("Origin", "https://foya.example.com"),
            auth,
        ];
        let (status, body) = raw(addr, "GET", "/sessions", &proxied, "").await;
        assert_eq!(status, 200, "{body}");
        let (status, answer) = raw(
            addr,
            "GET",
            "/sessions",
            &[
                ("Host", "foya.example.com"),
                ("Origin", "https://evil.example"),
                auth,
            ],
            "",
        )
        .await;
        assert_eq!((status, code(&answer).as_str()), (403, "forbidden_origin"));
    })
    .await
    .expect("within the timeout");
}

/// Other spellings of a rebound or cross-site request, which no browser sends today but
/// a proxy in between or another browser may: the forged name as HTTP/2's `:authority`
/// (cleartext, prior knowledge) or in an absolute-form target, a second `Host` or
/// `Origin` after the server's own, a `Host` that is not text, `Sec-Fetch-Site` in
/// other case, and an empty chunked `POST` with no content type. Each is refused; no
/// session is made.
/// A request (method, target, headers) and the status and error code it gets.
type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, u16, &'a str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_spellings_of_a_foreign_request_are_refused_too() {
    tokio::task::spawn_blocking(foya_bin).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        let tmp = tempfile::tempdir().unwrap();
        let provider = MockProvider::start().await;
        let server = serve(&provider, tmp.path(), &[]).await;
        let addr = server.addr.as_str();
        let port = addr.rsplit_once(':').unwrap().1;
        let own_host = ("Host", addr);
        let own_origin = format!("http://{addr}");
        let evil_host = format!("evil.example:{port}");

        // HTTP/2 without TLS: the name is `:authority`, there is no Host header.
        let h2 = reqwest::Client::builder()
            .http2_prior_knowledge()
            .resolve("evil.example", addr.parse().unwrap())
            .build()
            .unwrap();
        let evil_url = format!("http://{evil_host}/sessions");
        let answer = h2.get(&evil_url).send().await.unwrap();
        assert_eq!(answer.version(), reqwest::Version::HTTP_2);
        assert_eq!(answer.status(), 403);
        let answer = h2
            .post(&evil_url)
            .json(&serde_json::json!({"approval_mode": "bypass"}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403);
        assert_eq!(code(&answer.text().await.unwrap()), "forbidden_host");
        let own = h2
            .get(format!("http://{addr}/sessions"))
            .send()
            .await
            .unwrap();
        assert_eq!(own.status(), 200, "HTTP/2 to the server's own name");

        let absolute = format!("http://{evil_host}/sessions");
        let cases: [Case<'_>; 5] = [
            ("GET", &absolute, vec![own_host], 403, "forbidden_host"),
            (
                "GET",
                "/sessions",
                vec![own_host, ("Host", &evil_host)],
                403,
                "forbidden_host",
            ),
            (
                "GET",
                "/sessions",
                vec![
                    own_host,
                    ("Origin", &own_origin),
                    ("Origin", "http://evil.example"),
                ],
                403,
                "forbidden_origin",
            ),
            (
                "GET",
                "/sessions",
                vec![own_host, ("Sec-Fetch-Site", "Cross-Site")],
                403,
                "forbidden_origin",
            ),
            (
                "POST",
                "/sessions",
                vec![own_host, ("Transfer-Encoding", "chunked")],
                415,
                "form_content_type",
            ),
        ];
        for (method, path, headers, status, expected) in cases {
            // A chunked body's last (and here only) chunk.
            let body = if method == "POST" { "0\r\n\r\n" } else { "" };
            let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
            for (name, value) in &headers {
                request.push_str(&format!("{name}: {value}\r\n"));
            }
            request.push_str("\r\n");
            request.push_str(body);
            let (got, answer) = raw_bytes(addr, request.as_bytes()).await;
            assert_eq!(got, status, "{method} {path} {headers:?}: {answer}");
            assert_eq!(code(&answer), expected, "{method} {path} {headers:?}");
        }
        // A Host that is not text (obs-text bytes) names nothing.
        let (status, answer) = raw_bytes(
            addr,
            b"GET /sessions HTTP/1.1\r\nHost: \xffevil.example\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!((status, code(&answer).as_str()), (403, "forbidden_host"));

        let (status, body) = raw(addr, "GET", "/sessions", &[own_host], "").await;
        assert_eq!(status, 200, "{body}");
        let list: Value = serde_json::from_str(&body).unwrap();
        assert!(list["sessions"].as_array().unwrap().is_empty(), "{list}");
        assert!(provider.requests().is_empty());
    })
    .await
    .expect("within the timeout");
}
