//! Dead letters appended to an NDJSON file, one JSON object per line, flushed to disk
//! before the records are acknowledged. The fingerprints already in the file are loaded
//! when it is opened, so a redelivered bad record is not written twice.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::fs::{File, OpenOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use super::DeadLetterStore;
use crate::record::DeadLetter;
use crate::sink::{SinkError, WriteOutcome, dead_letter_fingerprint};

pub struct NdjsonDeadLetters {
    path: PathBuf,
    inner: Mutex<Inner>,
}

struct Inner {
    file: File,
    seen: HashSet<String>,
}

/// One line of the file. `raw` holds the record as text when it is UTF-8, `raw_hex`
/// otherwise, so that every byte of a bad record survives.
#[derive(Debug, Serialize, Deserialize)]
pub struct Line {
    pub fingerprint: String,
    pub origin: String,
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_hex: Option<String>,
    pub reason: String,
    pub attempts: u32,
    pub failed_at: String,
}

impl NdjsonDeadLetters {
    pub async fn open(path: &Path) -> Result<Self, SinkError> {
        let fail = |e: std::io::Error| SinkError {
            url: path.display().to_string(),
            message: format!("dead-letter file: {e}"),
        };
        let mut seen = HashSet::new();
        match File::open(path).await {
            Ok(existing) => {
                let mut lines = BufReader::new(existing).lines();
                while let Some(line) = lines.next_line().await.map_err(fail)? {
                    match serde_json::from_str::<Line>(&line) {
                        Ok(l) => {
                            seen.insert(l.fingerprint);
                        }
                        Err(e) => tracing::warn!(
                            "{}: skipping a line that is not a dead letter: {e}",
                            path.display()
                        ),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e)),
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await
            .map_err(fail)?;
        Ok(NdjsonDeadLetters {
            path: path.to_path_buf(),
            inner: Mutex::new(Inner { file, seen }),
        })
    }

    async fn append(&self, letters: &[DeadLetter]) -> std::io::Result<u64> {
        let mut inner = self.inner.lock().await;
        let failed_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut text = String::new();
        let mut fresh = Vec::new();
        for letter in letters {
            let fingerprint = dead_letter_fingerprint(letter);
            if inner.seen.contains(&fingerprint) || fresh.contains(&fingerprint) {
                continue;
            }
            let (raw, raw_hex) = match std::str::from_utf8(&letter.raw) {
                Ok(text) => (Some(text.to_string()), None),
                Err(_) => (None, Some(hex::encode(&letter.raw))),
            };
            let line = Line {
                fingerprint: fingerprint.clone(),
                origin: letter.origin.clone(),
                key: letter.key.clone(),
                raw,
                raw_hex,
                reason: letter.reason.clone(),
                attempts: letter.attempts,
                failed_at: failed_at.clone(),
            };
            text.push_str(&serde_json::to_string(&line).expect("a line serializes"));
            text.push('\n');
            fresh.push(fingerprint);
        }
        if !fresh.is_empty() {
            inner.file.write_all(text.as_bytes()).await?;
            inner.file.sync_data().await?;
        }
        let inserted = fresh.len() as u64;
        inner.seen.extend(fresh);
        Ok(inserted)
    }
}

#[async_trait]
impl DeadLetterStore for NdjsonDeadLetters {
    async fn store(&self, letters: &[DeadLetter]) -> WriteOutcome {
        match self.append(letters).await {
            Ok(inserted) => WriteOutcome::Written {
                inserted,
                duplicates: letters.len() as u64 - inserted,
            },
            // A full disk or a lost mount is not the records' fault: retried.
            Err(e) => WriteOutcome::Unavailable(format!("{}: {e}", self.path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(key: &str, raw: &[u8]) -> DeadLetter {
        DeadLetter {
            origin: format!("in.ndjson:{key}"),
            key: Some(key.into()),
            raw: raw.to_vec(),
            reason: "HTTP 422: poison".into(),
            attempts: 2,
        }
    }

    #[tokio::test]
    async fn appends_each_letter_once_across_reopenings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.ndjson");
        let store = NdjsonDeadLetters::open(&path).await.unwrap();
        let a = letter("a", br#"{"id":"a"}"#);
        let b = letter("b", &[0xff, 0x00, b'x']);
        assert_eq!(
            store.store(&[a.clone(), b.clone(), a.clone()]).await,
            WriteOutcome::Written {
                inserted: 2,
                duplicates: 1
            }
        );
        drop(store);
        let store = NdjsonDeadLetters::open(&path).await.unwrap();
        assert_eq!(
            store.store(&[b, letter("c", b"{}")]).await,
            WriteOutcome::Written {
                inserted: 1,
                duplicates: 1
            }
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Line> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].raw.as_deref(), Some(r#"{"id":"a"}"#));
        assert_eq!(lines[1].raw_hex.as_deref(), Some("ff0078"));
        assert_eq!(lines[1].attempts, 2);
        assert_eq!(lines[2].key.as_deref(), Some("c"));
        assert!(lines.iter().all(|l| l.reason == "HTTP 422: poison"));
    }
}
