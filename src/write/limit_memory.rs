//! The sink's learned limit, kept across runs (`throttle.remember`): a worker restarted
//! against the same sink starts from what the last run learned — at `throttle.beta` of it,
//! climbing back within half a second, and probing above it as usual — instead of meeting
//! the sink as a stranger. After a kill -9 on an overloaded sink, a restart does not flood
//! it again, and does not spend its first second in slow start either.
//!
//! A starting point, never a ceiling: only the same sink (kind, URL without credentials or
//! query, table) in the same unit, and only a limit learned within [`KEPT_FOR`]. The file
//! is state, not configuration: one that is missing, unreadable or garbled is ignored with
//! a warning, and one that cannot be written (a full disk) costs the next run its head
//! start, never a record.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::control::sink_limit::Unit;
pub use crate::control::sink_limit::remembered_limit::KEPT_FOR;
use crate::control::sink_limit::remembered_limit::{LARGEST, RememberedLimit};

/// Where one worker keeps the limit it learned of one sink.
#[derive(Debug, Clone)]
pub struct LimitMemory {
    path: PathBuf,
    sink: String,
}

impl LimitMemory {
    /// `sink` names the sink (see [`sink_identity`]).
    pub fn new(path: PathBuf, sink: String) -> Self {
        LimitMemory { path, sink }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The limit the last run learned of this sink, if it is usable now.
    pub fn recall(&self, now: SystemTime) -> Option<(Unit, f64)> {
        if std::fs::metadata(&self.path).is_ok_and(|m| !m.is_file() || m.len() > LARGEST) {
            tracing::warn!(path = %self.path.display(), "throttle.remember: not a remembered limit (not a file, or over {LARGEST} bytes); meeting the sink afresh");
            return None;
        }
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "throttle.remember: cannot read the remembered limit ({e}); meeting the sink afresh");
                return None;
            }
        };
        let found = RememberedLimit::read(&text, &self.sink, now);
        if found.is_none() && !RememberedLimit::is_one_or_blank(text.as_bytes()) {
            tracing::warn!(path = %self.path.display(), "throttle.remember: the remembered limit is not readable; meeting the sink afresh");
        }
        found
    }

    /// Keeps `per_second` in `unit` as this sink's limit, learned at `now`: written whole
    /// beside the file and renamed over it, so a kill mid-write leaves the last one.
    pub fn keep(&self, unit: Unit, per_second: f64, now: SystemTime) -> std::io::Result<()> {
        let body = RememberedLimit::line(&self.sink, unit, per_second, now)
            .map_err(std::io::Error::other)?;
        let mut partial = self.path.clone().into_os_string();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        std::fs::write(&partial, body)?;
        std::fs::rename(&partial, &self.path)
    }
}

/// How a sink is told apart from another in the file: its kind, each URL without user,
/// password, query or fragment, and its table.
pub fn sink_identity(kind: &str, urls: &[&str], table: &str) -> String {
    let urls: Vec<String> = urls
        .iter()
        .map(|url| match reqwest::Url::parse(url) {
            Ok(mut parsed) => {
                let _ = parsed.set_username("");
                let _ = parsed.set_password(None);
                parsed.set_query(None);
                parsed.set_fragment(None);
                parsed.to_string()
            }
            Err(_) => "unparsed".to_string(),
        })
        .collect();
    format!("{kind} {} {table}", urls.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_kept_limit_is_recalled_for_the_same_sink_only_and_not_when_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limit");
        let sink = sink_identity("http", &["http://u:secret@host:9/in?token=t"], "records");
        assert_eq!(sink, "http http://host:9/in records", "no credentials kept");
        let memory = LimitMemory::new(path.clone(), sink);
        assert_eq!(memory.recall(at(1_000)), None, "nothing kept yet");
        memory.keep(Unit::Requests, 3.88, at(1_000)).unwrap();
        assert_eq!(memory.recall(at(1_010)), Some((Unit::Requests, 3.88)));
        let other = LimitMemory::new(
            path.clone(),
            sink_identity("http", &["http://host:9/other"], "records"),
        );
        assert_eq!(other.recall(at(1_010)), None, "another sink");
        let stale = at(1_000 + KEPT_FOR.as_secs() + 1);
        assert_eq!(memory.recall(stale), None, "learned too long ago");
        assert!(!std::fs::read_to_string(&path).unwrap().contains("secret"));
    }

    #[test]
    fn a_garbled_or_odd_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limit");
        let memory = LimitMemory::new(path.clone(), "sqlite sqlite://x records".into());
        for body in [
            "",
            "{",
            "[1,2]",
            r#"{"sink":"sqlite sqlite://x records","unit":"furlongs","per_second":5,"learned_at":1}"#,
            r#"{"sink":"sqlite sqlite://x records","unit":"records","per_second":-5,"learned_at":1}"#,
            r#"{"sink":"sqlite sqlite://x records","unit":"records","per_second":0,"learned_at":1}"#,
        ] {
            std::fs::write(&path, body).unwrap();
            assert_eq!(memory.recall(at(2)), None, "{body:?}");
        }
    }

    #[test]
    fn a_limit_that_cannot_be_written_is_an_error_to_report_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let memory = LimitMemory::new(dir.path().join("missing").join("limit"), "x".into());
        assert!(memory.keep(Unit::Records, 1.0, at(1)).is_err());
    }
}
