//! What became of the followed file, judged from a fresh look at the input path, and when
//! a rotated-away file is finished. Pure: the caller looks at the disk and the clock.

use std::time::Duration;

use tokio::time::Instant;

use super::identity::FileId;

/// What happened to the file being read at the input path since the last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Same file, same or more content: keep reading it.
    Unchanged,
    /// The path names another file now (renamed away and recreated): finish the old one
    /// through the handle we hold, then read the new one from its start.
    Rotated,
    /// Same file, but shorter than what was read or with another head (copytruncate):
    /// its old content is gone from it; read it again from its start.
    Truncated,
}

/// `reading`: the file read at the path; `consumed`: bytes of it read so far;
/// `at_path`: what the path names now (None while it is missing, between a rename and
/// the new file's creation); `len`: the length of `reading` now; `head_intact`: whether
/// its first bytes are still the ones read.
pub fn classify(
    reading: FileId,
    consumed: u64,
    at_path: Option<FileId>,
    len: u64,
    head_intact: bool,
) -> Change {
    match at_path {
        None => Change::Unchanged,
        Some(id) if id != reading => Change::Rotated,
        Some(_) if len < consumed || !head_intact => Change::Truncated,
        Some(_) => Change::Unchanged,
    }
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
        assert_eq!(classify(A, 500, Some(B), 500, true), Change::Rotated);
        // Even when the new file is longer and its head looks the same.
        assert_eq!(classify(A, 10, Some(B), 10_000, true), Change::Rotated);
        // Same inode number on another device is another file.
        let other_dev = FileId { dev: 2, ino: 10 };
        assert_eq!(classify(A, 0, Some(other_dev), 0, true), Change::Rotated);
    }

    #[test]
    fn a_missing_path_is_waited_out() {
        assert_eq!(classify(A, 500, None, 500, true), Change::Unchanged);
    }

    #[test]
    fn shorter_than_read_or_another_head_is_a_truncation() {
        assert_eq!(classify(A, 500, Some(A), 499, true), Change::Truncated);
        assert_eq!(classify(A, 500, Some(A), 0, true), Change::Truncated);
        // Rewritten past our offset before we looked again: only the head tells.
        assert_eq!(classify(A, 500, Some(A), 800, false), Change::Truncated);
    }

    #[test]
    fn growth_is_no_change() {
        assert_eq!(classify(A, 500, Some(A), 500, true), Change::Unchanged);
        assert_eq!(classify(A, 500, Some(A), 900, true), Change::Unchanged);
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
