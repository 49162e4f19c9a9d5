//! Following the input path like `tail -F`: a rotation opens the new file behind the one
//! being read, a truncation (copytruncate) reads the file again from its start after
//! finishing the old content from its copy.

use std::path::Path;

use tokio::time::Instant;

use super::identity::{FileId, fingerprint};
use super::locate::{Directory, Wanted};
use super::rotation::{self, Change};
use super::{FileSource, named, open_with_head};
use crate::source::SourceError;

impl FileSource {
    /// Looks at the input path: a rotation opens the new file behind the one being read, a
    /// truncation starts the file again. True if anything changed.
    pub(super) fn look_at_input(&mut self) -> Result<bool, SourceError> {
        let Some(path) = self.path.clone() else {
            return Ok(false);
        };
        let last = self.segments.back().expect("the file at the path");
        let Some(reading) = last.id else {
            return Ok(false);
        };
        let at_path = match std::fs::metadata(&path) {
            Ok(m) => Some(FileId::of(&m)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(named(&path)(e)),
        };
        let len = last.disk_len().map_err(named(&last.path))?.unwrap_or(0);
        let head_intact = at_path != Some(reading) || last.head_intact().map_err(named(&path))?;
        match rotation::classify(reading, last.consumed(), at_path, len, head_intact) {
            Change::Unchanged => Ok(false),
            Change::Rotated => self.rotated(&path),
            Change::Truncated => self.truncated(&path, len),
        }
    }

    /// The path names another file: read it once the one before is finished.
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
        let last = self.segments.back_mut().expect("the file at the path");
        last.superseded = true;
        last.last_growth = Instant::now();
        if let Some(now_at) = last.id.and_then(|old| dir.path_of(old).ok().flatten()) {
            last.renamed(now_at);
        }
        tracing::info!(
            "{} was rotated: it names another file now ({id}); reading the old one ({}, {}) to its end until it stays unchanged for {:?} (source.rotate_wait), then the new one from its start",
            path.display(),
            last.path.display(),
            last.id.map_or(String::new(), |i| i.to_string()),
            self.rotate_wait
        );
        self.push_file(file, id, path, head)?;
        Ok(true)
    }

    /// The file at the path was cut short: its old content is finished from a copy if one
    /// lies next to it, and the file is read again from its start.
    fn truncated(&mut self, path: &Path, len: u64) -> Result<bool, SourceError> {
        let checkpoint = self.checkpoint.as_ref().expect("a file input");
        let excluded = |p: &Path| checkpoint.is_own(p);
        let dir = Directory {
            input: path,
            excluded: &excluded,
        };
        let last = self.segments.back_mut().expect("the file at the path");
        let read_to = last.consumed();
        tracing::warn!(
            "{} was truncated (copytruncate?): {len} bytes now, {read_to} were read; reading it again from its start",
            path.display()
        );
        let known = read_to.max(last.head().len() as u64);
        let fp = fingerprint(last.head(), known);
        let wanted = Wanted {
            offset: known,
            fingerprint: &fp,
        };
        let old_id = last.id.expect("a file");
        match dir.by_content(&wanted, &[old_id]).map_err(named(path))? {
            Some(copy) => {
                tracing::info!(
                    "finishing the content read from {} in its copy {} from byte {read_to}",
                    path.display(),
                    copy.path.display()
                );
                let copy_path = copy.path.clone();
                last.move_to(copy.file, copy.id, copy.path)
                    .map_err(named(&copy_path))?;
                last.superseded = true;
                last.last_growth = Instant::now();
            }
            None => {
                tracing::warn!(
                    "no copy of the old content of {} found next to it: lines written after its byte {read_to} before the truncation, if any, were not read",
                    path.display()
                );
                last.abandon();
            }
        }
        let Some((file, id, head)) = open_with_head(path)? else {
            return Ok(true);
        };
        self.push_file(file, id, path, head)?;
        Ok(true)
    }
}
