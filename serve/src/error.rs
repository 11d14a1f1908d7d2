//! The service's error body `{"error": {"code", "message"}}` and the mapping of runtime
//! errors to HTTP statuses (404 unknown session or approval, 409 deleted session, 400 bad
//! input, 401 missing token, 403 a foreign host or origin, 413 a body over the limit, 415 a
//! form's content type, 500 otherwise). Rejections of
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
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
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
        (self.status, Json(body)).into_response()
    }
}
