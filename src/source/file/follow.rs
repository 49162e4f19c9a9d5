//! Following the input path like `tail -F`: a rotation opens the new file beside the one
//! being finished (both are read), a file cut short (copytruncate) is finished from its
//! copy and read again from its start, and what a cut without a copy lost is reported.

use std::path::Path;

use tokio::time::Instant;

use super::identity::FileId;
use super::locate::{Directory, WantedFile};
use super::rotation;
use super::{FileSource, named, open_with_head};
use crate::source::SourceError;

/// The counter of bytes written to a followed file and never read: it was cut before they
/// were, and no copy of them was found.
pub const LOST_BYTES: &str = "sluice_source_lost_bytes_total";

impl FileSource {
    /// Looks at every file still read, then at the input path: a file cut short is
    /// finished from its copy (the one at the path is read again from its start), and
    /// another file at the path is read beside the one before it. True if anything
    /// changed.
    pub(super) fn look_at_input(&mut self) -> Result<bool, SourceError> {
        let Some(path) = self.path.clone() else {
            return Ok(false);
        };
        let mut changed = false;
        let mut i = 0;
        while i < self.segments.len() {
            let s = &mut self.segments[i];
            if !s.look().map_err(named(&s.path))? {
                self.truncated(i, &path)?;
                changed = true;
            }
            i += 1;
        }
        let Some(reading) = self.segments.back().and_then(|s| s.id) else {
            return Ok(changed);
        };
        let at_path = match std::fs::metadata(&path) {
            Ok(m) => Some(FileId::of(&m)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(named(&path)(e)),
        };
        if rotation::replaced(reading, at_path) {
            changed |= self.rotated(&path)?;
        }
        Ok(changed)
    }

    /// The path names another file: it is read from its start while the one before is
    /// finished through the handle held on it. Records of the two interleave; each file's
    /// own stay in order.
    fn rotated(&mut self, path: &Path) -> Result<bool, SourceError> {
        let Some((file, id, head)) = open_with_head(path)? else {
            return Ok(false);
        };
        let checkpoint = self.checkpoint.as_ref().expect("a file input");
        let excluded = |p: &Path| checkpoint.is_own(p);
        let dir = Directory {
            input: path,
            excluded: &excluded,
        };
        let now_at = self
            .segments
            .back()
            .and_then(|s| s.id)
            .and_then(|old| dir.path_of(old).ok().flatten());
        let last = self.segments.back_mut().expect("the file at the path");
        last.superseded = true;
        last.last_growth = Instant::now();
        if let Some(now_at) = now_at {
            last.renamed(now_at);
        }
        tracing::info!(
            "{} was rotated: it names another file now ({id}), read from its start; the old one ({}, {}) is read on to its end until it stays unchanged for {:?} (source.rotate_wait)",
            path.display(),
            last.path.display(),
            last.id.map_or(String::new(), |i| i.to_string()),
            self.rotate_wait
        );
        self.push_file(file, id, path, head)?;
        Ok(true)
    }

    /// Segment `i`'s file was cut short: what was not read of it is finished from a copy
    /// if one lies next to it (found by the content read or seen, whether or not reading
    /// had begun), else what was lost is reported; the file at the path is then read again
    /// from its start.
    fn truncated(&mut self, i: usize, path: &Path) -> Result<(), SourceError> {
        let claimed: Vec<FileId> = self.segments.iter().filter_map(|s| s.id).collect();
        let checkpoint = self.checkpoint.as_ref().expect("a file input");
        let excluded = |p: &Path| checkpoint.is_own(p);
        let dir = Directory {
            input: path,
            excluded: &excluded,
        };
        let at_path = i + 1 == self.segments.len();
        let s = &self.segments[i];
        let (old_id, read_to) = (s.id.expect("a file"), s.consumed());
        let disk = s.disk().expect("a file on disk");
        let seen = disk.seen();
        let (covered, fingerprint) = disk.identity(read_to);
        let wanted = WantedFile {
            len: read_to.max(covered),
            covered,
            fingerprint: &fingerprint,
        };
        tracing::warn!(
            "{} was truncated (copytruncate?) or rewritten: {} bytes now, {seen} were seen, {read_to} read{}",
            s.path.display(),
            s.disk_len().ok().flatten().unwrap_or(0),
            if at_path {
                "; reading it again from its start"
            } else {
                ""
            }
        );
        let copy = dir.by_content(&wanted, &claimed).map_err(named(path))?;
        let s = &mut self.segments[i];
        let lost = match copy {
            Some(copy) => {
                let copy_len = copy.file.metadata().map_err(named(&copy.path))?.len();
                tracing::info!(
                    "finishing {} from its copy {} from byte {read_to}",
                    s.path.display(),
                    copy.path.display()
                );
                let copy_path = copy.path.clone();
                s.move_to(copy.file, copy.id, copy.path, copy.head)
                    .map_err(named(&copy_path))?;
                s.superseded = true;
                s.last_growth = Instant::now();
                (copy_len, seen)
            }
            None => {
                s.superseded = true;
                s.cut_off()
            }
        };
        if lost.1 > lost.0 {
            let (from, to) = lost;
            tracing::warn!(
                "{}: bytes {from} to {to} ({} bytes) were written and not read before the truncation, and no copy next to it holds them (a file named like it with the same first bytes): they are lost; so is whatever was written after the last look at it and before the cut",
                s.path.display(),
                to - from
            );
            metrics::counter!(LOST_BYTES).increment(to - from);
            self.lost_bytes += to - from;
        }
        if at_path
            && let Some((file, id, head)) = open_with_head(path)?
            && id == old_id
        {
            self.push_file(file, id, path, head)?;
        }
        Ok(())
    }
}
