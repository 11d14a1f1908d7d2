//! Reading events straight from the pages of a database file, without redb: the last
//! resort of salvage, for a file whose btree cannot be walked (a damaged root or branch
//! page, a truncated file).
//!
//! Every 4 KiB-aligned offset of the file is tried as the start of a redb leaf page of
//! the `events` table: type byte `1`, a little-endian `u16` pair count at bytes 2..4, one
//! little-endian `u32` end offset per value (the key is fixed-width, so it has none),
//! then the keys (`(u128, u64)`, 24 bytes each, little-endian), then the values. An
//! entry counts only when its value decodes as a stored event (format version byte and
//! MessagePack of `{run_id, at_ms, kind}`), so pages of other tables, free pages and
//! damaged bytes are skipped. An event is never changed once committed, so every copy of
//! a `(session, seq)` found (the current page and older copies left in freed pages) holds
//! the same event. What this finds may include events of a transaction that was written
//! but never committed (a crash in the middle of a commit): they are events the runtime
//! produced, but were never acknowledged; salvage reports them as found beyond the
//! committed log.

use crate::codec;
use foya_protocol::{Event, Seq, SessionId};
use std::collections::BTreeMap;

/// redb's page size.
const PAGE: usize = 4096;
/// redb's leaf page type byte.
const LEAF: u8 = 1;
/// Width of an `events` key: session (`u128`) and seq (`u64`).
const KEY: usize = 24;
/// Largest leaf looked at (a leaf holding one large value spans several pages).
const MAX_LEAF: usize = 64 << 20;

/// Every decodable event found in `file`'s pages, by session and seq.
pub(crate) fn scan(file: &[u8]) -> BTreeMap<SessionId, BTreeMap<Seq, Event>> {
    let mut found: BTreeMap<SessionId, BTreeMap<Seq, Event>> = BTreeMap::new();
    let mut offset = 0;
    while offset < file.len() {
        let end = file.len().min(offset.saturating_add(MAX_LEAF));
        if let Some(page) = file.get(offset..end) {
            for event in leaf_events(page) {
                found
                    .entry(event.session_id)
                    .or_default()
                    .insert(event.seq, event);
            }
        }
        offset += PAGE;
    }
    found
}

/// The events of `page` read as an `events` leaf (empty when it is not one).
fn leaf_events(page: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    if page.first() != Some(&LEAF) {
        return out;
    }
    let Some(count) = page
        .get(2..4)
        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
    else {
        return out;
    };
    let keys_start = 4 + 4 * count;
    let values_start = keys_start + KEY * count;
    if count == 0 || values_start > page.len() {
        return out;
    }
    let mut value_start = values_start;
    for n in 0..count {
        let end_at = 4 + 4 * n;
        let Some(end) = page
            .get(end_at..end_at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        else {
            return out;
        };
        if end < value_start || end > page.len() {
            // The offsets no longer make sense: the rest of the page cannot be trusted.
            return out;
        }
        let key_at = keys_start + KEY * n;
        let (Some(key), Some(value)) = (page.get(key_at..key_at + KEY), page.get(value_start..end))
        else {
            return out;
        };
        value_start = end;
        let mut session = [0u8; 16];
        session.copy_from_slice(&key[..16]);
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&key[16..]);
        let session = SessionId::from_bytes(u128::from_le_bytes(session).to_be_bytes());
        let seq = Seq(u64::from_le_bytes(seq));
        if seq.0 == 0 {
            continue;
        }
        if let Ok(event) = codec::decode_event(session, seq, value) {
            out.push(event);
        }
    }
    out
}
