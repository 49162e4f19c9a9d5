//! Dead letters against real full filesystems (/dev/full, a tiny tmpfs mounted for the
//! test) and real brokers: every record ends written or stored as a dead letter, or stays
//! unacknowledged; a letter is never counted while its store holds nothing.

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use sluice::sim_sink::{SimSink, SimSinkSettings};

mod full_disk;

/// A tmpfs of `size` mounted on a temp dir for one test; unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Panics where mounting is not allowed: a full-disk test that cannot fill a disk
    /// has checked nothing, so it fails rather than pass (CI runs as root).
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount for a full-disk test: {e}"));
        assert!(
            out.status.success(),
            "cannot mount a tmpfs for a full-disk test (needs root): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem, then gives back `leave` bytes; returns the filler's path.
    fn fill(&self, leave: u64) -> PathBuf {
        let filler = self.path().join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.flush();
        let len = std::fs::metadata(&filler).unwrap().len();
        f.set_len(len.saturating_sub(leave)).unwrap();
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// `good` small records keyed k1.. and `bad` malformed ones of about `bad_bytes` each.
fn write_input(path: &Path, good: usize, bad: usize, bad_bytes: usize) {
    let mut text = String::new();
    for i in 1..=good {
        text.push_str(&format!("{{\"id\":\"k{i}\",\"n\":{i}}}\n"));
    }
    for i in 1..=bad {
        text.push_str(&format!(
            "{{\"id\":\"bad{i}\",\"pad\":\"{}\",\n",
            "x".repeat(bad_bytes)
        ));
    }
    std::fs::write(path, text).unwrap();
}

/// A worker in `dir` with its stderr in `dir/stderr.log`, readable while it runs.
fn spawn_worker(dir: &Path) -> Child {
    let log = std::fs::File::create(dir.join("stderr.log")).unwrap();
    sluice()
        .current_dir(dir)
        .args(DRAIN)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
}

/// Waits until the worker's log says the dead-letter store failed.
fn wait_for_store_failure(dir: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log_of(dir).contains("storing dead letters failed") {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the worker ended while its dead letters could not be stored: {}",
            log_of(dir)
        );
        assert!(
            Instant::now() < deadline,
            "no store failure: {}",
            log_of(dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `GET path` on the telemetry port: (status, body).
fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn terminate(child: &Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
}

fn wait_output(child: Child) -> std::process::Output {
    finish(child, Duration::from_secs(120))
}

/// Shows the outage while it lasts: still running, not ready, nothing counted.
fn assert_held(dir: &Path, child: &mut Child, port: u16) {
    std::thread::sleep(Duration::from_secs(2));
    assert!(child.try_wait().unwrap().is_none(), "{}", log_of(dir));
    let (status, body) = http_get(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("dead-letter store failing"), "{body}");
}

const RETRY: &str = "[retry]\nmin_delay = \"50ms\"\nmax_delay = \"500ms\"\n";

/// Slow start is off: the records go as one batch, the one holding the dead letters, so
/// that none of them is acknowledged.
fn http_config(dir: &Path, sim: &SimSink, dead_letters: &str, port: u16) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"http\"\nurl = \"{}\"\nkey = \"/id\"\n\n[sink.dead_letters]\n{dead_letters}\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n\n{RETRY}\n[throttle]\nslow_start = false\n\n[shutdown]\ngrace = \"2s\"\n\n[telemetry]\nlisten = \"127.0.0.1:{port}\"\n",
            sim.ingest_url()
        ),
    )
    .unwrap();
}

async fn sim() -> SimSink {
    SimSink::start(SimSinkSettings::new(
        "127.0.0.1:0".parse().unwrap(),
        100_000.0,
    ))
    .await
    .unwrap()
}

fn ndjson_letters(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a torn line {l:.80}: {e}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_refused_by_dev_full_are_never_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let sim = sim().await;
    write_input(&dir.path().join("in.ndjson"), 20, 5, 100);
    let port = free_port();
    http_config(dir.path(), &sim, "path = \"/dev/full\"", port);
    let mut child = spawn_worker(dir.path());
    let d = dir.path().to_path_buf();
    let child = tokio::task::spawn_blocking(move || {
        wait_for_store_failure(&d, &mut child);
        assert_held(&d, &mut child, port);
        terminate(&child);
        wait_output(child)
    })
    .await
    .unwrap();
    assert!(!child.status.success(), "{}", stderr(&child));
    let first = summary(&child);
    assert_eq!(
        first["remaining"], 25,
        "none acknowledged: the next run reads all: {first}"
    );
    assert!(
        log_of(dir.path()).contains("No space left on device"),
        "{}",
        log_of(dir.path())
    );

    // The same input with a store that takes the letters: every one of them is still
    // there to be stored, since none was acknowledged.
    http_config(dir.path(), &sim, "path = \"dead.ndjson\"", free_port());
    let d = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || wait_output(spawn_worker(&d)))
        .await
        .unwrap();
    assert!(out.status.success(), "{}", log_of(dir.path()));
    assert_eq!(summary(&out)["dead_lettered"], 5, "{}", log_of(dir.path()));
    assert_eq!(summary(&out)["pulled"], first["remaining"]);
    let letters = ndjson_letters(&dir.path().join("dead.ndjson"));
    assert_eq!(letters.len(), 5);
    assert!(
        letters
            .iter()
            .all(|l| l["reason"].as_str().unwrap().starts_with("malformed JSON"))
    );
    assert_eq!(sim.stats().inserted, 20);
}
