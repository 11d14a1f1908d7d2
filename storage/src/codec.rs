//! The stored-value codec: one format-version byte, then MessagePack with named fields
//! (`rmp_serde::to_vec_named`).
//!
//! Named fields make the encoding self-describing, so fields added later with
//! `#[serde(default)]` read back from old values and the internally tagged protocol enums
//! (`"type": "snake_case_kind"`) decode. An event is stored as a private `StoredEvent`
//! `{run_id, at_ms, kind}`: the session id and seq live in the table key, and no
//! `#[serde(flatten)]` is used in the stored form (flattening produces maps of unknown
//! length, which rmp-serde handles poorly).
//!
//! Golden encodings in `storage/tests/golden/` pin the format: a change that alters the
//! bytes of an existing event fails a test. A real format change bumps
//! [`FORMAT_VERSION`] and keeps a reader for the old version.

use crate::error::ReadError;
use foya_protocol::{Event, EventKind, RunId, Seq, SessionId, UnixMs};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The format version written in front of every stored value today.
pub const FORMAT_VERSION: u8 = 1;

/// Why a value could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode value: {0}")]
pub struct EncodeError(pub String);

/// The stored form of an event (session id and seq are in the key).
#[derive(Serialize, Deserialize)]
struct StoredEvent<K> {
    run_id: Option<RunId>,
    at_ms: UnixMs,
    kind: K,
}

/// Encodes any value: `[FORMAT_VERSION] ++ msgpack_named(value)`.
///
/// # Errors
/// [`EncodeError`] when serde refuses the value (e.g. a path that is not UTF-8).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![FORMAT_VERSION];
    let mut ser = rmp_serde::Serializer::new(&mut out).with_struct_map();
    value
        .serialize(&mut ser)
        .map_err(|e| EncodeError(e.to_string()))?;
    Ok(out)
}

/// Decodes a value written by [`encode`].
///
/// # Errors
/// [`ReadError::UnsupportedFormat`] for an unknown version byte, [`ReadError::Decode`]
/// for an empty value or one that does not decode as `T`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ReadError> {
    let Some((&version, body)) = bytes.split_first() else {
        return Err(ReadError::Decode("empty stored value".into()));
    };
    if version != FORMAT_VERSION {
        return Err(ReadError::UnsupportedFormat {
            version,
            supported: FORMAT_VERSION,
        });
    }
    rmp_serde::from_slice(body).map_err(|e| ReadError::Decode(e.to_string()))
}

/// Encodes the stored form of an event (its run id, timestamp and kind).
///
/// # Errors
/// [`EncodeError`] when a field cannot be encoded.
pub fn encode_event(event: &Event) -> Result<Vec<u8>, EncodeError> {
    encode(&StoredEvent {
        run_id: event.run_id,
        at_ms: event.at_ms,
        kind: &event.kind,
    })
}

/// The header of a stored event without its kind: what a summary needs of a session's
/// latest event. Unknown fields (`kind`, `run_id`) are skipped by the decoder.
#[derive(Deserialize)]
struct StoredEventTime {
    at_ms: UnixMs,
}

/// The `at_ms` of a value written by [`encode_event`], without decoding its kind.
///
/// # Errors
/// As [`decode`].
pub(crate) fn decode_event_time(bytes: &[u8]) -> Result<UnixMs, ReadError> {
    decode::<StoredEventTime>(bytes).map(|stored| stored.at_ms)
}

/// Decodes a value written by [`encode_event`] back into the event at `(session_id, seq)`.
///
/// # Errors
/// As [`decode`].
pub fn decode_event(session_id: SessionId, seq: Seq, bytes: &[u8]) -> Result<Event, ReadError> {
    let stored: StoredEvent<EventKind> = decode(bytes)?;
    Ok(Event {
        session_id,
        seq,
        run_id: stored.run_id,
        at_ms: stored.at_ms,
        kind: stored.kind,
    })
}
