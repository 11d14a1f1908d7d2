//! The service's error body `{"error": {"code", "message"}}` and the mapping of runtime
//! errors to HTTP statuses (404 unknown session or approval, 409 deleted session, 400 bad
//! input, 401 missing token, 403 a foreign host or origin, 413 a body over the limit, 415 a
//! form's content type, 503 with `Retry-After` while a cluster node does not own the
//! session's shard or holds none to create in (a failover or handoff in progress), 500
//! otherwise). Rejections of
//! axum's extractors get the same body instead of axum's plain text.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use foya_actors::RuntimeError;
use serde_json::json;

/// An error answered as JSON.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Seconds for a `Retry-After` header (a 503 that clears by itself).
    retry_after: Option<u32>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A 503 the caller should retry after `seconds`.
    fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Its stable code (for the tests).
    #[cfg(test)]
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub(crate) fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            message.to_string(),
        )
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let message = e.to_string();
        match e {
            RuntimeError::SessionNotFound(_) => Self::not_found("session_not_found", message),
            RuntimeError::SessionDeleted(_) => {
                Self::new(StatusCode::CONFLICT, "session_deleted", message)
            }
            RuntimeError::EmptyInput => Self::new(StatusCode::BAD_REQUEST, "empty_input", message),
            RuntimeError::EmptyTitle => Self::new(StatusCode::BAD_REQUEST, "empty_title", message),
            RuntimeError::ImagesNotSupported { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "images_not_supported", message)
            }
            RuntimeError::UnknownApproval(_) => Self::not_found("approval_not_found", message),
            RuntimeError::ShuttingDown => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", message)
            }
            // A cluster node: the shard moves (a failover or handoff) or is not claimed
            // yet; another node, or this one a moment later, serves it.
            RuntimeError::NotOwner { .. } => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "not_owner", message).retry_after(1)
            }
            RuntimeError::NoShard => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "no_shard", message).retry_after(1)
            }
            // Storage and actor failures, and what only the embedding API returns.
            _ => Self::internal(message),
        }
    }
}

impl ApiError {
    /// An extractor's rejection: 413 `payload_too_large` for a body over
    /// [`super::MAX_BODY_BYTES`], else 400 `bad_request` with axum's text.
    fn rejection(status: StatusCode, text: String) -> Self {
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            Self::new(
                status,
                "payload_too_large",
                format!(
                    "the request body is larger than the limit of {} bytes ({} MiB)",
                    super::MAX_BODY_BYTES,
                    super::MAX_BODY_BYTES / (1024 * 1024)
                ),
            )
        } else {
            Self::bad_request(text)
        }
    }
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(e: axum::extract::rejection::JsonRejection) -> Self {
        Self::rejection(e.status(), e.body_text())
    }
}

impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(e: axum::extract::rejection::BytesRejection) -> Self {
        Self::rejection(e.status(), e.body_text())
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(e: axum::extract::rejection::QueryRejection) -> Self {
        Self::bad_request(e.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use foya_protocol::SessionId;

    #[test]
    fn a_shard_in_motion_is_a_503_to_retry_not_a_500() {
        let moved = RuntimeError::NotOwner {
            session: SessionId::new(),
            shard: 7,
            owner: Some("b".into()),
        };
        for (error, code) in [(moved, "not_owner"), (RuntimeError::NoShard, "no_shard")] {
            let api = ApiError::from(error);
            assert_eq!(api.code(), code);
            let response = api.into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers()[axum::http::header::RETRY_AFTER], "1");
        }
        let other = ApiError::from(RuntimeError::EmptyInput).into_response();
        assert!(
            other
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .is_none()
        );
    }
}
