//! `HttpModelClient`: the [`ModelClient`] that speaks a wire protocol over HTTP (reqwest
//! with rustls). POST the encoded request; a non-2xx answer is read (capped), classified
//! and becomes one `Error` event; a 2xx body is decoded as SSE with an idle timeout.
//!
//! A 2xx answer must be an event stream: its `Content-Type` is checked first
//! (`check_content_type`). Anything else (an HTML page from a wrong base URL, a
//! proxy's login page) is `invalid_response` naming the content type and an excerpt of
//! the body, with the status, which the retry policy never retries: a wrong URL does not
//! fix itself. Tolerated: no `Content-Type` at all (the body is decoded; nothing says it
//! is not a stream) and JSON (`application/json`, `…+json`: an error object sent with
//! 200, which some servers do, is classified as usual by the SSE layer). Whatever the
//! content type, a body whose first significant byte is `<` (a proxy's error page served
//! as `text/event-stream`) fails the same way, saying the server answered HTML and to
//! check the base URL (`markup`).
//!
//! The API key is read once from the profile's environment variable and is never
//! logged, shown in `Debug` or put into an error: every error this client yields has
//! the key replaced with `[redacted]` (a server may echo it in an error body or garbled
//! stream data), and the endpoint is shown without userinfo, query or fragment
//! (`redact::display_url`).

use super::classify::classify_http_error;
use super::redact::{display_url, redact_secrets, secrets_of};
use super::wire::{MAX_EXCERPT_CHARS, excerpt};
use super::wire::{SseLimits, TransportError, decode_sse};
use super::{ModelClient, ModelRequest};
use crate::profile::{ConfigError, ProviderProfile};
use bytes::Bytes;
use foya_protocol::{ErrorClass, ProviderError, StreamEvent};
use futures::stream::{self, BoxStream, Stream, StreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

mod markup;

/// Largest error body read from a non-2xx response.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// An API key; its `Debug` is redacted.
#[derive(Clone)]
struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// A model client for one provider profile.
#[derive(Debug, Clone)]
pub struct HttpModelClient {
    profile: ProviderProfile,
    api_key: Option<ApiKey>,
    /// Sent with every request after the protocol's own headers, replacing any of the
    /// same name: the authentication header, then the profile's `extra_headers` (all
    /// marked sensitive, so `Debug` does not show them).
    fixed_headers: HeaderMap,
    client: reqwest::Client,
    limits: SseLimits,
}

impl HttpModelClient {
    /// A client for `profile`, reading the API key from the environment variable named by
    /// `profile.api_key_env`.
    ///
    /// # Errors
    /// [`ConfigError::MissingApiKey`] when the variable is unset or empty and the key is
    /// not optional; [`ConfigError::Invalid`] when the HTTP client cannot be built.
    pub fn new(profile: ProviderProfile) -> Result<Self, ConfigError> {
        Self::with_env(profile, &|name| std::env::var(name).ok())
    }

    /// [`Self::new`] with an explicit environment lookup (tests, embedders).
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_env(
        profile: ProviderProfile,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let key = match &profile.api_key_env {
            None => None,
            Some(var) => match env(var).filter(|k| !k.trim().is_empty()) {
                Some(k) => Some(k.trim().to_owned()),
                None if profile.api_key_optional => None,
                None => {
                    return Err(ConfigError::MissingApiKey {
                        profile: profile.name.clone(),
                        env: var.clone(),
                    });
                }
            },
        };
        let invalid = |message: String| ConfigError::Invalid {
            profile: profile.name.clone(),
            message,
        };
        match reqwest::Url::parse(&profile.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(url) => {
                return Err(invalid(format!(
                    "base_url {} is not an http or https URL (scheme `{}`)",
                    display_url(&profile.base_url),
                    url.scheme()
                )));
            }
            Err(e) => {
                return Err(invalid(format!(
                    "base_url {} is not a URL ({e}; it needs a scheme, e.g. \
                     http://127.0.0.1:8000/v1)",
                    display_url(&profile.base_url)
                )));
            }
        }
        for (name, value) in [
            ("idle_timeout_ms", profile.idle_timeout_ms),
            ("connect_timeout_ms", profile.connect_timeout_ms),
        ] {
            if value == 0 {
                return Err(invalid(format!(
                    "{name} = 0 would time out every request: give at least 1 (milliseconds), \
                     or leave it out for the default"
                )));
            }
        }
        let mut fixed_headers = HeaderMap::new();
        if let Some(key) = &key {
            let (name, value) = profile.kind.auth_header(key);
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                invalid(format!(
                    "the API key is not a valid HTTP header value (control characters or \
                     non-ASCII text; check the variable {})",
                    profile.api_key_env.as_deref().unwrap_or_default()
                ))
            })?;
            value.set_sensitive(true);
            fixed_headers.insert(HeaderName::from_static(name), value);
        }
        for (name, value) in &profile.extra_headers {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                invalid(format!(
                    "extra_headers: `{name}` is not a valid HTTP header name"
                ))
            })?;
            // The value may be a gateway's key: never shown.
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                invalid(format!(
                    "extra_headers: the value of `{name}` is not a valid HTTP header value \
                     (control characters or non-ASCII text)"
                ))
            })?;
            value.set_sensitive(true);
            fixed_headers.insert(header, value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(profile.connect_timeout_ms))
            .build()
            .map_err(|e| ConfigError::Invalid {
                profile: profile.name.clone(),
                message: e.to_string(),
            })?;
        Ok(Self {
            profile,
            api_key: key.map(ApiKey),
            fixed_headers,
            client,
            limits: SseLimits::default(),
        })
    }

    /// The profile this client was built from.
    #[must_use]
    pub fn profile(&self) -> &ProviderProfile {
        &self.profile
    }

    /// Replaces the SSE framing limits (event size cap).
    #[must_use]
    pub fn with_limits(mut self, limits: SseLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The request for `request`, its URL as shown in error messages (no userinfo,
    /// query or fragment: each may carry a credential) and the path the protocol appended
    /// to the base URL.
    fn build(&self, mut request: ModelRequest) -> (reqwest::RequestBuilder, String, &'static str) {
        if request.model.is_empty() {
            request.model.clone_from(&self.profile.model);
        }
        if request.max_output_tokens.is_none() {
            request.max_output_tokens = self.profile.max_output_tokens;
        }
        let encoded = self.profile.kind.encode(&request);
        let url = endpoint(&self.profile.base_url, encoded.path);
        let shown = display_url(&url);
        // One value per name: the protocol's headers, then the authentication header and
        // the profile's `extra_headers`, each replacing a header of the same name (a
        // gateway's own `Authorization`, another `Accept`) instead of being sent beside it.
        let mut headers = HeaderMap::with_capacity(4 + self.fixed_headers.len());
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in encoded.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                headers.insert(name, value);
            }
        }
        for (name, value) in &self.fixed_headers {
            headers.insert(name, value.clone());
        }
        // `json` keeps the content type set above.
        let rb = self.client.post(url).headers(headers).json(&encoded.body);
        (rb, shown, encoded.path)
    }
}

/// The URL of a request: `path` appended to the base URL's path, before its query or
/// fragment (`https://h/openai?api-version=1` + `/chat/completions` →
/// `https://h/openai/chat/completions?api-version=1`, as Azure OpenAI needs).
#[must_use]
pub fn endpoint(base_url: &str, path: &str) -> String {
    let cut = base_url.find(['?', '#']).unwrap_or(base_url.len());
    format!("{}{path}{}", &base_url[..cut], &base_url[cut..])
}

/// What a 404 adds after the URL it came from: how the URL was made, and when the base
/// URL already ends in the path's first segment (`…/v1` + `/v1/messages`), that it
/// should not. A 404 is most often a base URL with a missing or doubled segment (or a
/// model the endpoint does not know, which the server's own message then says).
fn not_found_hint(url: &str, path: &str, kind: super::wire::ProviderKind) -> String {
    let base = url.strip_suffix(path).unwrap_or(url);
    let first = path
        .split('/')
        .find(|s| !s.is_empty())
        .map(|s| format!("/{s}"));
    match first {
        Some(first) if path.len() > first.len() && base.ends_with(&first) => format!(
            " (the base URL `{base}` already ends in `{first}`, and {kind} appends `{path}` itself: drop `{first}` from the base URL)"
        ),
        _ => format!(" (the URL is the base URL followed by `{path}`, the path {kind} uses)"),
    }
}

/// Checks the `Content-Type` of a 2xx response before its body is decoded as SSE.
///
/// # Errors
/// The content type (as sent) when it is neither `text/event-stream` nor JSON
/// (`application/json`, `…+json`), parameters (`; charset=utf-8`) and case ignored. A
/// response without the header passes.
pub(crate) fn check_content_type(headers: &reqwest::header::HeaderMap) -> Result<(), String> {
    let Some(value) = headers.get(reqwest::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
    let essence = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if essence == "text/event-stream" || essence == "application/json" || essence.ends_with("+json")
    {
        Ok(())
    } else {
        Err(text)
    }
}

/// The error of a 2xx response with content type `content_type` (not an event stream):
/// `invalid_response` with the status, never retried.
fn not_a_stream(status: u16, content_type: &str, url: &str, body: &str) -> ProviderError {
    let body = excerpt(body, MAX_EXCERPT_CHARS);
    let what = if body.is_empty() {
        "an empty body".to_owned()
    } else {
        format!("`{body}`")
    };
    ProviderError {
        class: ErrorClass::InvalidResponse,
        message: format!(
            "expected an event stream from POST {url}, got HTTP {status} with content type \
             `{}` and {what}",
            excerpt(content_type, MAX_EXCERPT_CHARS)
        ),
        retry_after_ms: None,
        status: Some(status),
    }
}

fn error_stream(error: ProviderError) -> BoxStream<'static, StreamEvent> {
    stream::iter([StreamEvent::Error { error }]).boxed()
}

/// The error of a request that got no response: its URL and the whole cause chain
/// (`request to http://127.0.0.1:9/v1/chat/completions failed: error sending request:
/// client error (Connect): tcp connect error: Connection refused (os error 111)`).
fn send_error(e: reqwest::Error, url: &str) -> ProviderError {
    let class = if e.is_builder() {
        ErrorClass::InvalidRequest
    } else {
        ErrorClass::Network
    };
    let cause = error_chain(&e.without_url());
    ProviderError::new(class, format!("request to {url} failed: {cause}"))
}

/// `error` and its sources, joined by `": "` (a source whose text its parent already
/// ends with is skipped).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}

/// Reads at most `MAX_ERROR_BODY_BYTES` of an error body (lossy UTF-8).
async fn read_capped(mut response: reqwest::Response, idle: Duration) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY_BYTES {
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&body).into_owned()
}

/// The body as chunks, failing with [`TransportError::Idle`] when none arrives in `idle`.
fn idle_bytes(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, TransportError>> + Send + 'static {
    let after_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    stream::unfold(
        (Box::pin(body), false),
        move |(mut body, failed)| async move {
            if failed {
                return None;
            }
            match tokio::time::timeout(idle, body.next()).await {
                Err(_) => Some((Err(TransportError::Idle { after_ms }), (body, true))),
                Ok(None) => None,
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), (body, false))),
                Ok(Some(Err(e))) => Some((
                    Err(TransportError::Io(e.without_url().to_string())),
                    (body, true),
                )),
            }
        },
    )
}

impl ModelClient for HttpModelClient {
    fn retry_policy(&self) -> Option<super::retry::RetryPolicy> {
        self.profile.retry
    }

    /// # Cancel safety
    /// Dropping the stream or cancelling `cancel` drops the response and closes the
    /// connection; the stream then ends without a final event.
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let (builder, url, path) = self.build(request);
        let kind = self.profile.kind;
        let limits = self.limits;
        let idle = Duration::from_millis(self.profile.idle_timeout_ms.max(1));
        let mut secrets = secrets_of(
            self.api_key.as_ref().map(|k| k.0.as_str()),
            &self.profile.base_url,
        );
        // Header values may be gateway keys: redacted like the API key.
        secrets.extend(
            self.profile
                .extra_headers
                .values()
                .filter(|v| v.chars().count() >= 8)
                .cloned(),
        );
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        let redactor = super::redact::StreamRedactor::new(secrets.clone());
        let base_url = display_url(&self.profile.base_url);
        let response = async move {
            let response = match tokio::time::timeout(idle, builder.send()).await {
                Err(_) => {
                    return error_stream(ProviderError::new(
                        ErrorClass::Network,
                        format!(
                            "no response headers from {url} within {} ms",
                            idle.as_millis()
                        ),
                    ));
                }
                Ok(Err(e)) => return error_stream(send_error(e, &url)),
                Ok(Ok(r)) => r,
            };
            let status = response.status();
            if !status.is_success() {
                let headers = response.headers().clone();
                let body = redact_secrets(&read_capped(response, idle).await, &secrets);
                let mut error = classify_http_error(status.as_u16(), &headers, &body);
                if status == reqwest::StatusCode::NOT_FOUND {
                    error.message = format!(
                        "{} from POST {url}{}",
                        error.message,
                        not_found_hint(&url, path, kind)
                    );
                } else if body.trim().is_empty() {
                    // Nothing from the server to explain it: say what was asked for (a
                    // wrong base URL shows as a doubled or missing path segment).
                    error.message = format!("{} from POST {url}", error.message);
                }
                return error_stream(error);
            }
            if let Err(content_type) = check_content_type(response.headers()) {
                // Read as a page is (up to its title or end, else what arrives within the
                // grace): a server holding the connection open does not delay the error
                // until the idle timeout.
                let mut body = Box::pin(idle_bytes(response.bytes_stream(), idle));
                let body =
                    redact_secrets(&markup::read_page(Vec::new(), &mut body).await, &secrets);
                return error_stream(not_a_stream(status.as_u16(), &content_type, &url, &body));
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let mut body = Box::pin(idle_bytes(response.bytes_stream(), idle));
            let peeked = markup::peek(&mut body).await;
            if peeked.markup {
                let page = markup::read_page(peeked.read, &mut body).await;
                return error_stream(markup::markup_error(
                    status.as_u16(),
                    content_type.as_deref(),
                    &url,
                    &base_url,
                    &redact_secrets(&page, &secrets),
                ));
            }
            decode_sse(
                stream::iter(peeked.read).chain(body),
                kind.decoder(),
                limits,
            )
        };
        stream::once(response)
            .flatten()
            .scan(redactor, |redactor, event| {
                futures::future::ready(Some(stream::iter(redactor.push(event))))
            })
            .flatten()
            .take_until(cancel.cancelled_owned())
            .boxed()
    }

    fn context_window(&self) -> u64 {
        self.profile.context_window
    }

    /// All three protocols carry images (OpenAI `image_url`, Anthropic `image` blocks,
    /// Responses `input_image`); the profile's `vision` says whether the model takes them
    /// (an input with images for a model without vision is refused at submit).
    fn supports_images(&self) -> bool {
        self.profile.vision
    }

    fn image_budget(&self) -> super::ImageBudget {
        self.profile.images
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};

    fn check(value: Option<&'static str>) -> Result<(), String> {
        let mut headers = HeaderMap::new();
        if let Some(v) = value {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(v));
        }
        check_content_type(&headers)
    }

    #[test]
    fn the_path_goes_before_the_base_urls_query_and_fragment() {
        assert_eq!(
            endpoint("https://h/v1?api-version=2024-10-21", "/chat/completions"),
            "https://h/v1/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            endpoint("http://h/v1#frag", "/responses"),
            "http://h/v1/responses#frag"
        );
        assert_eq!(endpoint("http://h", "/v1/messages"), "http://h/v1/messages");
    }

    #[test]
    fn a_404_names_a_doubled_path_segment() {
        use super::super::wire::ProviderKind;
        assert_eq!(
            not_found_hint(
                "https://api.anthropic.com/v1/v1/messages",
                "/v1/messages",
                ProviderKind::Anthropic
            ),
            " (the base URL `https://api.anthropic.com/v1` already ends in `/v1`, and \
             anthropic appends `/v1/messages` itself: drop `/v1` from the base URL)"
        );
        assert_eq!(
            not_found_hint(
                "https://example.com/chat/completions",
                "/chat/completions",
                ProviderKind::OpenaiChat
            ),
            " (the URL is the base URL followed by `/chat/completions`, the path \
             openai-chat uses)"
        );
        // A one-segment path has nothing to double.
        assert_eq!(
            not_found_hint(
                "http://h/v1/responses",
                "/responses",
                ProviderKind::OpenaiResponses
            ),
            " (the URL is the base URL followed by `/responses`, the path openai-responses \
             uses)"
        );
    }

    #[test]
    fn only_event_streams_json_and_a_missing_header_are_decoded() {
        let verdicts: Vec<Result<(), String>> = [
            Some("text/event-stream"),
            Some("Text/Event-Stream; charset=utf-8"),
            None,
            Some("application/json"),
            Some("application/problem+json; charset=utf-8"),
            Some("text/html; charset=utf-8"),
            Some("text/plain"),
            Some(""),
        ]
        .into_iter()
        .map(check)
        .collect();
        assert_eq!(
            verdicts,
            vec![
                Ok(()),
                Ok(()),
                Ok(()),
                Ok(()),
                Ok(()),
                Err("text/html; charset=utf-8".into()),
                Err("text/plain".into()),
                Err(String::new()),
            ]
        );
    }
}
