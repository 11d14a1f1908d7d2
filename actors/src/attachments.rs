//! The attachment store: uploaded image bytes kept in a directory, one file per
//! attachment named by its UUIDv7 id, with a `<id>.type` sidecar holding the media type.
//! Tool results' images (an MCP tool's `image` content) are kept here too.
//!
//! With a shared event store (PostgreSQL, [`foya_storage::EventLog::attachments`]) the
//! attachments live in the store, so every node reads what any node stored
//! ([`AttachmentStore::with_shared`]): `put` writes the store first (the id is returned
//! only once another node can read it), then the directory; `get` reads the directory
//! and, on a miss, the store, keeping a copy in the directory (an attachment never
//! changes, so the copy never goes stale). The turn
//! resolves the attachment references of a request's user messages and tool results into
//! [`ModelRequest::images`] (base64 + media type) with [`with_images`].

use crate::provider::{ImageData, ModelRequest};
use base64::Engine as _;
use foya_protocol::Message;
use foya_storage::SharedAttachments;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Failure of the attachment store.
#[derive(Debug, thiserror::Error)]
pub enum AttachmentError {
    /// The id is not a UUID (ids are never used as paths unchecked).
    #[error("invalid attachment id {0:?}")]
    InvalidId(String),
    /// The media type is empty or not `type/subtype`.
    #[error("invalid media type {0:?}")]
    InvalidMediaType(String),
    /// The media type is well formed but not an image type models take (PNG, JPEG, GIF
    /// or WebP).
    #[error("unsupported media type {0:?} (send image/png, image/jpeg, image/gif or image/webp)")]
    UnsupportedMediaType(String),
    /// The bytes are not an image of the declared media type (checked by their magic
    /// bytes); `detected` is the image type they are, if any.
    #[error("{}", content_mismatch(declared, *detected))]
    ContentMismatch {
        /// The declared media type.
        declared: String,
        /// The image type the bytes start like, if any.
        detected: Option<&'static str>,
    },
    /// The directory could not be read or written.
    #[error("attachment store: {0}")]
    Io(#[from] std::io::Error),
    /// The shared store (PostgreSQL) refused or did not answer.
    #[error("shared attachment store: {0}")]
    Shared(foya_storage::SharedAttachmentError),
    /// The bytes start like the declared image type but their header does not parse as
    /// one (checked by the `image` crate's decoder for that type), or gives a width or
    /// height of 0.
    #[error("the content is not a valid {declared} image: {reason}")]
    InvalidImage {
        /// The declared media type.
        declared: String,
        /// What is wrong, e.g. `its header does not parse (…)`.
        reason: String,
    },
}

fn content_mismatch(declared: &str, detected: Option<&str>) -> String {
    match detected {
        Some(detected) => format!("the content is {detected}, not the declared {declared}"),
        None => format!("the content is not an image (declared {declared})"),
    }
}

/// The image media types attachments may have: what the three wire protocols accept.
pub(crate) const IMAGE_MEDIA_TYPES: [&str; 4] =
    ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The image type `bytes` start like, by magic bytes: PNG (`89 50 4E 47 0D 0A 1A 0A`),
/// JPEG (`FF D8 FF`), GIF (`GIF87a`/`GIF89a`), WebP (`RIFF` size `WEBP`); `None` for
/// anything else. Formats: the PNG spec (§5.2), JFIF/ISO 10918-1 SOI marker, GIF89a
/// header, the RIFF/WebP container spec.
#[must_use]
pub fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Width and height in pixels of `bytes` as an image of `media_type` (`image/png`,
/// `image/jpeg`, `image/gif` or `image/webp`), read from its header by the `image` crate's decoder for that
/// format (PNG: the IHDR chunk with its CRC; JPEG: the markers up to the frame header;
/// GIF: the header up to the first image descriptor; WebP: the RIFF chunks). Only the
/// header is read, not the pixel data.
///
/// # Errors
/// Why the bytes are not such an image: the header does not parse, or the width or
/// height is 0.
#[cfg(feature = "images")]
pub fn image_dimensions(bytes: &[u8], media_type: &str) -> Result<(u32, u32), ImageError> {
    let format = image::ImageFormat::from_mime_type(media_type).ok_or_else(|| {
        ImageError::NotAnImageType {
            media_type: media_type.to_owned(),
        }
    })?;
    let reader = image::ImageReader::with_format(std::io::Cursor::new(bytes), format);
    match reader.into_dimensions() {
        Ok((width, height)) if width > 0 && height > 0 => Ok((width, height)),
        Ok((width, height)) => Err(ImageError::NoPixels { width, height }),
        Err(e) => Err(ImageError::Header {
            message: e.to_string(),
        }),
    }
}

/// Why bytes are not an image of their declared type ([`image_dimensions`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The media type names no image format.
    #[error("{media_type} is not an image type")]
    NotAnImageType {
        /// The declared type.
        media_type: String,
    },
    /// The header says 0 pixels wide or high.
    #[error("it has no pixels ({width}×{height})")]
    NoPixels {
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
    },
    /// The header does not parse.
    #[error("its header does not parse ({message})")]
    Header {
        /// The decoder's message.
        message: String,
    },
    /// This build checks no image (built without the `images` feature).
    #[error(
        "{media_type} images are not supported by this build (foya-actors was built \
         without the `images` feature)"
    )]
    NotSupported {
        /// The declared type.
        media_type: String,
    },
}

/// Built without the `images` feature, no image can be checked, so every image is refused.
///
/// # Errors
/// Always: the reason names the missing feature.
#[cfg(not(feature = "images"))]
pub fn image_dimensions(_bytes: &[u8], media_type: &str) -> Result<(u32, u32), ImageError> {
    Err(ImageError::NotSupported {
        media_type: media_type.to_owned(),
    })
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

/// A directory-backed attachment store, optionally over a shared store (see the module
/// docs).
#[derive(Debug, Clone)]
pub struct AttachmentStore {
    dir: PathBuf,
    shared: Option<Arc<dyn SharedAttachments>>,
}

impl AttachmentStore {
    /// A store over `dir` (created on the first `put`).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            shared: None,
        }
    }

    /// A store kept in `shared` (when given), with `dir` as this node's copy of what it
    /// stored or read.
    pub fn with_shared(
        dir: impl Into<PathBuf>,
        shared: Option<Arc<dyn SharedAttachments>>,
    ) -> Self {
        Self {
            dir: dir.into(),
            shared,
        }
    }

    /// The directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores the image `bytes` under a fresh UUIDv7 id and returns the id. The media
    /// type (case-insensitive) must be `image/png`, `image/jpeg`, `image/gif` or
    /// `image/webp`, and the bytes an
    /// image of that type ([`sniff_image`]) whose header parses with real dimensions
    /// ([`image_dimensions`]); it is stored lower-case.
    ///
    /// # Errors
    /// [`AttachmentError::InvalidMediaType`], [`AttachmentError::UnsupportedMediaType`],
    /// [`AttachmentError::ContentMismatch`], [`AttachmentError::InvalidImage`],
    /// [`AttachmentError::Io`].
    pub fn put(&self, bytes: &[u8], media_type: &str) -> Result<String, AttachmentError> {
        let media_type = media_type.trim();
        if media_type.is_empty()
            || !media_type.contains('/')
            || media_type.chars().any(|c| c.is_control())
        {
            return Err(AttachmentError::InvalidMediaType(media_type.to_owned()));
        }
        let media_type = media_type.to_ascii_lowercase();
        if !IMAGE_MEDIA_TYPES.contains(&media_type.as_str()) {
            return Err(AttachmentError::UnsupportedMediaType(media_type));
        }
        let detected = sniff_image(bytes);
        if detected != Some(media_type.as_str()) {
            return Err(AttachmentError::ContentMismatch {
                declared: media_type,
                detected,
            });
        }
        if let Err(reason) = image_dimensions(bytes, &media_type) {
            return Err(AttachmentError::InvalidImage {
                declared: media_type,
                reason: reason.to_string(),
            });
        }
        let uuid = uuid::Uuid::now_v7();
        if let Some(shared) = &self.shared {
            shared
                .put(*uuid.as_bytes(), &media_type, bytes)
                .map_err(AttachmentError::Shared)?;
        }
        let id = uuid.to_string();
        self.keep(&id, &media_type, bytes)?;
        Ok(id)
    }

    /// Writes attachment `id` into the directory: the media type first, then the bytes
    /// through a temporary file renamed into place, so a reader never sees a partial
    /// attachment.
    fn keep(&self, id: &str, media_type: &str, bytes: &[u8]) -> Result<(), AttachmentError> {
        std::fs::create_dir_all(&self.dir)?;
        std::fs::write(self.dir.join(format!("{id}.type")), media_type)?;
        let partial = self
            .dir
            .join(format!("{id}.{}.partial", uuid::Uuid::now_v7().simple()));
        std::fs::write(&partial, bytes)?;
        std::fs::rename(&partial, self.dir.join(id))?;
        Ok(())
    }

    /// Size in bytes of attachment `id`, when the store holds it (`None` for an unknown
    /// or invalid id).
    #[must_use]
    pub fn size(&self, id: &str) -> Option<u64> {
        let uuid = uuid::Uuid::parse_str(id).ok()?;
        match std::fs::metadata(self.dir.join(uuid.to_string())) {
            Ok(m) => Some(m.len()),
            Err(_) if self.shared.is_some() => {
                self.get(id).ok().flatten().map(|a| a.bytes.len() as u64)
            }
            Err(_) => None,
        }
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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return self.get_shared(uuid);
            }
            Err(e) => return Err(e.into()),
        };
        let media_type = std::fs::read_to_string(self.dir.join(format!("{id}.type")))?;
        Ok(Some(Attachment {
            id,
            media_type: media_type.trim().to_owned(),
            bytes,
        }))
    }

    /// Attachment `uuid` from the shared store (none without one), kept in the
    /// directory for the next read (best effort: a directory that cannot be written
    /// only costs the next read a round trip).
    fn get_shared(&self, uuid: uuid::Uuid) -> Result<Option<Attachment>, AttachmentError> {
        let Some(shared) = &self.shared else {
            return Ok(None);
        };
        let Some((media_type, bytes)) = shared
            .get(*uuid.as_bytes())
            .map_err(AttachmentError::Shared)?
        else {
            return Ok(None);
        };
        let id = uuid.to_string();
        if let Err(e) = self.keep(&id, &media_type, &bytes) {
            tracing::debug!(error = %e, "attachment not kept in the local directory");
        }
        Ok(Some(Attachment {
            id,
            media_type,
            bytes,
        }))
    }
}

/// `request` with `images` filled for every attachment referenced by its user messages
/// and tool results that the store holds (unknown or unreadable ones are left out; the
/// wire adapters then tell the model the image is unavailable). Without a store the
/// request is unchanged.
#[must_use]
pub(crate) fn with_images(
    store: Option<&AttachmentStore>,
    mut request: ModelRequest,
) -> ModelRequest {
    let Some(store) = store else {
        return request;
    };
    let ids: Vec<String> = request
        .messages
        .iter()
        .flat_map(|m| match m {
            Message::User(input) => input.images.as_slice(),
            Message::Tool(result) => result.images.as_slice(),
            _ => &[],
        })
        .map(|r| r.id.clone())
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

    /// A 1×1 grey PNG (68 bytes; every chunk's CRC valid).
    const PNG_1X1: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x04\0\0\0\xb5\x1c\x0c\x02\0\0\0\x0bIDATx\xdacd`\0\0\0\x06\0\x020\x81\xd0/\0\0\0\0IEND\xaeB`\x82";

    /// A 3×2 image encoded as `format` by the `image` crate.
    fn encoded(format: image::ImageFormat) -> Vec<u8> {
        let mut bytes = Vec::new();
        image::DynamicImage::new_rgb8(3, 2)
            .write_to(&mut std::io::Cursor::new(&mut bytes), format)
            .unwrap();
        bytes
    }

    #[test]
    fn put_get_and_resolve_into_a_request() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::new(dir.path().join("attachments"));
        let png = PNG_1X1;
        let id = store.put(png, "IMAGE/PNG").unwrap();
        assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 7);
        assert_eq!(
            store.get(&id).unwrap(),
            Some(Attachment {
                id: id.clone(),
                media_type: "image/png".into(),
                bytes: png.to_vec()
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
            messages: vec![Message::User(input)].into(),
            ..ModelRequest::default()
        };
        let out = with_images(Some(&store), request.clone());
        let mut expected = std::collections::BTreeMap::new();
        expected.insert(
            id,
            ImageData {
                media_type: "image/png".into(),
                base64: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=".into(),
            },
        );
        assert_eq!(out.images, expected);
        assert_eq!(with_images(None, request.clone()), request);
    }

    #[test]
    fn only_images_of_the_declared_type_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::new(dir.path().join("attachments"));
        use image::ImageFormat;
        let images = [
            (PNG_1X1.to_vec(), "image/png"),
            (encoded(ImageFormat::Png), "image/png"),
            (encoded(ImageFormat::Jpeg), "image/jpeg"),
            (encoded(ImageFormat::Gif), "image/gif"),
            (encoded(ImageFormat::WebP), "image/webp"),
        ];
        for (bytes, media_type) in &images {
            assert_eq!(sniff_image(bytes), Some(*media_type));
            let id = store.put(bytes, media_type).unwrap();
            assert_eq!(&store.get(&id).unwrap().unwrap().bytes, bytes);
        }
        assert_eq!(image_dimensions(PNG_1X1, "image/png"), Ok((1, 1)));
        for (bytes, media_type) in &images[1..] {
            assert_eq!(
                image_dimensions(bytes, media_type),
                Ok((3, 2)),
                "{media_type}"
            );
        }
        for (bytes, _) in [
            (&b"GIF87a\x01\0"[..], "image/gif"),
            (b"GIF89a\x01\0", "image/gif"),
            (b"\xff\xd8\xff\xe0\0\x10JFIF", "image/jpeg"),
            (b"RIFF\x24\0\0\0WEBPVP8 ", "image/webp"),
        ] {
            assert!(sniff_image(bytes).is_some(), "{bytes:?}");
        }
        for bytes in [&b"hello"[..], b"\x89PNG", b"RIFF\x24\0\0\0WAVEfmt ", b""] {
            assert_eq!(sniff_image(bytes), None, "{bytes:?}");
        }
        let refused = |bytes: &[u8], media_type: &str| store.put(bytes, media_type).unwrap_err();
        assert_eq!(
            refused(b"hello", "image/png").to_string(),
            "the content is not an image (declared image/png)"
        );
        assert_eq!(
            refused(b"GIF89a..", "image/png").to_string(),
            "the content is image/gif, not the declared image/png"
        );
        assert_eq!(
            refused(b"hello", "text/plain").to_string(),
            "unsupported media type \"text/plain\" (send image/png, image/jpeg, image/gif or image/webp)"
        );
        assert!(matches!(
            refused(b"hello", ""),
            AttachmentError::InvalidMediaType(_)
        ));
        // Nothing refused was written.
        assert_eq!(
            std::fs::read_dir(store.dir()).unwrap().count(),
            2 * images.len()
        );
    }

    #[test]
    fn a_valid_signature_followed_by_garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::new(dir.path().join("attachments"));
        let garbage: Vec<u8> = (0..200u8).map(|i| i.wrapping_mul(37) | 1).collect();
        let signatures: [(&[u8], &str); 4] = [
            (b"\x89PNG\r\n\x1a\n", "image/png"),
            (b"\xff\xd8\xff\xe0", "image/jpeg"),
            (b"GIF89a", "image/gif"),
            (b"RIFF\x24\0\0\0WEBP", "image/webp"),
        ];
        for (signature, media_type) in signatures {
            for tail in [&b""[..], b"fake", &garbage] {
                let bytes = [signature, tail].concat();
                let error = store.put(&bytes, media_type).unwrap_err();
                let AttachmentError::InvalidImage { declared, reason } = &error else {
                    panic!("{media_type} + {} bytes: {error:?}", tail.len());
                };
                assert_eq!(declared, media_type);
                assert!(
                    reason.starts_with("its header does not parse ("),
                    "{reason}"
                );
                assert_eq!(
                    error.to_string(),
                    format!("the content is not a valid {media_type} image: {reason}")
                );
            }
        }
        // A PNG whose IHDR says 0×0 (CRC fixed up) has no pixels.
        let mut ihdr = b"IHDR\0\0\0\0\0\0\0\0\x08\x04\0\0\0".to_vec();
        let crc = crc32(&ihdr);
        ihdr.extend_from_slice(&crc.to_be_bytes());
        let empty = [&b"\x89PNG\r\n\x1a\n\0\0\0\r"[..], &ihdr, &PNG_1X1[33..]].concat();
        let error = store.put(&empty, "image/png").unwrap_err();
        assert!(
            matches!(&error, AttachmentError::InvalidImage { .. }),
            "{error:?}"
        );
        // Nothing refused was written.
        assert!(!store.dir().exists());
    }

    /// CRC-32 (ISO-HDLC, as PNG chunks use it).
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
