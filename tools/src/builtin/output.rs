//! Capped capture of a command's output: the first and the last bytes are kept, the
//! middle is counted and cut.

use std::collections::VecDeque;

/// Bytes kept from the start of a command's output.
pub const OUTPUT_HEAD_BYTES: usize = 16 * 1024;
/// Bytes kept from the end of a command's output.
pub const OUTPUT_TAIL_BYTES: usize = 16 * 1024;

/// Output kept as head + tail, with the number of bytes cut in between.
#[derive(Debug, Clone)]
pub struct CappedOutput {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total_bytes: u64,
}

impl Default for CappedOutput {
    fn default() -> Self {
        Self::new(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES)
    }
}

impl CappedOutput {
    /// Keeps at most `head_cap` leading and `tail_cap` trailing bytes.
    #[must_use]
    pub fn new(head_cap: usize, tail_cap: usize) -> Self {
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap,
            total_bytes: 0,
        }
    }

    /// Appends a chunk.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total_bytes += bytes.len() as u64;
        let room = self.head_cap.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        bytes = rest;
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    /// Every byte seen, kept or not.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes cut from the middle.
    #[must_use]
    pub(crate) fn cut_bytes(&self) -> u64 {
        self.total_bytes - (self.head.len() + self.tail.len()) as u64
    }

    /// The kept text (lossy UTF-8), with `[... N bytes of output cut ...]` where the
    /// middle was dropped.
    #[must_use]
    pub fn render(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let cut = self.cut_bytes();
        if cut == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!(
            "{}\n[... {cut} bytes of output cut ...]\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&tail)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::CappedOutput;

    #[test]
    fn keeps_head_and_tail() {
        let mut out = CappedOutput::new(4, 3);
        out.push(b"ab");
        assert_eq!(out.render(), "ab");
        out.push(b"cdef");
        assert_eq!(out.render(), "abcdef");
        out.push(b"ghij");
        assert_eq!((out.total_bytes(), out.cut_bytes()), (10, 3));
        assert_eq!(out.render(), "abcd\n[... 3 bytes of output cut ...]\nhij");
        out.push(b"0123456789");
        assert_eq!(out.render(), "abcd\n[... 13 bytes of output cut ...]\n789");
    }
}
