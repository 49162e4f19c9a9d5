//! What became of a followed file, judged from a fresh look at the input path and at the
//! file through its handle, and when a rotated-away file is finished. Pure: the caller
//! looks at the disk and the clock.

use std::time::Duration;

use tokio::time::Instant;

use super::identity::FileId;

/// Whether the input path names another file than the one read at it (renamed away and
/// recreated): the old one is then finished through the handle held on it while the new
/// one is read from its start. A missing path (between a rename and the new file's
/// creation) is waited out.
pub fn replaced(reading: FileId, at_path: Option<FileId>) -> bool {
    at_path.is_some_and(|id| id != reading)
}

/// A file only grows: shorter than it was seen (`seen`), or with other first bytes than
/// were read, it was cut (copytruncate, or rewritten), and what was not read of it is gone
/// from it.
pub fn cut(seen: u64, len: u64, head_intact: bool) -> bool {
    len < seen || !head_intact
}

/// A rotated-away file is finished once it has been read to its end and has not grown for
/// `wait`: a writer that still has it open may append for a while after the rotation, and
/// as long as it keeps doing so the file is read on.
pub fn finished(last_growth: Instant, now: Instant, wait: Duration) -> bool {
    now.saturating_duration_since(last_growth) >= wait
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: FileId = FileId { dev: 1, ino: 10 };
    const B: FileId = FileId { dev: 1, ino: 11 };

    #[test]
    fn another_file_at_the_path_is_a_rotation() {
        assert!(replaced(A, Some(B)));
        // Same inode number on another device is another file.
        assert!(replaced(A, Some(FileId { dev: 2, ino: 10 })));
        assert!(!replaced(A, Some(A)));
    }

    #[test]
    fn a_missing_path_is_waited_out() {
        assert!(!replaced(A, None));
    }

    #[test]
    fn shorter_than_seen_or_another_head_is_a_cut() {
        assert!(cut(500, 499, true));
        assert!(cut(500, 0, true));
        // Rewritten past what was seen before the next look: only the head tells.
        assert!(cut(500, 800, false));
    }

    #[test]
    fn growth_is_no_cut() {
        assert!(!cut(500, 500, true));
        assert!(!cut(500, 900, true));
    }

    #[test]
    fn a_rotated_file_is_finished_only_after_a_quiet_wait() {
        let t0 = Instant::now();
        let wait = Duration::from_secs(5);
        assert!(!finished(t0, t0, wait));
        assert!(!finished(t0, t0 + Duration::from_millis(4_999), wait));
        assert!(finished(t0, t0 + wait, wait));
        // Growth restarts the wait: measured from the last growth.
        let grew = t0 + Duration::from_secs(4);
        assert!(!finished(grew, t0 + wait, wait));
        assert!(finished(grew, grew + wait, wait));
        // No wait: finished as soon as it is read to its end.
        assert!(finished(t0, t0, Duration::ZERO));
    }
}
