//! Which file a path names, and what it held: device and inode tell a renamed-and-recreated
//! file from the old one even though the name stays; a hash of the head tells a rewritten
//! file (copytruncate, a reused inode) from the content that was read.

use std::os::unix::fs::{FileExt, MetadataExt};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bytes of a file's head kept and hashed into the checkpoint.
pub const FINGERPRINT_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

impl std::fmt::Display for FileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "device {} inode {}", self.dev, self.ino)
    }
}

/// SHA-256 of the first `min(upto, FINGERPRINT_BYTES)` bytes of `head`.
pub fn fingerprint(head: &[u8], upto: u64) -> String {
    let n = (upto.min(FINGERPRINT_BYTES) as usize).min(head.len());
    hex::encode(Sha256::digest(&head[..n]))
}

/// The file's first bytes, up to `FINGERPRINT_BYTES`, read without moving its offset.
pub fn read_head(file: &std::fs::File) -> std::io::Result<Vec<u8>> {
    let len = file.metadata()?.len().min(FINGERPRINT_BYTES) as usize;
    let mut head = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut head[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    head.truncate(got);
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_covers_the_head_up_to_the_offset() {
        let head = b"{\"id\":1}\n{\"id\":2}\n";
        assert_eq!(fingerprint(head, 9), fingerprint(b"{\"id\":1}\n", 9));
        assert_ne!(fingerprint(head, 9), fingerprint(head, 18));
        assert_eq!(fingerprint(head, 0), fingerprint(b"", 0));
    }

    #[test]
    fn head_and_identity_of_a_real_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc\n").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        assert_eq!(read_head(&f).unwrap(), b"abc\n");
        let same = FileId::of(&std::fs::metadata(&p).unwrap());
        assert_eq!(FileId::of(&f.metadata().unwrap()), same);
        std::fs::rename(&p, dir.path().join("f.1")).unwrap();
        std::fs::write(&p, b"new\n").unwrap();
        assert_ne!(FileId::of(&std::fs::metadata(&p).unwrap()), same);
    }
}
