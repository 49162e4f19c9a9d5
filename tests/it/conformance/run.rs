//! Running the real worker over a corpus: a config per run, a run killed with SIGKILL in
//! the middle, a rerun of the whole file, and the summary's counts.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::common::{sluice, stderr, summary};

/// A directory holding one corpus, its checkpoint and the config of the run at hand.
pub struct Workdir {
    pub dir: tempfile::TempDir,
}

impl Workdir {
    pub fn new(lines: &[super::corpus::Line]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        super::corpus::write(&dir.path().join("in.ndjson"), lines);
        Workdir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes the config: the corpus as the source, `sink` as `[sink]` (its tables
    /// after), at `rate` records per second with `max_batch` and `in_flight` batches.
    pub fn config(&self, sink: &str, rate: f64, max_batch: usize, in_flight: usize) {
        let (head, tables) = sink.split_once("\n[").map_or((sink, ""), |(h, t)| (h, t));
        let tables = if tables.is_empty() {
            String::new()
        } else {
            format!("\n[{tables}")
        };
        let text = format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkey = \"/id\"\nmax_batch = {max_batch}\n{head}\n\n\
             [rate]\nrecords_per_second = {rate}\ntick = \"100ms\"\n\n\
             [retry]\nmin_delay = \"10ms\"\nmax_delay = \"200ms\"\nmax_attempts = 3\n\n\
             [concurrency]\nalgorithm = \"fixed\"\nmax = {in_flight}\n{tables}\n"
        );
        std::fs::write(self.path().join("sluice.toml"), text).unwrap();
    }

    pub fn forget_checkpoint(&self) {
        let _ = std::fs::remove_file(self.path().join("in.ndjson.sluice-checkpoint"));
    }

    pub fn start(&self) -> Child {
        sluice()
            .current_dir(self.path())
            .args([
                "run",
                "-c",
                "sluice.toml",
                "--until-empty",
                "--summary",
                "json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Runs to the end; the summary, or the failure with the worker's stderr.
    pub fn drain(&self) -> Result<serde_json::Value, String> {
        let out = super::common::finish(self.start(), Duration::from_secs(120));
        if !out.status.success() {
            return Err(format!("exit {:?}: {}", out.status.code(), stderr(&out)));
        }
        Ok(summary(&out))
    }

    /// Starts a run and kills it (SIGKILL) once `landed()` says enough has been written.
    pub fn kill_once(&self, landed: &dyn Fn() -> usize, at_least: usize) -> Result<(), String> {
        let mut child = self.start();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                return Err(format!(
                    "the run to kill ended by itself ({status}) before {at_least} rows: {}",
                    stderr(&out)
                ));
            }
            if landed() >= at_least {
                child.kill().unwrap();
                child.wait().unwrap();
                return Ok(());
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                return Err(format!("fewer than {at_least} rows within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A count from the summary; one it lacks fails the test (a renamed count would
/// otherwise read as 0 and pass every check that expects none).
pub fn count(summary: &serde_json::Value, name: &str) -> u64 {
    summary[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no count {name:?} in the summary: {summary}"))
}
