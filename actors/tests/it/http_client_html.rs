//! `HttpModelClient` over real HTTP: a 2xx web page (a proxy's error page, a wrong base
//! URL's site) fails at once as `invalid_response` saying the server answered HTML,
//! whatever content type it came with, instead of ending like a cut stream and being
//! retried; an event stream that starts with blank lines is still decoded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::http_support;

use axum::body::Bytes;
use foya_actors::provider::retry::RetryPolicy;
use foya_actors::provider::wire::ProviderKind;
use foya_protocol::{ErrorClass, FinishReason, StreamEvent};
use http_support::{Reply, client, fixture, run, server, sse};

const PAGE: &[&str] = &[
    "\r\n",
    "  <!DOCTYPE html>\n<html><head><title>502 Bad",
    " Gateway</title></head>\n<body><h1>502 Bad Gateway</h1><hr>nginx</body></html>\n",
];

fn page(content_type: Option<&'static str>, bom: bool) -> Reply {
    let mut chunks: Vec<Bytes> = PAGE
        .iter()
        .map(|c| Bytes::from_static(c.as_bytes()))
        .collect();
    if bom {
        // A byte-order mark split over two chunks before the page.
        chunks.insert(0, Bytes::from_static(b"\xEF\xBB"));
        chunks.insert(1, Bytes::from_static(b"\xBF"));
    }
    Reply {
        status: 200,
        headers: content_type
            .map(|ct| ("content-type", ct))
            .into_iter()
            .collect(),
        chunks,
        ..Reply::default()
    }
}

#[tokio::test]
async fn an_html_page_with_a_stream_json_or_no_content_type_is_invalid_response() {
    let cases = [
        (
            Some("text/event-stream"),
            false,
            "content type `text/event-stream`",
        ),
        (
            Some("application/json"),
            true,
            "content type `application/json`",
        ),
        (None, false, "no content type"),
    ];
    for (content_type, bom, shown) in cases {
        let (url, recorded) = server(vec![page(content_type, bom)]).await;
        let base = format!("{url}/v1");
        let (events, _) = run(&client(ProviderKind::OpenaiChat, &base)).await;
        let [StreamEvent::Error { error }] = events.as_slice() else {
            panic!("{events:?}")
        };
        assert_eq!(
            (error.class, error.status, error.message.as_str()),
            (
                ErrorClass::InvalidResponse,
                Some(200),
                format!(
                    "the server answered HTML, not a model stream: POST \
                     {base}/chat/completions gave HTTP 200 with {shown} and a page titled \
                     `502 Bad Gateway`; check the base URL `{base}` (a proxy, gateway or \
                     login page, or a web site, answers this way)"
                )
                .as_str()
            ),
            "{content_type:?}"
        );
        assert_eq!(RetryPolicy::default().delay_for(2, error, 0.5), None);
        assert_eq!(recorded.lock().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_stream_starting_with_blank_lines_is_still_decoded() {
    let mut body = b"\n\r\n \n".to_vec();
    body.extend(fixture("openai-chat/basic_text.sse"));
    let (url, _) = server(vec![sse(body)]).await;
    let (events, agg) = run(&client(ProviderKind::OpenaiChat, &url)).await;
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Done {
            finish_reason: Some(FinishReason::Stop)
        })
    );
    assert_eq!(agg.error, None);
    assert!(!agg.text.is_empty());
}

/// A run of `client`'s request, failing the test if it has not ended within a generous
/// bound: far less than the idle timeout (120 s), far more than the markup grace.
async fn run_bounded(client: &foya_actors::provider::http::HttpModelClient) -> Vec<StreamEvent> {
    tokio::time::timeout(std::time::Duration::from_secs(20), run(client))
        .await
        .expect("the error came before the idle timeout")
        .0
}

#[tokio::test]
async fn a_page_whose_connection_stays_open_fails_without_waiting_for_the_idle_timeout() {
    // The whole page, then the connection held open (chunked body never finished).
    let (url, _) = server(vec![Reply {
        hang: true,
        ..page(Some("text/event-stream"), false)
    }])
    .await;
    let events = run_bounded(&client(ProviderKind::OpenaiChat, &url)).await;
    let [StreamEvent::Error { error }] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(error.class, ErrorClass::InvalidResponse);
    assert!(
        error.message.contains("a page titled `502 Bad Gateway`"),
        "{}",
        error.message
    );

    // Markup without a title or `</html>`: what came within the grace is shown.
    let (url, _) = server(vec![Reply {
        status: 200,
        headers: vec![("content-type", "text/event-stream")],
        chunks: vec![Bytes::from_static(b"<Error><Code>Denied</Code>")],
        hang: true,
        ..Reply::default()
    }])
    .await;
    let events = run_bounded(&client(ProviderKind::OpenaiChat, &url)).await;
    let [StreamEvent::Error { error }] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(error.class, ErrorClass::InvalidResponse);
    assert!(
        error
            .message
            .contains("and `<Error><Code>Denied</Code>`; check the base URL"),
        "{}",
        error.message
    );

    // Not an event stream by its content type: the error does not wait either.
    let (url, _) = server(vec![Reply {
        hang: true,
        ..page(Some("text/html"), false)
    }])
    .await;
    let events = run_bounded(&client(ProviderKind::OpenaiChat, &url)).await;
    let [StreamEvent::Error { error }] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert!(error.message.contains("text/html"), "{}", error.message);
}
