//! NDJSON from a file or stdin. Acknowledged progress is checkpointed in a sidecar file so
//! a restarted worker resumes after the last acknowledged record; without `--until-empty`
//! the source follows the file as it grows, like `tail -f`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncSeekExt, BufReader};
use tokio::time::Instant;

use super::watermark::Watermark;
use super::{Backlog, Pulled, Source, SourceError};
use crate::config::Config;
use crate::record::{Position, Record};

/// Bytes of the input's head hashed into the checkpoint, to notice a replaced file.
const FINGERPRINT_BYTES: u64 = 64 * 1024;
/// Checkpoints are written at most this often while running (and always on close).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

pub struct FileSource {
    reader: BufReader<Box<dyn AsyncRead + Unpin + Send>>,
    path: Option<PathBuf>,
    label: String,
    follow: bool,
    max_record_bytes: usize,
    /// Byte offset of the next unread line, and its 1-based number.
    offset: u64,
    line: u64,
    /// A line read only in part (no newline yet): its bytes (capped) and its full length.
    partial: Vec<u8>,
    partial_len: u64,
    watermark: Watermark,
    /// Line number that follows each pulled span's end, to record in the checkpoint.
    line_after: std::collections::BTreeMap<u64, u64>,
    checkpoint: Option<CheckpointFile>,
    saved_at: Option<Instant>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Checkpoint {
    offset: u64,
    line: u64,
    fingerprint: String,
}

struct CheckpointFile {
    path: PathBuf,
    input: PathBuf,
}

impl FileSource {
    pub async fn open(config: &Config, follow: bool) -> Result<Self, SourceError> {
        let path = config
            .source
            .path
            .clone()
            .ok_or_else(|| SourceError::Other("source.path is not set".into()))?;
        let max_record_bytes = config.source.max_record_bytes;
        if path.as_os_str() == "-" {
            let reader: Box<dyn AsyncRead + Unpin + Send> = Box::new(tokio::io::stdin());
            return Ok(Self::new(
                reader,
                None,
                "stdin".into(),
                follow,
                max_record_bytes,
                0,
                1,
                None,
            ));
        }
        let checkpoint = config.checkpoint_path().map(|p| CheckpointFile {
            path: p,
            input: path.clone(),
        });
        let (offset, line) = match &checkpoint {
            Some(cp) => cp.resume_point().await?,
            None => (0, 1),
        };
        let mut file = tokio::fs::File::open(&path).await?;
        file.seek(std::io::SeekFrom::Start(offset)).await?;
        if offset > 0 {
            tracing::info!(
                offset,
                line,
                "resuming {} after its checkpoint",
                path.display()
            );
        }
        let label = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        Ok(Self::new(
            Box::new(file),
            Some(path),
            label,
            follow,
            max_record_bytes,
            offset,
            line,
            checkpoint,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        reader: Box<dyn AsyncRead + Unpin + Send>,
        path: Option<PathBuf>,
        label: String,
        follow: bool,
        max_record_bytes: usize,
        offset: u64,
        line: u64,
        checkpoint: Option<CheckpointFile>,
    ) -> Self {
        FileSource {
            reader: BufReader::with_capacity(256 * 1024, reader),
            path,
            label,
            follow,
            max_record_bytes,
            offset,
            line,
            partial: Vec::new(),
            partial_len: 0,
            watermark: Watermark::new(offset),
            line_after: Default::default(),
            checkpoint,
            saved_at: None,
        }
    }

    /// The next non-blank line as a record, or None at the (current) end of input.
    async fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        loop {
            let buf = self.reader.fill_buf().await?;
            if buf.is_empty() {
                if self.partial_len > 0 && !self.follow {
                    if let Some(r) = self.finish_line(false) {
                        return Ok(Some(r));
                    }
                    continue;
                }
                return Ok(None);
            }
            let newline = memchr(buf);
            let take = newline.map_or(buf.len(), |i| i + 1);
            let room = (self.max_record_bytes + 1).saturating_sub(self.partial.len());
            let content = &buf[..newline.unwrap_or(buf.len())];
            self.partial
                .extend_from_slice(&content[..content.len().min(room)]);
            self.partial_len += take as u64;
            self.reader.consume(take);
            if newline.is_some()
                && let Some(r) = self.finish_line(true)
            {
                return Ok(Some(r));
            }
        }
    }

    /// Closes the line gathered in `partial`; blank lines yield no record.
    fn finish_line(&mut self, newline: bool) -> Option<Record> {
        let start = self.offset;
        let line = self.line;
        let content_len = self.partial_len - u64::from(newline);
        self.offset += self.partial_len;
        self.line += 1;
        self.partial_len = 0;
        let mut payload = std::mem::take(&mut self.partial);
        let oversize = (payload.len() > self.max_record_bytes).then(|| {
            payload.truncate(self.max_record_bytes);
            content_len
        });
        if oversize.is_none() {
            while payload.last() == Some(&b'\r') {
                payload.pop();
            }
            if payload.iter().all(u8::is_ascii_whitespace) {
                return None;
            }
        }
        let origin = format!("{}:{}", self.label, line);
        Some(Record {
            position: Position {
                lane: 0,
                start,
                end: self.offset,
            },
            fallback_key: origin.clone(),
            origin,
            payload,
            oversize,
        })
    }

    async fn save_checkpoint(&mut self) -> Result<(), SourceError> {
        let Some(cp) = &self.checkpoint else {
            return Ok(());
        };
        let offset = self.watermark.committed();
        let line = self.line_after.get(&offset).copied();
        let Some(line) = line.or_else(|| (offset == self.offset).then_some(self.line)) else {
            return Ok(());
        };
        cp.save(&Checkpoint {
            offset,
            line,
            fingerprint: fingerprint(&cp.input, offset).await?,
        })
        .await?;
        self.saved_at = Some(Instant::now());
        Ok(())
    }
}

fn memchr(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

/// SHA-256 of the input's first `min(len, FINGERPRINT_BYTES)` bytes up to `offset`.
async fn fingerprint(input: &Path, offset: u64) -> Result<String, SourceError> {
    let n = offset.min(FINGERPRINT_BYTES);
    let mut head = vec![0u8; n as usize];
    let mut file = tokio::fs::File::open(input).await?;
    file.read_exact(&mut head).await?;
    Ok(hex::encode(Sha256::digest(&head)))
}

impl CheckpointFile {
    /// Where to start: the saved offset if the checkpoint still describes this input.
    async fn resume_point(&self) -> Result<(u64, u64), SourceError> {
        let text = match tokio::fs::read_to_string(&self.path).await {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 1)),
            Err(e) => return Err(e.into()),
        };
        let saved: Checkpoint = match serde_json::from_str(&text) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(
                    "ignoring unreadable checkpoint {}: {e}",
                    self.path.display()
                );
                return Ok((0, 1));
            }
        };
        let len = tokio::fs::metadata(&self.input).await?.len();
        if saved.offset > len || fingerprint(&self.input, saved.offset).await? != saved.fingerprint
        {
            tracing::warn!(
                "checkpoint {} does not match {} (file replaced or truncated): starting from the beginning",
                self.path.display(),
                self.input.display()
            );
            return Ok((0, 1));
        }
        Ok((saved.offset, saved.line))
    }

    async fn save(&self, checkpoint: &Checkpoint) -> Result<(), SourceError> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let body = serde_json::to_vec(checkpoint).map_err(|e| SourceError::Other(e.to_string()))?;
        tokio::fs::write(&tmp, body).await?;
        tokio::fs::rename(&tmp, &self.path).await?;
        Ok(())
    }
}

#[async_trait]
impl Source for FileSource {
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError> {
        let mut records = Vec::with_capacity(max.min(64 * 1024));
        while records.len() < max {
            match self.next_record().await? {
                Some(r) => {
                    self.watermark.pulled(r.position.start, r.position.end);
                    self.line_after.insert(r.position.end, self.line);
                    records.push(r);
                }
                None => {
                    return Ok(Pulled {
                        records,
                        caught_up: true,
                    });
                }
            }
        }
        Ok(Pulled {
            records,
            caught_up: false,
        })
    }

    async fn ack(&mut self, positions: &[Position]) -> Result<(), SourceError> {
        let mut moved = false;
        for p in positions {
            moved |= self.watermark.ack(p.start).is_some();
        }
        if moved {
            let committed = self.watermark.committed();
            // Keep the line number of the committed end; drop the ones before it.
            let keep = self.line_after.split_off(&committed);
            self.line_after = keep;
            if self
                .saved_at
                .is_none_or(|t| t.elapsed() >= CHECKPOINT_EVERY)
            {
                self.save_checkpoint().await?;
            }
        }
        Ok(())
    }

    async fn backlog(&mut self) -> Result<Backlog, SourceError> {
        let Some(path) = &self.path else {
            return Ok(Backlog::Unknown);
        };
        let total = tokio::fs::metadata(path).await?.len();
        Ok(Backlog::Bytes {
            done: self.offset - self.partial_len.min(self.offset),
            total,
        })
    }

    async fn count_backlog(&mut self) -> Result<Option<u64>, SourceError> {
        let Some(path) = &self.path else {
            return Ok(None);
        };
        let mut file = tokio::fs::File::open(path).await?;
        file.seek(std::io::SeekFrom::Start(self.offset)).await?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let (mut lines, mut blank) = (0u64, true);
        loop {
            let buf = reader.fill_buf().await?;
            if buf.is_empty() {
                break;
            }
            for &b in buf {
                if b == b'\n' {
                    lines += u64::from(!blank);
                    blank = true;
                } else if !b.is_ascii_whitespace() {
                    blank = false;
                }
            }
            let n = buf.len();
            reader.consume(n);
        }
        // A last line without a newline is a record too.
        Ok(Some(lines + u64::from(!blank)))
    }

    async fn close(&mut self, drained: bool) -> Result<(), SourceError> {
        let Some(cp) = &self.checkpoint else {
            return Ok(());
        };
        if drained && self.watermark.outstanding() == 0 {
            // A finished one-shot load: the next run is a fresh load, deduplicated by the sink.
            match tokio::fs::remove_file(&cp.path).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => return Ok(()),
            }
        }
        self.save_checkpoint().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(input: &'static [u8], follow: bool, max: usize) -> FileSource {
        FileSource::new(Box::new(input), None, "t".into(), follow, max, 0, 1, None)
    }

    #[tokio::test]
    async fn splits_lines_and_skips_blanks() {
        let mut s = source(b"{\"a\":1}\r\n\n  \n{\"a\":2}\n{\"a\":3}", false, 100);
        let p = s.pull(10).await.unwrap();
        assert!(p.caught_up);
        let got: Vec<(String, String)> = p
            .records
            .iter()
            .map(|r| {
                (
                    r.origin.clone(),
                    String::from_utf8(r.payload.clone()).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("t:1".to_string(), "{\"a\":1}".to_string()),
                ("t:4".to_string(), "{\"a\":2}".to_string()),
                ("t:5".to_string(), "{\"a\":3}".to_string())
            ]
        );
        assert_eq!(
            p.records[0].position,
            Position {
                lane: 0,
                start: 0,
                end: 9
            }
        );
        assert_eq!(p.records[2].position.end, 28);
    }

    #[tokio::test]
    async fn follow_mode_holds_an_unfinished_last_line() {
        let mut s = source(b"{\"a\":1}\n{\"a\":", true, 100);
        let p = s.pull(10).await.unwrap();
        assert_eq!(p.records.len(), 1);
        assert!(p.caught_up);
    }

    #[tokio::test]
    async fn pulls_no_more_than_asked() {
        let mut s = source(b"1\n2\n3\n4\n5\n", false, 100);
        let p = s.pull(2).await.unwrap();
        assert_eq!(p.records.len(), 2);
        assert!(!p.caught_up);
        assert_eq!(s.pull(10).await.unwrap().records.len(), 3);
    }

    #[tokio::test]
    async fn oversize_lines_are_cut_and_flagged() {
        let mut s = source(b"0123456789abcdef\n{}\n", false, 8);
        let p = s.pull(10).await.unwrap();
        assert_eq!(p.records[0].payload, b"01234567");
        assert_eq!(p.records[0].oversize, Some(16));
        assert_eq!(p.records[1].oversize, None);
        assert_eq!(p.records[1].position.start, 17);
    }
}
