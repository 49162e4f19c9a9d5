//! Dead letters appended to an NDJSON file, one JSON object per line, written and synced
//! to disk before the records are acknowledged.
//!
//! The file is written with blocking calls on the blocking pool, each checked: tokio's
//! `File` reports a failed background write only at the next operation, so a letter that
//! never reached a full disk would have passed for stored. A failed append is cut back off
//! the file, so no torn line is left for the next one to follow.
//!
//! Memory stays constant whatever the file's size: it is never read whole. At opening only
//! its tail is scanned for fingerprints, since a letter stored again is one whose record
//! was redelivered — one stored shortly before the worker stopped, at the end of the file;
//! a file that is not a regular file (`/dev/full`, a pipe) is not read at all.

use std::collections::{HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{DeadLetterStore, headers_json};
use crate::record::DeadLetter;
use crate::sink::{SinkError, WriteOutcome, dead_letter_fingerprint};

/// How much of the end of an existing file is scanned for letters already stored.
const TAIL_BYTES: u64 = 16 << 20;
/// How many fingerprints are remembered, the most recent ones (16 bytes each).
const REMEMBERED: usize = 100_000;

pub struct NdjsonDeadLetters {
    path: PathBuf,
    target: String,
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    file: File,
    /// A regular file: a failed append can be cut off, and the data synced.
    regular: bool,
    seen: Recent,
    /// A failed append could not be cut off: the next one starts on a new line.
    torn: bool,
}

/// The most recent fingerprints, at most `REMEMBERED` of them.
#[derive(Default)]
struct Recent {
    set: HashSet<u128>,
    order: VecDeque<u128>,
}

impl Recent {
    fn contains(&self, fingerprint: u128) -> bool {
        self.set.contains(&fingerprint)
    }

    fn insert(&mut self, fingerprint: u128) {
        if self.set.insert(fingerprint) {
            self.order.push_back(fingerprint);
            if self.order.len() > REMEMBERED
                && let Some(old) = self.order.pop_front()
            {
                self.set.remove(&old);
            }
        }
    }
}

/// One line of the file. `raw` holds the record as text when it is UTF-8, `raw_hex`
/// otherwise, so that every byte of a bad record survives; the same for the source key.
/// `fingerprint` comes first: the tail scan reads nothing else.
#[derive(Debug, Serialize, Deserialize)]
pub struct Line {
    pub fingerprint: String,
    /// The sink table (or HTTP endpoint) the record was bound for.
    pub target: String,
    pub origin: String,
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_key_hex: Option<String>,
    /// The message's headers, as [`super::headers_json`] gives them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_hex: Option<String>,
    pub reason: String,
    pub attempts: u32,
    pub failed_at: String,
}

impl NdjsonDeadLetters {
    pub async fn open(path: &Path, target: &str) -> Result<Self, SinkError> {
        let fail = |e: std::io::Error| SinkError {
            url: path.display().to_string(),
            message: format!("dead-letter file: {e}"),
            not_now: false,
        };
        let owned = path.to_path_buf();
        let inner = tokio::task::spawn_blocking(move || open_file(&owned))
            .await
            .map_err(|e| fail(std::io::Error::other(e)))?
            .map_err(fail)?;
        Ok(NdjsonDeadLetters {
            path: path.to_path_buf(),
            target: target.to_string(),
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    /// Appends the letters not stored yet; returns how many were new.
    async fn append(&self, letters: &[DeadLetter]) -> std::io::Result<u64> {
        let failed_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let lines: Vec<(u128, String)> = letters
            .iter()
            .map(|letter| {
                let line = self.line(letter, &failed_at);
                let fingerprint = u128::from_str_radix(&line.fingerprint, 16).unwrap_or(0);
                let text = serde_json::to_string(&line).expect("a line serializes");
                (fingerprint, text)
            })
            .collect();
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut inner = crate::lock::lock(&inner);
            inner.append(lines)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    fn line(&self, letter: &DeadLetter, failed_at: &str) -> Line {
        let (raw, raw_hex) = text_or_hex(&letter.raw);
        let (source_key, source_key_hex) = match &letter.context.key {
            Some(key) => text_or_hex(key),
            None => (None, None),
        };
        Line {
            fingerprint: dead_letter_fingerprint(&self.target, letter),
            target: self.target.clone(),
            origin: letter.origin.clone(),
            key: letter.key.clone(),
            source_key,
            source_key_hex,
            headers: headers_json(&letter.context).and_then(|h| serde_json::from_str(&h).ok()),
            raw,
            raw_hex,
            reason: letter.reason.clone(),
            attempts: letter.attempts,
            failed_at: failed_at.to_string(),
        }
    }
}

fn text_or_hex(bytes: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (Some(text.to_string()), None),
        Err(_) => (None, Some(hex::encode(bytes))),
    }
}

fn open_file(path: &Path) -> std::io::Result<Inner> {
    // Raw records: readable by the owner only.
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let regular = file.metadata()?.is_file();
    let mut seen = Recent::default();
    let mut torn = false;
    if regular {
        torn = scan_tail(path, &mut seen)?;
    } else {
        tracing::info!(
            "{}: not a regular file; earlier dead letters are not read",
            path.display()
        );
    }
    Ok(Inner {
        file,
        regular,
        seen,
        torn,
    })
}

/// Remembers the fingerprints in the last `TAIL_BYTES` of the file, reading line by line;
/// true when the file ends in a torn line (no newline after it).
fn scan_tail(path: &Path, seen: &mut Recent) -> std::io::Result<bool> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let from = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(from))?;
    let mut reader = BufReader::new(file.take(len - from));
    let mut line = Vec::new();
    if from > 0 {
        // Mid-line: the first full line starts after the next newline.
        reader.read_until(b'\n', &mut line)?;
    }
    let mut skipped = 0u64;
    let mut torn = false;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        torn = line.last() != Some(&b'\n');
        match fingerprint_of(&line) {
            Some(fingerprint) => seen.insert(fingerprint),
            None if line.trim_ascii().is_empty() => {}
            None => skipped += 1,
        }
    }
    if skipped > 0 {
        tracing::warn!(
            "{}: {skipped} lines near the end are not dead letters (a torn write?); left as they are",
            path.display()
        );
    }
    Ok(torn)
}

/// The fingerprint a line starts with, without parsing the rest (which may be large).
fn fingerprint_of(line: &[u8]) -> Option<u128> {
    let rest = line.strip_prefix(br#"{"fingerprint":""#)?;
    let hex = std::str::from_utf8(rest.get(..32)?).ok()?;
    (rest.get(32) == Some(&b'"'))
        .then(|| u128::from_str_radix(hex, 16).ok())
        .flatten()
}

impl Inner {
    fn append(&mut self, lines: Vec<(u128, String)>) -> std::io::Result<u64> {
        let mut text = Vec::new();
        if self.torn {
            text.push(b'\n');
        }
        let mut fresh = Vec::new();
        for (fingerprint, line) in lines {
            if self.seen.contains(fingerprint) || fresh.contains(&fingerprint) {
                continue;
            }
            text.extend_from_slice(line.as_bytes());
            text.push(b'\n');
            fresh.push(fingerprint);
        }
        if fresh.is_empty() {
            return Ok(0);
        }
        let before = if self.regular {
            Some(self.file.metadata()?.len())
        } else {
            None
        };
        let written = self.file.write_all(&text).and_then(|()| {
            if self.regular {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            // Take back whatever part of the append made it, or mark the line torn.
            let cut = before.is_some_and(|len| self.file.set_len(len).is_ok());
            self.torn = !cut;
            return Err(e);
        }
        self.torn = false;
        let inserted = fresh.len() as u64;
        for fingerprint in fresh {
            self.seen.insert(fingerprint);
        }
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
    use crate::record::SourceContext;

    fn letter(key: &str, raw: &[u8]) -> DeadLetter {
        DeadLetter {
            origin: format!("in.ndjson:{key}"),
            key: Some(key.into()),
            raw: raw.to_vec(),
            reason: "HTTP 422: poison".into(),
            attempts: 2,
            context: Default::default(),
        }
    }

    fn read(path: &Path) -> Vec<Line> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn appends_each_letter_once_across_reopenings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.ndjson");
        let store = NdjsonDeadLetters::open(&path, "records").await.unwrap();
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
        let store = NdjsonDeadLetters::open(&path, "records").await.unwrap();
        assert_eq!(
            store.store(&[b, letter("c", b"{}")]).await,
            WriteOutcome::Written {
                inserted: 1,
                duplicates: 1
            }
        );
        let lines = read(&path);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].raw.as_deref(), Some(r#"{"id":"a"}"#));
        assert_eq!(lines[1].raw_hex.as_deref(), Some("ff0078"));
        assert_eq!(lines[1].attempts, 2);
        assert_eq!(lines[2].key.as_deref(), Some("c"));
        assert!(lines.iter().all(|l| l.reason == "HTTP 422: poison"));
        assert!(lines.iter().all(|l| l.target == "records"));
    }

    #[tokio::test]
    async fn letters_keep_their_target_source_key_and_headers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.ndjson");
        let orders = NdjsonDeadLetters::open(&path, "orders").await.unwrap();
        let refunds = NdjsonDeadLetters::open(&path, "refunds").await.unwrap();
        let mut l = letter("a", b"{");
        l.context = Box::new(SourceContext {
            key: Some(vec![0xfe, b'k']),
            headers: vec![("trace".into(), Some(b"t-1"[..].into()))],
            tombstone: false,
        });
        assert!(matches!(
            orders.store(std::slice::from_ref(&l)).await,
            WriteOutcome::Written { inserted: 1, .. }
        ));
        // The same record bound for another table is another pipeline's letter.
        assert!(matches!(
            refunds.store(&[l]).await,
            WriteOutcome::Written { inserted: 1, .. }
        ));
        let lines = read(&path);
        assert_eq!(lines[0].target, "orders");
        assert_eq!(lines[1].target, "refunds");
        assert_ne!(lines[0].fingerprint, lines[1].fingerprint);
        assert_eq!(lines[0].source_key_hex.as_deref(), Some("fe6b"));
        assert_eq!(
            lines[0].headers,
            Some(serde_json::json!([{"name": "trace", "value": "t-1"}]))
        );
    }

    #[tokio::test]
    async fn a_full_device_is_an_outage_and_nothing_is_read_from_it() {
        let store = NdjsonDeadLetters::open(Path::new("/dev/full"), "records")
            .await
            .unwrap();
        for _ in 0..3 {
            match store.store(&[letter("a", b"{")]).await {
                WriteOutcome::Unavailable(reason) => {
                    assert!(reason.contains("/dev/full"), "{reason}")
                }
                other => panic!("a letter the device refused passed for {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn only_the_tail_of_a_large_file_is_scanned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.ndjson");
        let store = NdjsonDeadLetters::open(&path, "records").await.unwrap();
        let early = letter("early", b"{");
        store.store(std::slice::from_ref(&early)).await;
        drop(store);
        // More than the scanned tail of other lines after it, and a torn last line.
        let filler = format!("{{\"note\":\"{}\"}}\n", "x".repeat(1 << 20));
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        for _ in 0..(TAIL_BYTES >> 20) + 1 {
            file.write_all(filler.as_bytes()).unwrap();
        }
        file.write_all(b"{\"fingerprint\":\"ab").unwrap();
        drop(file);
        let store = NdjsonDeadLetters::open(&path, "records").await.unwrap();
        let late = letter("late", b"{");
        assert!(matches!(
            store.store(&[late.clone(), early]).await,
            WriteOutcome::Written { inserted: 2, .. }
        ));
        assert!(matches!(
            store.store(&[late]).await,
            WriteOutcome::Written {
                inserted: 0,
                duplicates: 1
            }
        ));
        let text = std::fs::read_to_string(&path).unwrap();
        let last: Vec<&str> = text.lines().rev().take(3).collect();
        assert_eq!(
            last[2], "{\"fingerprint\":\"ab",
            "the torn line is left alone"
        );
        assert!(last[1].contains("\"key\":\"late\""));
        assert!(last[0].contains("\"key\":\"early\""));
    }

    #[test]
    fn recent_fingerprints_are_bounded() {
        let mut recent = Recent::default();
        for f in 0..(REMEMBERED as u128 + 10) {
            recent.insert(f);
        }
        assert_eq!(recent.set.len(), REMEMBERED);
        assert!(!recent.contains(0));
        assert!(recent.contains(REMEMBERED as u128 + 9));
    }
}
