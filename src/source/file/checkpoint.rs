//! The sidecar checkpoint: acknowledged progress per input file, keyed by the file's
//! identity and head, so a restart resumes each file (a rotated one still being finished,
//! and the one at the path) and never applies one file's offset to another.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::identity::{FINGERPRINT_BYTES, FileId};
use super::locate::WantedFile;
use crate::source::SourceError;

/// One file's acknowledged progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// None in checkpoints written before files were told apart by identity: those apply
    /// to whatever file matches the fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileId>,
    /// The name it was read under, for messages.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Everything before this byte is written or dead-lettered.
    pub offset: u64,
    /// The line number at `offset`.
    pub line: u64,
    /// Bytes of the file's head the fingerprint covers: all that was read (up to 64 KiB)
    /// and at least the first line seen, so that a file nothing was acknowledged from is
    /// still told from another. Absent in checkpoints of earlier versions, which hashed
    /// `min(offset, 64 KiB)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered: Option<u64>,
    /// Hash of the file's first `covered` bytes.
    pub fingerprint: String,
}

impl Entry {
    /// What a file must hold to be the one this entry describes.
    pub fn wanted(&self) -> WantedFile<'_> {
        let covered = self
            .covered
            .unwrap_or_else(|| self.offset.min(FINGERPRINT_BYTES));
        WantedFile {
            len: self.offset.max(covered),
            covered,
            fingerprint: &self.fingerprint,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Saved {
    /// Oldest file first; the one at the input path last.
    Files { files: Vec<Entry> },
    /// The single-file form of earlier versions.
    One(Entry),
}

/// A checkpoint's bytes as entries, oldest first. Bytes that are no checkpoint (not UTF-8,
/// not the JSON written) are refused alike, so a damaged file is ignored with a warning.
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, serde_json::Error> {
    Ok(match serde_json::from_slice(bytes)? {
        Saved::Files { files } => files,
        Saved::One(entry) => vec![entry],
    })
}

pub struct CheckpointFile {
    pub path: PathBuf,
}

impl CheckpointFile {
    /// The saved entries, oldest first; none when there is no (readable) checkpoint.
    pub async fn load(&self) -> Result<Vec<Entry>, SourceError> {
        let bytes = match tokio::fs::read(&self.path).await {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.error(e)),
        };
        match parse(&bytes) {
            Ok(files) => Ok(files),
            Err(e) => {
                tracing::warn!(
                    "ignoring unreadable checkpoint {}: {e}",
                    self.path.display()
                );
                Ok(Vec::new())
            }
        }
    }

    /// Replaces the checkpoint atomically (write aside, rename over).
    pub async fn save(&self, files: Vec<Entry>) -> Result<(), SourceError> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let body = serde_json::to_vec(&Saved::Files { files })
            .map_err(|e| SourceError::Other(e.to_string()))?;
        tokio::fs::write(&tmp, body)
            .await
            .map_err(|e| self.error(e))?;
        tokio::fs::rename(&tmp, &self.path)
            .await
            .map_err(|e| self.error(e))
    }

    pub async fn remove(&self) -> Result<(), SourceError> {
        match tokio::fs::remove_file(&self.path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(self.error(e)),
            _ => Ok(()),
        }
    }

    /// Whether `path` is this checkpoint or its temporary twin (never an input).
    pub fn is_own(&self, path: &Path) -> bool {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        path == self.path || path.as_os_str() == tmp
    }

    fn error(&self, source: std::io::Error) -> SourceError {
        SourceError::File {
            path: self.path.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(file: Option<FileId>) -> Entry {
        Entry {
            file,
            name: "in.ndjson".into(),
            offset: 120,
            line: 4,
            covered: Some(120),
            fingerprint: "ab".into(),
        }
    }

    #[tokio::test]
    async fn saves_and_loads_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let cp = CheckpointFile {
            path: dir.path().join("cp"),
        };
        assert!(cp.load().await.unwrap().is_empty());
        let files = vec![
            entry(Some(FileId { dev: 1, ino: 2 })),
            entry(Some(FileId { dev: 1, ino: 3 })),
        ];
        cp.save(files.clone()).await.unwrap();
        assert_eq!(cp.load().await.unwrap(), files);
        cp.remove().await.unwrap();
        assert!(cp.load().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn reads_the_single_file_form() {
        let dir = tempfile::tempdir().unwrap();
        let cp = CheckpointFile {
            path: dir.path().join("cp"),
        };
        std::fs::write(&cp.path, r#"{"offset":120,"line":4,"fingerprint":"ab"}"#).unwrap();
        let got = cp.load().await.unwrap();
        assert_eq!(
            got,
            [Entry {
                name: String::new(),
                covered: None,
                ..entry(None)
            }]
        );
        let wanted = got[0].wanted();
        assert_eq!((wanted.len, wanted.covered), (120, 120));
    }

    #[test]
    fn knows_its_own_files() {
        let cp = CheckpointFile {
            path: PathBuf::from("d/in.ndjson.sluice-checkpoint"),
        };
        assert!(cp.is_own(Path::new("d/in.ndjson.sluice-checkpoint")));
        assert!(cp.is_own(Path::new("d/in.ndjson.sluice-checkpoint.tmp")));
        assert!(!cp.is_own(Path::new("d/in.ndjson.1")));
    }
}
