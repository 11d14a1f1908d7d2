//! A 2xx body that is a web page, whatever its `Content-Type` says.
//!
//! A proxy's or gateway's error page, a login page or a wrong base URL's site can arrive
//! with status 200 and `text/event-stream`, JSON or no content type at all. Decoded as
//! SSE it yields no event and ends like a cut stream (`stream_interrupted`, retried).
//! So the first bytes of every 2xx body are looked at: after whitespace (and a UTF-8
//! byte-order mark) an event stream starts with a field, a comment or a blank line and
//! JSON with `{` or `[`; a body whose first significant byte is `<` is markup, and the
//! request fails at once with `invalid_response` carrying the status (never retried: the
//! same URL answers the same), saying the server answered HTML and to check the base URL.
//!
//! The page shown in that error is what has arrived by then plus what arrives within
//! [`PAGE_GRACE`] (1 s), ending early at its `</title>` or `</html>`: a server that sends a
//! short page and then holds the connection open fails the request in at most that, not
//! after the idle timeout (120 s by default) nor at the body's end.

use super::{MAX_ERROR_BODY_BYTES, TransportError};
use crate::wire::{MAX_EXCERPT_CHARS, excerpt};
use bytes::Bytes;
use foya_protocol::{ErrorClass, ProviderError};
use futures::{Stream, StreamExt};
use std::time::Duration;

/// How long [`read_page`] waits, at most, for more of a page once it is known to be
/// markup. The page is only shown in an error message, so a short fixed bound is enough:
/// a real error page arrives at once (usually in one piece), and a server that holds the
/// connection open after it must not delay the error until the idle timeout.
const PAGE_GRACE: Duration = Duration::from_secs(1);

/// The end tags after which nothing more of a page is read: with its title (shown in the
/// error) or its end, the page has all it can tell.
const PAGE_ENDS: [&[u8]; 2] = [b"</title", b"</html"];

/// Leading whitespace looked through before the body counts as not markup.
const MAX_SNIFF_BYTES: usize = 4096;

/// The UTF-8 byte-order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether `head`, the first bytes of a body, starts with markup: `<` as the first byte
/// after ASCII whitespace and a leading byte-order mark. `None` while `head` holds only
/// whitespace (or the start of a byte-order mark).
pub(super) fn starts_with_markup(head: &[u8]) -> Option<bool> {
    let head = match head.strip_prefix(BOM) {
        Some(rest) => rest,
        None if !head.is_empty() && BOM.starts_with(head) => return None,
        None => head,
    };
    head.iter()
        .find(|b| !b.is_ascii_whitespace())
        .map(|&b| b == b'<')
}

/// What [`peek`] found: the chunks it read (a transport error or EOF among them ends
/// the peek and is replayed in order) and whether the body starts with markup.
pub(super) struct Peeked {
    pub(super) markup: bool,
    pub(super) read: Vec<Result<Bytes, TransportError>>,
}

/// Reads `body` until its first significant byte (at most [`MAX_SNIFF_BYTES`] of leading
/// whitespace), an error or its end.
///
/// # Cancel safety
/// Dropping the future loses the chunks read so far (the response is dropped with it).
pub(super) async fn peek<S>(body: &mut S) -> Peeked
where
    S: Stream<Item = Result<Bytes, TransportError>> + Unpin,
{
    let mut head = Vec::new();
    let mut read = Vec::new();
    while let Some(item) = body.next().await {
        let chunk = item.as_ref().ok().cloned();
        read.push(item);
        let Some(chunk) = chunk else { break };
        let verdict = if head.is_empty() {
            starts_with_markup(&chunk)
        } else {
            None
        };
        let verdict = verdict.or_else(|| {
            head.extend_from_slice(&chunk[..chunk.len().min(MAX_SNIFF_BYTES)]);
            starts_with_markup(&head)
        });
        match verdict {
            Some(markup) => return Peeked { markup, read },
            None if head.len() >= MAX_SNIFF_BYTES => break,
            None => {}
        }
    }
    Peeked {
        markup: false,
        read,
    }
}

/// Whether `window` holds one of [`PAGE_ENDS`] (ASCII case-insensitive).
fn shows_page_end(window: &[u8]) -> bool {
    PAGE_ENDS.iter().any(|tag| {
        window
            .windows(tag.len())
            .any(|w| w.eq_ignore_ascii_case(tag))
    })
}

/// The page: the bytes `read` and what follows in `body` within [`PAGE_GRACE`], at most
/// [`MAX_ERROR_BODY_BYTES`] (lossy UTF-8). The body's end, a transport error, or the
/// page's `</title` or `</html` ends it earlier.
///
/// # Cancel safety
/// Dropping the future loses the chunks read so far.
pub(super) async fn read_page<S>(read: Vec<Result<Bytes, TransportError>>, body: &mut S) -> String
where
    S: Stream<Item = Result<Bytes, TransportError>> + Unpin,
{
    let mut page = Vec::new();
    let mut ok = true;
    for item in read {
        match item {
            Ok(chunk) => page.extend_from_slice(&chunk),
            Err(_) => ok = false,
        }
    }
    let deadline = tokio::time::Instant::now() + PAGE_GRACE;
    // Each end tag is looked for in the new bytes and the few before them (a tag split
    // over two chunks), so the search stays linear in the page.
    let overlap = PAGE_ENDS.iter().map(|tag| tag.len() - 1).max().unwrap_or(0);
    let mut from = 0;
    while ok && page.len() < MAX_ERROR_BODY_BYTES && !shows_page_end(&page[from..]) {
        from = page.len().saturating_sub(overlap);
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(chunk))) => page.extend_from_slice(&chunk),
            // The grace is over, the body ended or failed.
            _ => break,
        }
    }
    page.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&page).into_owned()
}

/// The error of a 2xx `page` that is markup: `invalid_response` with the status. Shows
/// the page's `<title>` when it has one (else an excerpt), the request's URL and content
/// type, and points at the base URL (`base_url`, as displayed).
pub(super) fn markup_error(
    status: u16,
    content_type: Option<&str>,
    url: &str,
    base_url: &str,
    page: &str,
) -> ProviderError {
    let lower = page.to_ascii_lowercase();
    let html = ["<!doctype html", "<html", "<head", "<body", "<title"]
        .iter()
        .any(|tag| lower.contains(tag));
    let what = if html { "HTML" } else { "markup (HTML or XML)" };
    let shown = match title(page, &lower) {
        Some(title) => format!("a page titled `{}`", excerpt(title, MAX_EXCERPT_CHARS)),
        None => format!("`{}`", excerpt(page, MAX_EXCERPT_CHARS)),
    };
    let content_type = match content_type {
        Some(ct) => format!("content type `{}`", excerpt(ct, MAX_EXCERPT_CHARS)),
        None => "no content type".to_owned(),
    };
    ProviderError {
        class: ErrorClass::InvalidResponse,
        message: format!(
            "the server answered {what}, not a model stream: POST {url} gave HTTP {status} \
             with {content_type} and {shown}; check the base URL `{base_url}` (a proxy, \
             gateway or login page, or a web site, answers this way)"
        ),
        retry_after_ms: None,
        status: Some(status),
    }
}

/// The text of the page's first `<title>` element, if any and not blank (`lower` is
/// `page` in ASCII lower case, so byte offsets agree).
fn title<'p>(page: &'p str, lower: &str) -> Option<&'p str> {
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    Some(page.get(start..end)?.trim()).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`read_page`] makes of `chunks` followed by a connection held open, and how
    /// long (paused time) it took.
    async fn page_of_open_body(chunks: &[&'static str]) -> (String, Duration) {
        let mut body = Box::pin(
            futures::stream::iter(
                chunks
                    .iter()
                    .map(|c| Ok(Bytes::from_static(c.as_bytes())))
                    .collect::<Vec<_>>(),
            )
            .chain(futures::stream::pending()),
        );
        let first = body.next().await.into_iter().collect();
        let start = tokio::time::Instant::now();
        // The failure guard: far beyond the grace (a hang would otherwise never end).
        let page = tokio::time::timeout(Duration::from_secs(60), read_page(first, &mut body))
            .await
            .expect("the page is read without waiting for the body's end");
        (page, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_is_read_up_to_its_title_or_end_then_no_more_is_awaited() {
        let cases = [
            (
                &["<html><TITLE>502</ti", "tLe>", "<body>"][..],
                "<html><TITLE>502</titLe>",
            ),
            (&["<html>", "<body></HT", "ML>"], "<html><body></HTML>"),
        ];
        for (chunks, page) in cases {
            assert_eq!(
                page_of_open_body(chunks).await,
                (page.to_owned(), Duration::ZERO)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn markup_without_title_or_end_is_awaited_for_the_grace_only() {
        assert_eq!(
            page_of_open_body(&["<Error>", "<Code>Denied</Code>"]).await,
            ("<Error><Code>Denied</Code>".to_owned(), PAGE_GRACE)
        );
    }

    #[test]
    fn markup_is_told_by_the_first_significant_byte() {
        let verdicts: Vec<Option<bool>> = [
            &b""[..],
            b" \r\n\t",
            b"\xEF",
            b"\xEF\xBB",
            b"\xEF\xBB\xBF \n",
            b"\xEF\xBB\xBF<html>",
            b"\n\n<!DOCTYPE html>",
            b"<?xml version=\"1.0\"?>",
            b"data: {}\n\n",
            b": ping\n",
            b"{\"error\":{}}",
            b"\xEFx",
            b"event: <html>",
        ]
        .into_iter()
        .map(starts_with_markup)
        .collect();
        let (u, t, f) = (None, Some(true), Some(false));
        assert_eq!(verdicts, vec![u, u, u, u, u, t, t, t, f, f, f, f, f]);
    }

    #[test]
    fn the_message_names_the_title_or_an_excerpt() {
        let error = markup_error(
            200,
            None,
            "http://h/v1/chat/completions",
            "http://h/v1",
            "<!DOCTYPE html><HTML><Title> 502 Bad Gateway </TITLE><body>x</body>",
        );
        assert_eq!(
            error.message,
            "the server answered HTML, not a model stream: POST http://h/v1/chat/completions \
             gave HTTP 200 with no content type and a page titled `502 Bad Gateway`; check \
             the base URL `http://h/v1` (a proxy, gateway or login page, or a web site, \
             answers this way)"
        );
        let error = markup_error(200, Some("application/json"), "u", "b", "<Error>no</Error>");
        assert_eq!(
            error.message,
            "the server answered markup (HTML or XML), not a model stream: POST u gave HTTP \
             200 with content type `application/json` and `<Error>no</Error>`; check the base \
             URL `b` (a proxy, gateway or login page, or a web site, answers this way)"
        );
        assert_eq!(
            (error.class, error.status, error.retry_after_ms),
            (ErrorClass::InvalidResponse, Some(200), None)
        );
    }
}
