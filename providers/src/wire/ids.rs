//! Tool-call ids on the wire: the id under which each call of the history (and the tool
//! result answering it) is sent back to a provider, and the ids generated for calls a
//! provider streamed without one.
//!
//! Anthropic enforces `^[a-zA-Z0-9_-]+$` on `tool_use.id` / `tool_result.tool_use_id` and
//! refuses a request whose `tool_use` ids are not unique ("tool_use ids must be unique");
//! OpenAI Chat refuses tool-call ids over 40 characters. A history can hold ids that
//! break these rules: a server that sent odd characters or very long ids, or reused an
//! id across steps (a server numbering calls `call_0`, `call_1`… per response). Replayed
//! verbatim, such a history makes a strict provider refuse every later request of the
//! session. So every encoder sends the ids [`WireIds`] gives: a call's own id when it is
//! valid ([`valid_id`]) and not yet used in the request, otherwise a fresh one
//! (`call_` and 16 hex digits, a hash of the original id and the call's position,
//! colliding with no original id of the request); each tool result gets the id sent
//! for the call it answers. Deterministic: the same history always encodes to the same
//! bytes, and a call's wire id depends only on the history up to it and on the
//! request's original ids. The stored log keeps the originals.

use crate::ModelRequest;
use foya_protocol::{Message, ToolCall};
use std::collections::{HashMap, HashSet, VecDeque};

/// Longest id sent as is (OpenAI Chat rejects tool-call ids over 40 characters).
pub(crate) const MAX_WIRE_ID_CHARS: usize = 40;

/// Whether `id` can be sent as is: 1 to [`MAX_WIRE_ID_CHARS`] characters of
/// `[a-zA-Z0-9_-]` (Anthropic's pattern, within OpenAI's length limit).
pub(crate) fn valid_id(id: &str) -> bool {
    (1..=MAX_WIRE_ID_CHARS).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A fresh id for a call the provider streamed without one (or with an empty one; the
/// SSE framing fills them in for every protocol alike): `call_` and the 32 hex
/// digits of a UUIDv7 (37 characters, valid on the wire, unique within a session and
/// across sessions — never the per-response `call_0`, `call_1`… that repeat every step).
pub(crate) fn generated_call_id() -> String {
    format!("call_{}", uuid::Uuid::now_v7().simple())
}

/// FNV-1a (64-bit) over `parts`: stable across builds and platforms (unlike std's
/// hasher), so a history always maps to the same ids.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The wire ids of one request's calls and results, assigned in history order.
#[derive(Debug)]
pub(crate) struct WireIds<'a> {
    /// Every valid original call id of the request: fresh ids avoid them, so a valid
    /// unique id is never displaced.
    originals: HashSet<&'a str>,
    /// Ids already sent for calls of this request.
    used: HashSet<String>,
    /// For the calls of the latest assistant message: original id → wire ids, in call
    /// order (a result answers the first call with its id that has no result yet).
    pending: HashMap<&'a str, VecDeque<String>>,
    /// Calls seen so far (a call's position in the request).
    ordinal: u64,
}

impl<'a> WireIds<'a> {
    /// The id mapping for `request`.
    pub(crate) fn new(request: &'a ModelRequest) -> Self {
        let originals = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Assistant(a) => Some(a.tool_calls.iter()),
                _ => None,
            })
            .flatten()
            .map(|c| c.id.as_str())
            .filter(|id| valid_id(id))
            .collect();
        Self {
            originals,
            used: HashSet::new(),
            pending: HashMap::new(),
            ordinal: 0,
        }
    }

    /// The wire ids of an assistant message's `calls`, in order. Starts a new message:
    /// results that follow answer these calls.
    pub(crate) fn calls(&mut self, calls: &'a [ToolCall]) -> Vec<String> {
        self.pending.clear();
        calls
            .iter()
            .map(|call| {
                let original = call.id.as_str();
                let wire = if valid_id(original) && !self.used.contains(original) {
                    original.to_owned()
                } else {
                    self.fresh(original)
                };
                self.ordinal += 1;
                self.used.insert(wire.clone());
                self.pending
                    .entry(original)
                    .or_default()
                    .push_back(wire.clone());
                wire
            })
            .collect()
    }

    /// The wire id of a tool result answering the call with id `original`: the id sent
    /// for that call. A result that answers no call of the latest assistant message (a
    /// malformed history) keeps a valid id and gets a fresh one otherwise.
    pub(crate) fn result(&mut self, original: &'a str) -> String {
        if let Some(wire) = self.pending.get_mut(original).and_then(VecDeque::pop_front) {
            return wire;
        }
        if valid_id(original) {
            original.to_owned()
        } else {
            self.fresh(original)
        }
    }

    /// `call_<16 hex>` from `original` and the call's position, avoiding every original
    /// and every id already used.
    fn fresh(&self, original: &str) -> String {
        let ordinal = self.ordinal.to_le_bytes();
        (0u32..)
            .map(|attempt| {
                let hash = fnv1a(&[original.as_bytes(), &ordinal, &attempt.to_le_bytes()]);
                format!("call_{hash:016x}")
            })
            .find(|id| !self.originals.contains(id.as_str()) && !self.used.contains(id))
            .unwrap_or_default()
    }
}
