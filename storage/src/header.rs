//! redb's file header, read straight from the file: telling a commit slot written by a
//! newer redb format from a damaged one.
//!
//! redb refuses a file whose commit slot names a format version it does not know
//! ("Expected file format version <= 3, found N") before it verifies the slot's
//! checksum. A newer format writes a slot whose checksum matches its bytes; a flipped
//! bit or an overwritten header does not. The header (redb 4): the first 64 bytes, then
//! two commit slots of 128 bytes at offsets 64 and 192, each starting with its version
//! byte and ending with its checksum (XXH3-128, seed 0, little-endian) over the slot's
//! first 112 bytes.

use std::io::Read as _;
use std::path::Path;

/// Length of redb's magic number at the start of every database file (`redb\x1A\x0A\xA9\x0D\x0A`).
pub(crate) const REDB_MAGIC_LEN: usize = 9;
/// The format version this build's redb writes.
const KNOWN_VERSION: u8 = 3;
/// Offsets of the two commit slots.
const SLOTS: [usize; 2] = [64, 192];
/// A commit slot's length.
const SLOT: usize = 128;
/// Where a slot's checksum starts.
const CHECKSUM_AT: usize = SLOT - 16;

/// Why the header of the file at `path`, which redb refused as a newer format, is
/// damaged instead: `Some` when no slot naming an unknown version has a matching
/// checksum (so no newer redb wrote it); `None` when one does (or the header cannot be
/// read: the refusal stands).
pub(crate) fn version_damage(path: &Path) -> Option<String> {
    let mut header = Vec::with_capacity(SLOTS[1] + SLOT);
    std::fs::File::open(path)
        .ok()?
        .take((SLOTS[1] + SLOT) as u64)
        .read_to_end(&mut header)
        .ok()?;
    slots_damage(&header)
}

/// [`version_damage`] of the header bytes.
fn slots_damage(header: &[u8]) -> Option<String> {
    let mut damaged = Vec::new();
    for (n, at) in SLOTS.into_iter().enumerate() {
        let slot = header.get(at..at + SLOT)?;
        let version = slot[0];
        if version <= KNOWN_VERSION {
            continue;
        }
        let mut stored = [0u8; 16];
        stored.copy_from_slice(&slot[CHECKSUM_AT..]);
        if xxhash_rust::xxh3::xxh3_128(&slot[..CHECKSUM_AT]) == u128::from_le_bytes(stored) {
            // Written whole by a redb of a newer format.
            return None;
        }
        damaged.push(format!("commit slot {n} names format version {version}"));
    }
    (!damaged.is_empty()).then(|| {
        format!(
            "its header is damaged: {}, but its checksum does not match its bytes (a slot \
             written by a later redb would match)",
            damaged.join(" and ")
        )
    })
}

/// The file's length against the layout its header records (redb's header, at fixed
/// offsets: page size, region header pages, region data pages, full regions, trailing
/// region data pages, little-endian `u32`s from byte 12). A writer that crashed repairs
/// from the file's length, so a cut that ends on a region boundary would pass redb;
/// this check does not let it. redb itself holds that a file shorter than its stored
/// layout is damage (it shrinks a file only after writing a smaller layout), but a
/// writable open of one left by a killed writer lets its repair write to it before
/// failing: [`crate::Store::open`] refuses it first.
pub(crate) fn layout_problem(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut header = [0u8; 32];
    file.read_exact(&mut header).ok()?;
    if header[..REDB_MAGIC_LEN] != *b"redb\x1A\x0A\xA9\x0D\x0A" {
        return None;
    }
    let field = |at: usize| {
        u64::from(u32::from_le_bytes([
            header[at],
            header[at + 1],
            header[at + 2],
            header[at + 3],
        ]))
    };
    let (page, region_header, region_data, full, trailing) =
        (field(12), field(16), field(20), field(24), field(28));
    let trailing_len = if trailing > 0 {
        (region_header + trailing) * page
    } else {
        0
    };
    let layout = page + full * (region_header + region_data) * page + trailing_len;
    let len = file.metadata().ok()?.len();
    (len < layout).then(|| {
        format!(
            "the file is {} bytes shorter than the layout its header records ({layout} \
             bytes): it was cut short",
            layout - len
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A header whose slots are what redb writes: version 3, a matching checksum.
    fn header() -> Vec<u8> {
        let mut bytes = vec![0u8; 4096];
        for at in SLOTS {
            bytes[at] = KNOWN_VERSION;
            bytes[at + 8] = 7;
            let sum = xxhash_rust::xxh3::xxh3_128(&bytes[at..at + CHECKSUM_AT]);
            bytes[at + CHECKSUM_AT..at + SLOT].copy_from_slice(&sum.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn a_changed_version_byte_is_damage_and_a_checksummed_one_a_newer_format() {
        let mut bytes = header();
        assert_eq!(slots_damage(&bytes), None);
        bytes[SLOTS[0]] = 9;
        bytes[SLOTS[1]] = 9;
        let damage = slots_damage(&bytes).unwrap();
        assert!(damage.contains("slot 0 names format version 9"), "{damage}");
        assert!(damage.contains("slot 1 names format version 9"), "{damage}");
        // A newer redb: the version and a checksum over it.
        let at = SLOTS[1];
        let sum = xxhash_rust::xxh3::xxh3_128(&bytes[at..at + CHECKSUM_AT]);
        bytes[at + CHECKSUM_AT..at + SLOT].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(slots_damage(&bytes), None);
        assert_eq!(slots_damage(&bytes[..100]), None);
    }

    #[test]
    fn the_checksum_is_the_one_redb_writes() {
        // A real store file: both of its slots check with this checksum.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.redb");
        drop(redb::Database::create(&path).unwrap());
        let bytes = std::fs::read(&path).unwrap();
        for at in SLOTS {
            let slot = &bytes[at..at + SLOT];
            let mut stored = [0u8; 16];
            stored.copy_from_slice(&slot[CHECKSUM_AT..]);
            assert_eq!(slot[0], KNOWN_VERSION);
            assert_eq!(
                xxhash_rust::xxh3::xxh3_128(&slot[..CHECKSUM_AT]),
                u128::from_le_bytes(stored)
            );
        }
    }
}
