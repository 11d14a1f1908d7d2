//! The attachment store: uploaded image bytes kept in a directory, one file per
//! attachment named by its UUIDv7 id, with a `<id>.type` sidecar holding the media type.
//! The turn resolves the attachment references of a request's user messages into
//! [`ModelRequest::images`] (base64 + media type) with [`with_images`].

use crate::provider::{ImageData, ModelRequest};
use base64::Engine as _;
use foya_protocol::Message;
use std::path::{Path, PathBuf};

/// Failure of the attachment store.
#[derive(Debug, thiserror::Error)]
pub enum AttachmentError {
    /// The id is not a UUID (ids are never used as paths unchecked).
    #[error("invalid attachment id {0:?}")]
    InvalidId(String),
    /// The media type is empty or not `type/subtype`.
    #[error("invalid media type {0:?}")]
    InvalidMediaType(String),
    /// The directory could not be read or written.
    #[error("attachment store: {0}")]
    Io(#[from] std::io::Error),
}

/// One stored attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// UUIDv7 id, lower-case hyphenated.
    pub id: String,
    /// MIME type, e.g. `image/png`.
    pub media_type: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A directory-backed attachment store.
#[derive(Debug, Clone)]
pub struct AttachmentStore {
    dir: PathBuf,
}

impl AttachmentStore {
    /// A store over `dir` (created on the first `put`).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `bytes` under a fresh UUIDv7 id and returns the id.
    ///
    /// # Errors
    /// [`AttachmentError::InvalidMediaType`], [`AttachmentError::Io`].
    pub fn put(&self, bytes: &[u8], media_type: &str) -> Result<String, AttachmentError> {
        let media_type = media_type.trim();
        if media_type.is_empty()
            || !media_type.contains('/')
            || media_type.chars().any(|c| c.is_control())
        {
            return Err(AttachmentError::InvalidMediaType(media_type.to_owned()));
        }
        std::fs::create_dir_all(&self.dir)?;
        let id = uuid::Uuid::now_v7().to_string();
        std::fs::write(self.dir.join(format!("{id}.type")), media_type)?;
        std::fs::write(self.dir.join(&id), bytes)?;
        Ok(id)
    }

    /// The attachment `id`, or `None` when there is none.
    ///
    /// # Errors
    /// [`AttachmentError::InvalidId`] for a non-UUID id, [`AttachmentError::Io`].
    pub fn get(&self, id: &str) -> Result<Option<Attachment>, AttachmentError> {
        let uuid =
            uuid::Uuid::parse_str(id).map_err(|_| AttachmentError::InvalidId(id.to_owned()))?;
        let id = uuid.to_string();
        let bytes = match std::fs::read(self.dir.join(&id)) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let media_type = std::fs::read_to_string(self.dir.join(format!("{id}.type")))?;
        Ok(Some(Attachment {
            id,
            media_type: media_type.trim().to_owned(),
            bytes,
        }))
    }
}

/// `request` with `images` filled for every attachment referenced by its user messages
/// that the store holds (unknown or unreadable ones are left out; the wire adapters then
/// tell the model the image is unavailable). Without a store the request is unchanged.
#[must_use]
pub fn with_images(store: Option<&AttachmentStore>, mut request: ModelRequest) -> ModelRequest {
    let Some(store) = store else {
        return request;
    };
    let ids: Vec<String> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User(input) => Some(input.images.iter().map(|r| r.id.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    for id in ids {
        if request.images.contains_key(&id) {
            continue;
        }
        match store.get(&id) {
            Ok(Some(a)) => {
                let image = ImageData {
                    media_type: a.media_type,
                    base64: base64::engine::general_purpose::STANDARD.encode(&a.bytes),
                };
                request.images.insert(id, image);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "attachment unreadable"),
        }
    }
    request
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use foya_protocol::{AttachmentRef, Input};

    #[test]
    fn put_get_and_resolve_into_a_request() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::new(dir.path().join("attachments"));
        let id = store.put(b"\x89PNG", "image/png").unwrap();
        assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 7);
        assert_eq!(
            store.get(&id).unwrap(),
            Some(Attachment {
                id: id.clone(),
                media_type: "image/png".into(),
                bytes: b"\x89PNG".to_vec()
            })
        );
        assert!(matches!(
            store.get("../etc/passwd"),
            Err(AttachmentError::InvalidId(_))
        ));
        assert!(matches!(
            store.put(b"x", "nonsense"),
            Err(AttachmentError::InvalidMediaType(_))
        ));
        let missing = uuid::Uuid::now_v7().to_string();
        let input = Input {
            images: vec![
                AttachmentRef {
                    id: id.clone(),
                    media_type: None,
                },
                AttachmentRef {
                    id: missing,
                    media_type: None,
                },
            ],
            ..Input::text("look")
        };
        let request = ModelRequest {
            messages: vec![Message::User(input)],
            ..ModelRequest::default()
        };
        let out = with_images(Some(&store), request.clone());
        let mut expected = std::collections::BTreeMap::new();
        expected.insert(
            id,
            ImageData {
                media_type: "image/png".into(),
                base64: "iVBORw==".into(),
            },
        );
        assert_eq!(out.images, expected);
        assert_eq!(with_images(None, request.clone()), request);
    }
}
