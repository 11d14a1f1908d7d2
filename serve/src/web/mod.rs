//! The web view of `foya serve`: a page at `/` and its script and style files, embedded
//! in the binary (`include_str!`) and served with a strict Content-Security-Policy (no
//! inline script or style, no other origin, no frames). The files hold no session data,
//! so they are served without the bearer token; the page asks for the token once, keeps
//! it in the tab's `sessionStorage` and sends it as `Authorization: Bearer` on every API
//! call, the event stream included (read with `fetch`, not `EventSource`, which cannot
//! send a header), so the token never appears in a URL or a server log. `docs/web-view.md`
//! describes the page.

use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// Paths served without the bearer token (the page and its static files).
pub(crate) const PUBLIC_PATHS: &[&str] = &[
    "/",
    "/web/app.js",
    "/web/transcript.js",
    "/web/text.js",
    "/web/app.css",
];

/// The page's policy: scripts, styles and connections only from this origin, images
/// also from `blob:` (previews of an image before upload), nothing else.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' blob:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const TRANSCRIPT_JS: &str = include_str!("transcript.js");
const TEXT_JS: &str = include_str!("text.js");
const APP_CSS: &str = include_str!("app.css");

/// One embedded file with its content type and the page's security headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        (
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        ),
    ];
    (headers, body).into_response()
}

pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

pub(crate) async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

pub(crate) async fn transcript_js() -> Response {
    asset("text/javascript; charset=utf-8", TRANSCRIPT_JS)
}

pub(crate) async fn text_js() -> Response {
    asset("text/javascript; charset=utf-8", TEXT_JS)
}

pub(crate) async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_has_no_inline_script_or_handler() {
        let page = super::INDEX_HTML.to_ascii_lowercase();
        // Every <script> loads a file; no attribute runs code.
        for (i, _) in page.match_indices("<script") {
            let tag = &page[i..i + page[i..].find('>').unwrap_or(0)];
            assert!(tag.contains("src="), "inline script: {tag}");
        }
        let handler = page.split_whitespace().any(|w| {
            w.strip_prefix("on")
                .and_then(|rest| rest.split_once('='))
                .is_some_and(|(name, _)| name.chars().all(|c| c.is_ascii_alphabetic()))
        });
        assert!(!handler, "an inline event handler in the page");
        assert!(!page.contains("style="), "an inline style in the page");
    }

    #[test]
    fn scripts_never_write_html() {
        for (name, js) in [
            ("app.js", super::APP_JS),
            ("transcript.js", super::TRANSCRIPT_JS),
            ("text.js", super::TEXT_JS),
        ] {
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
            ] {
                assert!(!js.contains(sink), "{name} uses {sink}");
            }
        }
    }
}
