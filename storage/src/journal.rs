//! The acknowledgement journal: `<database file>.acks`, beside the redb file, an
//! append-only list of "session S was acknowledged up to seq N" records. It lets an open,
//! a check and a salvage tell when the database holds fewer events than were
//! acknowledged (redb's repair rolled back past acknowledged commits, a damaged file),
//! instead of "repaired" silently meaning "lost".
//!
//! The writer thread appends one record per session of a batch **after** the batch's
//! redb commit returned and before the batch's appends resolve, in one `write` call per
//! batch (no fsync: the record reaches the page cache, so it survives a crash of the
//! process; after a power loss it may lag the database, which can only under-report,
//! never invent, a loss). Each record is 32 bytes: session key (`u128` LE), seq (`u64`
//! LE), an FNV-1a checksum (`u32` LE) of those 24 bytes, and the magic `b"ACK1"`; a
//! record that does not check (torn write, damage) is skipped and counted. The journal
//! is rewritten compacted (one record per session) when a store opens and when it passes
//! [`COMPACT_BYTES`]. The writer keeps an FNV-1a digest of the file's bytes, which the
//! clean-close mark records with its length: compaction makes lengths repeat, so the
//! length alone cannot tell the journal a file was closed with from a later one.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Size of one record.
const RECORD: usize = 32;
/// The last 4 bytes of every record.
const MAGIC: &[u8; 4] = b"ACK1";
/// The journal is compacted when it grows past this many bytes.
pub(crate) const COMPACT_BYTES: u64 = 64 << 20;

/// The journal's path for a database file.
pub(crate) fn path_for(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".acks");
    PathBuf::from(name)
}

/// What a journal holds: the highest acknowledged seq per session key.
#[derive(Debug, Clone)]
pub(crate) struct Acks {
    pub(crate) seqs: HashMap<u128, u64>,
    /// Records skipped because they did not check.
    pub(crate) damaged_records: u64,
    /// Records that checked.
    pub(crate) records: u64,
    /// [`digest`] of the file's bytes, all of them (damaged records included).
    pub(crate) digest: u64,
}

impl Default for Acks {
    fn default() -> Self {
        Self {
            seqs: HashMap::new(),
            damaged_records: 0,
            records: 0,
            digest: digest(EMPTY_DIGEST, &[]),
        }
    }
}

/// The digest of no bytes (FNV-1a's offset basis, 64 bits).
pub(crate) const EMPTY_DIGEST: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, 64 bits, of `bytes` following the bytes `state` is the digest of.
pub(crate) fn digest(state: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(state, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// FNV-1a, 32 bits.
fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// Encodes one record.
pub(crate) fn record(key: u128, seq: u64, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    let sum = checksum(&out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(MAGIC);
}

/// Reads the journal at `path` (a missing file holds nothing).
///
/// # Errors
/// The file exists but cannot be read.
pub(crate) fn load(path: &Path) -> std::io::Result<Acks> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Acks::default()),
        Err(e) => return Err(e),
    };
    let mut acks = Acks {
        digest: digest(EMPTY_DIGEST, &bytes),
        ..Acks::default()
    };
    for chunk in bytes.chunks(RECORD) {
        let valid = chunk.len() == RECORD
            && &chunk[28..] == MAGIC
            && chunk[24..28] == checksum(&chunk[..24]).to_le_bytes();
        if !valid {
            acks.damaged_records += 1;
            continue;
        }
        let mut key = [0u8; 16];
        key.copy_from_slice(&chunk[..16]);
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&chunk[16..24]);
        let (key, seq) = (u128::from_le_bytes(key), u64::from_le_bytes(seq));
        acks.records += 1;
        let entry = acks.seqs.entry(key).or_insert(0);
        *entry = (*entry).max(seq);
    }
    Ok(acks)
}

/// Rewrites the journal at `path` to hold exactly `seqs` (written beside it, then
/// renamed over it); returns the [`digest`] of what it wrote.
///
/// # Errors
/// The file cannot be written or renamed.
pub(crate) fn rewrite(path: &Path, seqs: &HashMap<u128, u64>) -> std::io::Result<u64> {
    let mut bytes = Vec::with_capacity(seqs.len() * RECORD);
    for (key, seq) in seqs {
        record(*key, *seq, &mut bytes);
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(digest(EMPTY_DIGEST, &bytes))
}

/// The writer thread's handle on the journal.
pub(crate) struct Journal {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Highest seq acknowledged per session (loaded at open, then kept up to date), for
    /// compaction.
    seqs: HashMap<u128, u64>,
    written: u64,
    /// [`digest`] of the file's bytes (given at open, extended by every write).
    digest: u64,
    buffer: Vec<u8>,
    /// A write failed (logged once; the journal is advisory).
    failed: bool,
}

impl Journal {
    /// The journal at `path`, starting from `seqs`, whose bytes have the digest
    /// `digest`; the file is opened (created if needed) for appending at the first
    /// acknowledgement.
    pub(crate) fn open(path: PathBuf, seqs: HashMap<u128, u64>, digest: u64) -> Self {
        Self {
            path,
            file: None,
            seqs,
            written: 0,
            digest,
            buffer: Vec::new(),
            failed: false,
        }
    }

    /// The journal file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The digest of the file's bytes; `None` once a write failed (the file's content
    /// is then unknown).
    pub(crate) fn digest(&self) -> Option<u64> {
        (!self.failed).then_some(self.digest)
    }

    /// The open file, opened at the first call (`None` after a failure, logged once).
    fn file(&mut self) -> Option<&mut std::fs::File> {
        if self.file.is_none() && !self.failed {
            let opened = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path);
            match opened {
                Ok(file) => {
                    self.written = file.metadata().map_or(0, |m| m.len());
                    self.file = Some(file);
                }
                Err(e) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot open the acknowledgement journal");
                    self.failed = true;
                }
            }
        }
        self.file.as_mut()
    }

    /// Records that each `(session key, seq)` was committed, in one write.
    pub(crate) fn acknowledge(&mut self, acked: impl Iterator<Item = (u128, u64)>) {
        if self.file().is_none() {
            return;
        }
        self.buffer.clear();
        for (key, seq) in acked {
            record(key, seq, &mut self.buffer);
            self.seqs.insert(key, seq);
        }
        if self.buffer.is_empty() {
            return;
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        match file.write_all(&self.buffer) {
            Ok(()) => {
                self.written += self.buffer.len() as u64;
                self.digest = digest(self.digest, &self.buffer);
            }
            Err(e) => {
                if !self.failed {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot write the acknowledgement journal");
                }
                self.failed = true;
            }
        }
        if self.written > COMPACT_BYTES {
            self.compact();
        }
    }

    /// Rewrites the journal with one record per session.
    fn compact(&mut self) {
        self.file = None;
        // A failed rewrite leaves the file as it was (written beside it, then renamed).
        let digest = match rewrite(&self.path, &self.seqs) {
            Ok(digest) => digest,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot compact the acknowledgement journal");
                self.digest
            }
        };
        *self = Self::open(self.path.clone(), std::mem::take(&mut self.seqs), digest);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn records_round_trip_and_damaged_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.acks");
        let mut journal = Journal::open(path.clone(), HashMap::new(), EMPTY_DIGEST);
        journal.acknowledge([(7u128, 3u64), (9, 1)].into_iter());
        journal.acknowledge([(7u128, 5u64)].into_iter());
        let acks = load(&path).unwrap();
        assert_eq!(acks.seqs, HashMap::from([(7, 5), (9, 1)]));
        assert_eq!(acks.damaged_records, 0);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[40] ^= 1; // the second record (9, 1)
        bytes.extend_from_slice(&[1, 2, 3]); // a torn tail
        std::fs::write(&path, &bytes).unwrap();
        let acks = load(&path).unwrap();
        assert_eq!(acks.seqs, HashMap::from([(7, 5)]));
        assert_eq!(acks.damaged_records, 2);
        let written = rewrite(&path, &HashMap::from([(1, 2)])).unwrap();
        let acks = load(&path).unwrap();
        assert_eq!(acks.seqs, HashMap::from([(1, 2)]));
        assert_eq!(acks.digest, written);
        assert_ne!(acks.digest, EMPTY_DIGEST);
    }
}
