//! What the worker knows of an input file besides what it read from it: a handle for its
//! length and first bytes (positional reads, which leave the reader's offset alone), its
//! head as known, and the longest it was ever seen. A file only grows: one shorter than it
//! was seen, or whose first bytes changed, was cut (copytruncate, or rewritten), and what
//! was seen of it is what identifies its copy.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::identity::{FINGERPRINT_BYTES, fingerprint};
use super::rotation;

pub struct OnDisk {
    file: Arc<std::fs::File>,
    /// The file's first bytes (up to `FINGERPRINT_BYTES`), as read or seen on disk.
    head: Vec<u8>,
    /// The longest the file was seen, through the handle.
    seen: u64,
}

impl OnDisk {
    /// A second handle on `file`; `head` is its first bytes as they are now.
    pub fn new(file: &std::fs::File, head: Vec<u8>) -> std::io::Result<Self> {
        let seen = file.metadata()?.len().max(head.len() as u64);
        Ok(OnDisk {
            file: Arc::new(file.try_clone()?),
            head,
            seen,
        })
    }

    pub fn head(&self) -> &[u8] {
        &self.head
    }

    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Its length now, wherever it is named now.
    pub fn len(&self) -> std::io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Bytes read from the file at `at`: what extends the head is kept.
    pub fn learn(&mut self, at: u64, bytes: &[u8]) {
        let known = self.head.len() as u64;
        if at <= known && known < FINGERPRINT_BYTES && at + bytes.len() as u64 > known {
            let from = (known - at) as usize;
            let to = bytes.len().min((FINGERPRINT_BYTES - at) as usize);
            self.head.extend_from_slice(&bytes[from..to]);
        }
        self.seen = self.seen.max(at + bytes.len() as u64);
    }

    /// Looks at the file again: false if it was cut (shorter than seen, or its head
    /// changed). Otherwise its length is noted and its head learnt up to 64 KiB, read or
    /// not, so that a copy of it is recognised even if it is cut before a line is read.
    pub fn look(&mut self) -> std::io::Result<bool> {
        let len = self.len()?;
        if rotation::cut(self.seen, len, self.head_intact()?) {
            return Ok(false);
        }
        self.seen = len;
        let want = len.min(FINGERPRINT_BYTES) as usize;
        while self.head.len() < want {
            let mut more = vec![0u8; want - self.head.len()];
            match self.file.read_at(&mut more, self.head.len() as u64)? {
                0 => break,
                n => self.head.extend_from_slice(&more[..n]),
            }
        }
        Ok(true)
    }

    /// Whether the file still starts with the bytes known.
    pub fn head_intact(&self) -> std::io::Result<bool> {
        let mut now = vec![0u8; self.head.len()];
        let mut got = 0;
        while got < now.len() {
            match self.file.read_at(&mut now[got..], got as u64)? {
                0 => return Ok(false),
                n => got += n,
            }
        }
        Ok(now == self.head)
    }

    /// The content read through `through` and seen: how many of its first bytes identify
    /// it, and their hash. All that was read (up to 64 KiB) and at least the first line
    /// seen, so that a file nothing was read from yet is still told from another.
    pub fn identity(&self, through: u64) -> (u64, String) {
        let first_line = self
            .head
            .iter()
            .position(|&b| b == b'\n')
            .map_or(self.head.len(), |i| i + 1) as u64;
        let covered = through
            .max(first_line)
            .min(self.head.len() as u64)
            .min(FINGERPRINT_BYTES);
        (covered, fingerprint(&self.head, covered))
    }

    /// Records from byte `at` to the end (non-blank lines; a last one without a newline
    /// counts), scanned with positional reads.
    pub fn count_from(&self, mut at: u64) -> std::io::Result<u64> {
        let mut buf = vec![0u8; 1 << 20];
        let (mut lines, mut blank) = (0u64, true);
        loop {
            let n = self.file.read_at(&mut buf, at)?;
            if n == 0 {
                break;
            }
            for &b in &buf[..n] {
                if b == b'\n' {
                    lines += u64::from(!blank);
                    blank = true;
                } else if !b.is_ascii_whitespace() {
                    blank = false;
                }
            }
            at += n as u64;
        }
        Ok(lines + u64::from(!blank))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(dir: &tempfile::TempDir, text: &str) -> (std::path::PathBuf, std::fs::File) {
        let path = dir.path().join("f");
        std::fs::write(&path, text).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        (path, f)
    }

    #[test]
    fn learns_the_head_of_a_file_nothing_was_read_from() {
        let dir = tempfile::tempdir().unwrap();
        let (path, f) = file(&dir, "");
        let mut d = OnDisk::new(&f, Vec::new()).unwrap();
        assert_eq!(d.identity(0).0, 0, "nothing known: nothing identifies it");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"id\":1}\n{\"id\":2}\n")
            .unwrap();
        assert!(d.look().unwrap());
        assert_eq!(d.seen(), 18);
        assert_eq!(d.head(), b"{\"id\":1}\n{\"id\":2}\n");
        assert_eq!(
            d.identity(0),
            (9, fingerprint(b"{\"id\":1}\n", 9)),
            "at least its first line"
        );
        assert_eq!(d.identity(18).0, 18, "all that was read");
    }

    #[test]
    fn a_file_shorter_than_seen_or_with_another_head_was_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (path, f) = file(&dir, "a\nb\n");
        let mut d = OnDisk::new(&f, b"a\nb\n".to_vec()).unwrap();
        assert!(d.look().unwrap());
        // Shorter than seen, though still starting the same.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(3)
            .unwrap();
        assert!(!d.look().unwrap());
        // Rewritten longer, with another head.
        std::fs::write(&path, "x\ny\nzzzz\n").unwrap();
        assert!(!d.look().unwrap());
    }

    #[test]
    fn learns_what_is_read_past_the_head_known() {
        let dir = tempfile::tempdir().unwrap();
        let (_, f) = file(&dir, "abc\ndef\n");
        let mut d = OnDisk::new(&f, b"ab".to_vec()).unwrap();
        d.learn(0, b"abc\n");
        d.learn(4, b"def\n");
        assert_eq!(d.head(), b"abc\ndef\n");
        d.learn(2, b"c\nd");
        assert_eq!(d.head(), b"abc\ndef\n", "nothing twice");
    }

    #[test]
    fn counts_records_from_an_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (_, f) = file(&dir, "a\n\n  \nb\nc");
        let d = OnDisk::new(&f, Vec::new()).unwrap();
        assert_eq!(d.count_from(0).unwrap(), 3);
        assert_eq!(d.count_from(2).unwrap(), 2);
        assert_eq!(d.count_from(10).unwrap(), 0);
    }
}
