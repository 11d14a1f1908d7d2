//! Who may talk to `foya serve` from a browser: the one check (an axum middleware, in
//! front of every route, the event stream and the web view's files included) that keeps
//! a web page from using the API — by DNS rebinding (a page whose name now points at
//! 127.0.0.1) or by cross-site requests (a form, `fetch` in `no-cors` mode, an `<img>`).
//! `docs/security.md` says why each rule is there.
//!
//! 1. `Host` must name this server: its listen address, `localhost`, `127.0.0.1` or
//!    `[::1]` with its port, or a name given with `--allowed-host` (a reverse proxy's);
//!    on a wildcard address (`0.0.0.0`, `[::]`, token required) any IP literal with the
//!    port, too (an IP cannot be rebound). Every name is checked: each `Host` header (one
//!    that is not text names nothing) and the target's authority (HTTP/2's
//!    `:authority`, an absolute-form target). Else 403 `forbidden_host`.
//! 2. An `Origin` (browsers send it on every cross-origin request and every POST) must be
//!    `http(s)://` one of those hosts; `null` (a sandboxed frame, a `file:` page) is
//!    refused. A request a browser marks `Sec-Fetch-Site: cross-site` or `same-site`
//!    (made by another site's page, even without `Origin`: an `<img>`, a no-cors GET) is
//!    refused too, but a navigation to the web view's own page and static files (no
//!    session data in them). Else 403 `forbidden_origin`.
//! 3. A state-changing request (`POST`, `PUT`, `PATCH`, `DELETE`) with a content type a
//!    plain HTML form can send (`application/x-www-form-urlencoded`,
//!    `multipart/form-data`, `text/plain`) is refused, and so is a `POST` with an empty
//!    body (or a chunked one without any content type) whose content type is not
//!    `application/json` — unless the server has a
//!    token (then every such request carries `Authorization`, which no page can send to
//!    another origin without a CORS preflight this server never grants). 415
//!    `form_content_type`.
//!
//! Clients outside a browser (curl, `foya store backup`) send no `Origin`, no
//! `Sec-Fetch-Site`, and the `Host` of the URL they were given.

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The hosts this server answers to and whether it has a token.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    /// The port it listens on.
    port: u16,
    /// Host names (lowercase, IPv6 in brackets) that name it, with [`Self::port`].
    names: Vec<String>,
    /// `--allowed-host` values: a name (lowercase) and, if given, its only port.
    extra: Vec<(String, Option<u16>)>,
    /// It listens on a wildcard address: any IP literal with its port names it.
    any_ip: bool,
    /// A bearer token is required (see rule 3).
    tokened: bool,
}

impl Guard {
    /// The guard of a server bound to `bound`, started with `--listen listen`,
    /// `--allowed-host` values `allowed` and a token or not.
    ///
    /// # Errors
    /// An `--allowed-host` value that is not `HOST` or `HOST:PORT`.
    pub(crate) fn new(
        listen: &str,
        bound: SocketAddr,
        allowed: &[String],
        tokened: bool,
    ) -> anyhow::Result<Self> {
        let mut names: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        names.push(ip_name(bound.ip()));
        if let Some((host, _)) = split_authority(listen) {
            names.push(host);
        }
        let extra = allowed
            .iter()
            .map(|value| {
                split_authority(value)
                    .filter(|(host, _)| !host.is_empty())
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "--allowed-host {value}: expected HOST or HOST:PORT, e.g. \
                             foya.example.com"
                        )
                    })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            port: bound.port(),
            names,
            extra,
            any_ip: bound.ip().is_unspecified(),
            tokened,
        })
    }

    /// Whether `authority` (`host[:port]`; `default_port` when it names none) names
    /// this server.
    fn names_us(&self, authority: &str, default_port: u16) -> bool {
        let Some((host, port)) = split_authority(authority) else {
            return false;
        };
        let port = port.unwrap_or(default_port);
        if port == self.port
            && (self.names.contains(&host)
                || (self.any_ip && host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok()))
        {
            return true;
        }
        self.extra
            .iter()
            .any(|(name, only)| *name == host && only.is_none_or(|p| p == port))
    }

    /// Rule 2 for `origin`: `http(s)://` a host that names this server.
    fn origin_allowed(&self, origin: &str) -> bool {
        let (authority, default_port) = if let Some(rest) = origin.strip_prefix("http://") {
            (rest, 80)
        } else if let Some(rest) = origin.strip_prefix("https://") {
            (rest, 443)
        } else {
            return false;
        };
        !authority.contains('/') && self.names_us(authority, default_port)
    }

    /// The refusal of a request with `method`, `path` and `headers` (and whether its
    /// body is empty), if any.
    fn refusal(
        &self,
        method: &Method,
        uri: &axum::http::Uri,
        headers: &HeaderMap,
    ) -> Option<ApiError> {
        let path = uri.path();
        let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        // The names the request gives for this server: every `Host` header (a value that
        // is not text names nothing we know: refused, never skipped) and the authority
        // of its target (HTTP/2's `:authority`, an absolute-form `GET http://h/`), each
        // checked. HTTP/1.1 requires Host; a request without any comes from no browser.
        let mut hosts = headers
            .get_all(header::HOST)
            .iter()
            .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned())
            .chain(uri.authority().map(|a| a.as_str().to_owned()));
        if let Some(host) = hosts.find(|host| !self.names_us(host, 80)) {
            return Some(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!(
                    "this server answers only to its own address (Host {host:?} is another \
                     name: a page that rebinds its name to this machine is refused); behind \
                     a reverse proxy, start it with --allowed-host NAME"
                ),
            ));
        }
        // Every `Origin` header, not only the first.
        for value in headers.get_all(header::ORIGIN) {
            let origin = value.to_str().unwrap_or("");
            if !self.origin_allowed(origin) {
                return Some(forbidden_origin(format!(
                    "requests from another origin ({origin:?}) are refused: only this \
                     server's own page may call it from a browser"
                )));
            }
        }
        let public = matches!(*method, Method::GET | Method::HEAD)
            && super::web::PUBLIC_PATHS.contains(&path);
        if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
            .map(|s| s.trim().to_ascii_lowercase())
            && matches!(site.as_str(), "cross-site" | "same-site")
            && !public
        {
            return Some(forbidden_origin(format!(
                "a request made by another site's page (Sec-Fetch-Site: {site}) is refused"
            )));
        }
        if matches!(
            *method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        ) {
            let content_type = text(header::CONTENT_TYPE).map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
            if let Some(form) = content_type.as_deref().filter(|t| {
                matches!(
                    *t,
                    "application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain"
                )
            }) {
                return Some(form_content_type(format!(
                    "content type {form} is refused on a request that changes something (an \
                     HTML form of any web page can send it): send JSON with Content-Type: \
                     application/json (an image upload: the image's own type)"
                )));
            }
            // A chunked body (no length) may be empty too: without any Content-Type it is
            // refused.
            let chunked_untyped =
                content_type.is_none() && !headers.contains_key(header::CONTENT_LENGTH);
            if *method == Method::POST
                && !self.tokened
                && (empty_body(headers) || chunked_untyped)
                && content_type.as_deref() != Some("application/json")
            {
                return Some(form_content_type(
                    "a POST without a body needs Content-Type: application/json (any web \
                     page can send an empty POST without it; the body may stay empty)",
                ));
            }
        }
        None
    }
}

fn forbidden_origin(message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden_origin", message)
}

fn form_content_type(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "form_content_type",
        message,
    )
}

/// Whether the request announces an empty body: `Content-Length: 0`, or neither a
/// length nor `Transfer-Encoding`.
fn empty_body(headers: &HeaderMap) -> bool {
    match headers.get(header::CONTENT_LENGTH) {
        Some(length) => length.to_str().ok().map(str::trim) == Some("0"),
        None => !headers.contains_key(header::TRANSFER_ENCODING),
    }
}

/// `ip` as a `Host` names it (IPv6 in brackets).
fn ip_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// `host[:port]` split into the lowercase host (IPv6 kept in brackets) and the port;
/// `None` when the port is not a number or a bracket is not closed.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim();
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        match rest {
            "" => (host, None),
            rest => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok()?),
        None => None,
    };
    // A name may end with the root's dot (`localhost.`): the same name.
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    Some((host, port))
}

/// The middleware: refuses what [`Guard`] refuses, before the token is checked.
pub(crate) async fn check(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    match guard.refusal(request.method(), request.uri(), request.headers()) {
        Some(refusal) => refusal.into_response(),
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use axum::http::HeaderValue;

    fn guard(listen: &str, bound: &str, allowed: &[&str], tokened: bool) -> Guard {
        let allowed: Vec<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
        Guard::new(listen, bound.parse().unwrap(), &allowed, tokened).unwrap()
    }

    fn refused(
        g: &Guard,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Option<&'static str> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        g.refusal(&method, &path.parse().unwrap(), &map)
            .map(|e| e.code())
    }

    #[test]
    fn only_the_servers_own_names_are_hosts() {
        let g = guard(
            "127.0.0.1:0",
            "127.0.0.1:7878",
            &["foya.example.com", "proxy:8443"],
            false,
        );
        for host in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST.:7878",
            "[::1]:7878",
            "foya.example.com",
            "foya.example.com:443",
            "proxy:8443",
        ] {
            assert_eq!(
                refused(&g, Method::GET, "/sessions", &[("host", host)]),
                None,
                "{host}"
            );
        }
        for host in [
            "evil.example:7878",
            "127.0.0.1:7879",
            "localhost",
            "127.0.0.2:7878",
            "proxy:8444",
            "[::1:7878",
            "10.0.0.1:7878",
        ] {
            assert_eq!(
                refused(&g, Method::GET, "/", &[("host", host)]),
                Some("forbidden_host"),
                "{host}"
            );
        }
        let wildcard = guard("0.0.0.0:7878", "0.0.0.0:7878", &[], true);
        assert_eq!(
            refused(&wildcard, Method::GET, "/", &[("host", "10.0.0.1:7878")]),
            None
        );
        assert_eq!(
            refused(&wildcard, Method::GET, "/", &[("host", "[fe80::1]:7878")]),
            None
        );
        assert_eq!(
            refused(&wildcard, Method::GET, "/", &[("host", "myhost.lan:7878")]),
            Some("forbidden_host")
        );
        let named = guard("localhost:80", "127.0.0.1:80", &[], false);
        assert_eq!(
            refused(&named, Method::GET, "/", &[("host", "localhost")]),
            None
        );
        assert!(
            Guard::new(
                "x:1",
                "127.0.0.1:1".parse().unwrap(),
                &["a:b".into()],
                false
            )
            .is_err()
        );
        assert!(
            Guard::new(
                "x:1",
                "127.0.0.1:1".parse().unwrap(),
                &[":80".into()],
                false
            )
            .is_err()
        );
    }

    #[test]
    fn every_name_a_request_gives_is_checked() {
        let g = guard("127.0.0.1:0", "127.0.0.1:7878", &[], false);
        let own = ("host", "127.0.0.1:7878");
        // HTTP/2's :authority and an absolute-form target are names too.
        for target in [
            "http://evil.example:7878/sessions",
            "http://evil@127.0.0.1:7878/sessions",
        ] {
            assert_eq!(
                refused(&g, Method::GET, target, &[own]),
                Some("forbidden_host"),
                "{target}"
            );
            assert_eq!(
                refused(&g, Method::GET, target, &[]),
                Some("forbidden_host")
            );
        }
        assert_eq!(
            refused(&g, Method::GET, "http://localhost:7878/sessions", &[own]),
            None
        );
        let mut map = HeaderMap::new();
        map.append(header::HOST, HeaderValue::from_static("127.0.0.1:7878"));
        map.append(header::HOST, HeaderValue::from_static("evil.example:7878"));
        let uri = "/sessions".parse().unwrap();
        assert_eq!(
            g.refusal(&Method::GET, &uri, &map).map(|e| e.code()),
            Some("forbidden_host")
        );
        let mut map = HeaderMap::new();
        map.append(header::HOST, HeaderValue::from_bytes(b"\xffevil").unwrap());
        assert_eq!(
            g.refusal(&Method::GET, &uri, &map).map(|e| e.code()),
            Some("forbidden_host")
        );
        let mut map = HeaderMap::new();
        map.append(header::HOST, HeaderValue::from_static("127.0.0.1:7878"));
        map.append(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:7878"),
        );
        map.append(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert_eq!(
            g.refusal(&Method::GET, &uri, &map).map(|e| e.code()),
            Some("forbidden_origin")
        );
        assert_eq!(
            refused(
                &g,
                Method::GET,
                "/sessions",
                &[own, ("sec-fetch-site", "Cross-Site")]
            ),
            Some("forbidden_origin")
        );
        assert_eq!(
            refused(
                &g,
                Method::POST,
                "/sessions",
                &[own, ("transfer-encoding", "chunked")]
            ),
            Some("form_content_type")
        );
    }

    #[test]
    fn a_foreign_origin_or_site_is_refused_on_every_route() {
        let g = guard("127.0.0.1:0", "127.0.0.1:7878", &["foya.example.com"], true);
        let host = ("host", "127.0.0.1:7878");
        for origin in [
            "http://127.0.0.1:7878",
            "http://localhost:7878",
            "https://foya.example.com",
        ] {
            assert_eq!(
                refused(&g, Method::GET, "/sessions", &[host, ("origin", origin)]),
                None
            );
        }
        for origin in [
            "http://evil.example:7878",
            "null",
            "http://127.0.0.1:7879",
            "http://127.0.0.1",
            "file://",
            "http://127.0.0.1:7878/x",
        ] {
            for path in ["/sessions", "/sessions/x/events", "/"] {
                assert_eq!(
                    refused(&g, Method::GET, path, &[host, ("origin", origin)]),
                    Some("forbidden_origin"),
                    "{origin} {path}"
                );
            }
        }
        let cross = ("sec-fetch-site", "cross-site");
        assert_eq!(
            refused(&g, Method::GET, "/sessions/x/events", &[host, cross]),
            Some("forbidden_origin")
        );
        assert_eq!(refused(&g, Method::GET, "/", &[host, cross]), None);
        assert_eq!(
            refused(&g, Method::GET, "/web/app.js", &[host, cross]),
            None
        );
        assert_eq!(
            refused(
                &g,
                Method::GET,
                "/",
                &[host, ("sec-fetch-site", "same-origin")]
            ),
            None
        );
    }

    #[test]
    fn form_content_types_and_empty_posts_without_json_are_refused() {
        let open = guard("127.0.0.1:0", "127.0.0.1:7878", &[], false);
        let tokened = guard("127.0.0.1:0", "127.0.0.1:7878", &[], true);
        let host = ("host", "127.0.0.1:7878");
        for form in [
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "Text/Plain;charset=utf-8",
        ] {
            for g in [&open, &tokened] {
                for method in [Method::POST, Method::PUT, Method::DELETE] {
                    assert_eq!(
                        refused(
                            g,
                            method,
                            "/sessions",
                            &[host, ("content-type", form), ("content-length", "3")]
                        ),
                        Some("form_content_type")
                    );
                }
            }
        }
        let empty = ("content-length", "0");
        assert_eq!(
            refused(&open, Method::POST, "/sessions", &[host, empty]),
            Some("form_content_type")
        );
        assert_eq!(
            refused(&open, Method::POST, "/sessions", &[host]),
            Some("form_content_type")
        );
        assert_eq!(
            refused(
                &open,
                Method::POST,
                "/sessions",
                &[host, empty, ("content-type", "application/json")]
            ),
            None
        );
        assert_eq!(
            refused(&tokened, Method::POST, "/sessions/x/cancel", &[host, empty]),
            None
        );
        assert_eq!(refused(&open, Method::DELETE, "/sessions/x", &[host]), None);
        assert_eq!(
            refused(
                &open,
                Method::POST,
                "/attachments",
                &[host, ("content-type", "image/png"), ("content-length", "9")]
            ),
            None
        );
    }
}
