//! NDJSON from a file or stdin. Acknowledged progress is checkpointed in a sidecar file so
//! a restarted worker resumes after the last acknowledged record. Without `--until-empty`
//! the source follows the input path like `tail -F`: when the path names another file
//! (rotated: renamed away and recreated) the new one is read from its start while the old
//! one is finished through the handle held on it; when a file is cut short
//! (copytruncate) it is read again from its start, and what was not read of it is
//! finished from its copy when one lies next to it.

mod checkpoint;
mod follow;
#[doc(hidden)]
pub mod fuzzing;
mod identity;
mod locate;
mod on_disk;
mod rotation;
mod segment;
pub mod settings;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Backlog, Pulled, Source, SourceError};
use crate::record::Position;
use checkpoint::{CheckpointFile, Entry};
pub use follow::LOST_BYTES;
use identity::{FileId, read_head};
use locate::{Directory, display_name};
use segment::Segment;
use settings::FileSettings;

/// Checkpoints are written at most this often while running (and always on close).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

pub struct FileSource {
    /// Oldest first. The last one is the file at the input path; older ones are rotated
    /// away and still being read or settled. A segment leaves once read to its end and
    /// every record of it is acknowledged.
    segments: VecDeque<Segment>,
    /// None for stdin.
    path: Option<PathBuf>,
    follow: bool,
    max_record_bytes: usize,
    rotate_wait: Duration,
    next_lane: i32,
    checkpoint: Option<CheckpointFile>,
    saved_at: Option<Instant>,
    /// Bytes written to a followed file and never read: it was cut without a copy.
    lost_bytes: u64,
}

impl FileSource {
    pub async fn open(settings: &FileSettings, follow: bool) -> Result<Self, SourceError> {
        let path = settings
            .path
            .clone()
            .ok_or_else(|| SourceError::Other("source.path is not set".into()))?;
        let mut source = FileSource {
            segments: VecDeque::new(),
            path: None,
            follow,
            max_record_bytes: settings.max_record_bytes,
            rotate_wait: settings.rotate_wait,
            next_lane: 0,
            checkpoint: None,
            saved_at: None,
            lost_bytes: 0,
        };
        if path.as_os_str() == "-" {
            let lane = source.lane();
            source.segments.push_back(Segment::new(
                lane,
                Box::new(tokio::io::stdin()),
                "stdin".into(),
                source.max_record_bytes,
                0,
                1,
            ));
            return Ok(source);
        }
        let checkpoint = CheckpointFile {
            path: settings
                .checkpoint_path()
                .expect("a file input has a checkpoint"),
        };
        let saved = checkpoint.load().await?;
        source.checkpoint = Some(checkpoint);
        source.path = Some(path);
        source.resume(saved)?;
        Ok(source)
    }

    /// Reads no further than each file's size now: records appended later are left for the
    /// next run, so a one-shot load ends even while a writer outpaces the sink.
    pub fn bound_at_start(&mut self) -> Result<(), SourceError> {
        for s in &mut self.segments {
            s.limit = s.disk_len().map_err(named(&s.path))?;
            if let Some(limit) = s.limit {
                tracing::info!(
                    "reading {} up to byte {limit}, its size now; lines written later are left for the next run",
                    s.path.display()
                );
            }
        }
        Ok(())
    }

    /// Bytes on disk past what was read, in any file still in play.
    fn unread_bytes(&self) -> Result<bool, SourceError> {
        for s in self.segments.iter().filter(|s| !s.cut) {
            if s.disk_len().map_err(named(&s.path))?.unwrap_or(0) > s.consumed() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn lane(&mut self) -> i32 {
        self.next_lane += 1;
        self.next_lane - 1
    }

    /// Opens the file at the input path and every file the checkpoint still lists, each
    /// where its acknowledged progress ends: the file at the path by its identity and head,
    /// rotated ones by identity in the input's directory (or a copy by content).
    fn resume(&mut self, saved: Vec<Entry>) -> Result<(), SourceError> {
        let path = self.path.clone().expect("a file input");
        let file = std::fs::File::open(&path).map_err(named(&path))?;
        let meta = file.metadata().map_err(named(&path))?;
        let at_path = FileId::of(&meta);
        let head = read_head(&file).map_err(named(&path))?;
        let checkpoint = self.checkpoint.as_ref().expect("a file input");
        let excluded = |p: &Path| checkpoint.is_own(p);
        let dir = Directory {
            input: &path,
            excluded: &excluded,
        };
        let mut start = (0, 1);
        let mut claimed: Vec<FileId> = Vec::new();
        let mut rotated = Vec::new();
        for entry in saved {
            let wanted = entry.wanted();
            let the_path_file = entry.file.is_none_or(|id| id == at_path)
                && !claimed.contains(&at_path)
                && wanted.matches(meta.len(), &head);
            if the_path_file {
                start = (entry.offset, entry.line);
                claimed.push(at_path);
                continue;
            }
            let by_identity = match entry.file {
                Some(id) if id != at_path => dir.by_identity(id, &wanted).map_err(named(&path))?,
                _ => None,
            };
            let found = match by_identity {
                Some(f) => Some(f),
                None => dir.by_content(&wanted, &claimed).map_err(named(&path))?,
            };
            match found {
                Some(f) if f.id == at_path => {
                    start = (entry.offset, entry.line);
                    claimed.push(at_path);
                }
                Some(f) => {
                    tracing::info!(
                        line = entry.line,
                        "resuming {} after its checkpoint (read as {} before a rotation); the new {} follows once it is finished",
                        f.path.display(),
                        entry.name,
                        path.display()
                    );
                    claimed.push(f.id);
                    rotated.push((f, entry));
                }
                None => tracing::warn!(
                    "checkpoint {} lists {} ({}) read to line {}, but no file next to {} holds that content any more (replaced, truncated, deleted or moved elsewhere): what followed that line is not read from it",
                    checkpoint.path.display(),
                    if entry.name.is_empty() {
                        path.display().to_string()
                    } else {
                        entry.name.clone()
                    },
                    entry
                        .file
                        .map_or("identity not recorded".into(), |id| id.to_string()),
                    entry.line,
                    path.display()
                ),
            }
        }
        for (f, entry) in rotated {
            let lane = self.lane();
            let mut segment = Segment::on_file(
                lane,
                f.file,
                f.id,
                f.path.clone(),
                (entry.offset, entry.line),
                f.head,
                self.max_record_bytes,
            )
            .map_err(named(&f.path))?;
            segment.superseded = true;
            segment.key_name = display_name(&path);
            self.segments.push_back(segment);
        }
        if start.0 > 0 {
            tracing::info!(
                offset = start.0,
                line = start.1,
                "resuming {} after its checkpoint",
                path.display()
            );
        }
        let lane = self.lane();
        let segment = Segment::on_file(
            lane,
            file,
            at_path,
            path.clone(),
            start,
            head,
            self.max_record_bytes,
        )
        .map_err(named(&path))?;
        self.segments.push_back(segment);
        Ok(())
    }

    fn push_file(
        &mut self,
        file: std::fs::File,
        id: FileId,
        path: &Path,
        head: Vec<u8>,
    ) -> Result<(), SourceError> {
        let lane = self.lane();
        let segment = Segment::on_file(
            lane,
            file,
            id,
            path.to_path_buf(),
            (0, 1),
            head,
            self.max_record_bytes,
        )
        .map_err(named(path))?;
        self.segments.push_back(segment);
        Ok(())
    }

    async fn save_checkpoint(&mut self) -> Result<(), SourceError> {
        self.drop_settled();
        let Some(cp) = &self.checkpoint else {
            return Ok(());
        };
        let files = self
            .segments
            .iter()
            .filter(|s| s.id.is_some())
            .map(Segment::entry)
            .collect();
        cp.save(files).await?;
        self.saved_at = Some(Instant::now());
        Ok(())
    }

    /// Reads every file still in play, oldest first, each to its current end, until `max`
    /// records are in hand: a rotated-away file being finished and the new file at the
    /// path are read alike (their records interleave; each file's stay in order). A file
    /// cut without a copy ends where the bytes read before the cut end.
    async fn read_available(
        &mut self,
        records: &mut Vec<crate::record::Record>,
        max: usize,
    ) -> Result<(), SourceError> {
        for s in &mut self.segments {
            while records.len() < max && !s.done {
                match s.next_record().await.map_err(named(&s.path))? {
                    Some(r) => records.push(r),
                    None if s.cut => s.abandon(),
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// Finishes the rotated-away files read to their end that stayed unchanged for
    /// `rotate_wait`: an unterminated last line is then a record of its own.
    fn finish_quiet(&mut self, records: &mut Vec<crate::record::Record>) {
        let now = Instant::now();
        for s in &mut self.segments {
            if s.superseded && !s.done && rotation::finished(s.last_growth, now, self.rotate_wait) {
                records.extend(s.finish());
                tracing::info!(
                    "finished {} ({} lines): it was rotated away and stayed unchanged for {:?}",
                    s.path.display(),
                    s.lines_read(),
                    self.rotate_wait
                );
            }
        }
    }

    /// Lets go of files read to their end whose records are all settled (never the file at
    /// the path).
    fn drop_settled(&mut self) {
        let last = self.segments.len().saturating_sub(1);
        let mut i = 0;
        self.segments.retain(|s| {
            i += 1;
            let keep = i - 1 == last || !s.settled();
            if !keep {
                tracing::debug!("{} is finished and settled", s.path.display());
            }
            keep
        });
    }
}

fn named(path: &Path) -> impl Fn(std::io::Error) -> SourceError + '_ {
    move |source| SourceError::File {
        path: path.to_path_buf(),
        source,
    }
}

/// The file at `path` with its identity and head; None if nothing is there (mid-rotation).
fn open_with_head(path: &Path) -> Result<Option<(std::fs::File, FileId, Vec<u8>)>, SourceError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(named(path)(e)),
    };
    let id = FileId::of(&file.metadata().map_err(named(path))?);
    let head = read_head(&file).map_err(named(path))?;
    Ok(Some((file, id, head)))
}

#[async_trait]
impl Source for FileSource {
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError> {
        let mut records = Vec::with_capacity(max.min(64 * 1024));
        // Before reading on: a file truncated and rewritten past the offset while the
        // worker was behind (or paused) must not be read from the old offset.
        if self.follow {
            self.look_at_input()?;
        }
        loop {
            self.read_available(&mut records, max).await?;
            if records.len() >= max {
                return Ok(Pulled {
                    records,
                    caught_up: false,
                });
            }
            if !self.follow {
                // A one-shot read: each file to its end, a last unterminated line included.
                for s in self.segments.iter_mut().filter(|s| !s.done) {
                    records.extend(s.finish());
                }
                let caught_up = records.len() < max;
                return Ok(Pulled { records, caught_up });
            }
            if self.look_at_input()? {
                continue;
            }
            self.finish_quiet(&mut records);
            return Ok(Pulled {
                records,
                caught_up: true,
            });
        }
    }

    /// Looks at the input on ticks that pulled nothing (a Retry-After pause, no free
    /// slot), as a pull does: what a file cut meanwhile held is known from the last look.
    async fn watch(&mut self) -> Result<bool, SourceError> {
        if self.follow {
            self.look_at_input()?;
        }
        Ok(false)
    }

    async fn ack(&mut self, positions: &[Position]) -> Result<(), SourceError> {
        let mut moved = false;
        for p in positions {
            if let Some(s) = self.segments.iter_mut().find(|s| s.lane == p.lane) {
                moved |= s.ack(p.start);
            }
        }
        if moved {
            self.drop_settled();
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
        if self.path.is_none() {
            return Ok(Backlog::Unknown);
        }
        let (mut done, mut total) = (0, 0);
        for s in self.segments.iter().filter(|s| !s.done && !s.cut) {
            done += s.consumed();
            total += s.disk_len().map_err(named(&s.path))?.unwrap_or(0);
        }
        Ok(Backlog::Bytes {
            done: done.min(total),
            total,
        })
    }

    async fn count_backlog(&mut self) -> Result<Option<u64>, SourceError> {
        if self.path.is_none() {
            return Ok(None);
        }
        let mut records = 0;
        for s in self.segments.iter().filter(|s| !s.done) {
            records += s
                .count_unread()
                .map_err(named(&s.path))?
                .unwrap_or_default();
        }
        Ok(Some(records))
    }

    async fn close(&mut self, drained: bool) -> Result<(), SourceError> {
        let Some(cp) = &self.checkpoint else {
            return Ok(());
        };
        if drained && self.segments.iter().all(|s| s.outstanding() == 0) && !self.unread_bytes()? {
            // A finished one-shot load: the next run is a fresh load, deduplicated by the sink.
            return cp.remove().await;
        }
        for s in self
            .segments
            .iter()
            .filter(|s| s.cut && s.outstanding() > 0)
        {
            tracing::warn!(
                "{} record(s) read from {} before it was truncated are not written, and the file no longer holds them: the next run cannot read them again",
                s.outstanding(),
                s.path.display()
            );
        }
        self.save_checkpoint().await
    }

    /// What the next run will read: every file still in play from its acknowledged offset
    /// to its end, so records pulled and never written or dead-lettered count (and lines
    /// past a start bound); none of a file cut without a copy.
    async fn remaining(&mut self) -> Option<u64> {
        self.path.as_ref()?;
        let mut records = 0;
        for s in &self.segments {
            records += s.count_unsettled().ok()??;
        }
        Some(records)
    }
}

#[cfg(test)]
mod follow_tests;
#[cfg(test)]
mod tests;
