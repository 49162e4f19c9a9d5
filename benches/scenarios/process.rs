//! A child process run to completion with its wall time and peak RSS. The peak is the
//! child's own VmHWM, polled until it exits: rusage's ru_maxrss would include this bench
//! process's memory, which the child inherits at spawn.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Measured {
    pub output: Output,
    pub elapsed: Duration,
    pub peak_rss_kib: u64,
    /// False when it was stopped at its time limit.
    pub finished: bool,
}

impl Measured {
    /// Stdout as JSON (the worker's `--summary json`, a strategy's report).
    pub fn json(&self) -> serde_json::Value {
        let stdout = String::from_utf8_lossy(&self.output.stdout);
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {stdout}\nstderr: {}",
                String::from_utf8_lossy(&self.output.stderr)
            )
        })
    }
}

/// Runs `cmd` to the end (stdout and stderr captured), sampling its VmHWM every 10 ms.
/// Panics if it fails: a bench row from a failed run would be a lie.
pub fn run_measured(cmd: Command) -> Measured {
    run_measured_within(cmd, Duration::MAX)
}

/// As [`run_measured`], but a child still running after `limit` is stopped with SIGTERM
/// (sluice then exits 0 with its summary; a baseline just dies) and its run marked
/// unfinished.
pub fn run_measured_within(mut cmd: Command, limit: Duration) -> Measured {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the child starts");
    let status_file = format!("/proc/{}/status", child.id());
    let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    // Drained on threads so a chatty child never blocks on a full pipe.
    let stdout = std::thread::spawn(move || read_all(stdout));
    let stderr = std::thread::spawn(move || read_all(stderr));
    let mut peak_rss_kib = 0;
    let mut finished = true;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if finished && started.elapsed() > limit {
            finished = false;
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        if let Some(kib) = std::fs::read_to_string(&status_file)
            .ok()
            .as_deref()
            .and_then(vm_hwm_kib)
        {
            peak_rss_kib = peak_rss_kib.max(kib);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    let output = Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    assert!(
        output.status.success() || !finished,
        "{cmd:?} failed ({status}): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Measured {
        output,
        elapsed,
        peak_rss_kib,
        finished,
    }
}

fn read_all(mut from: impl std::io::Read) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = from.read_to_end(&mut buf);
    buf
}

fn vm_hwm_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The `sluice` binary of this build (or `SLUICE_BENCH_SLUICE`), with none of the
/// caller's `SLUICE_*` variables leaking into its configuration. A relative
/// `SLUICE_BENCH_SLUICE` is taken from where the bench started: the ceilings run their
/// children elsewhere.
pub fn sluice() -> Command {
    let bin = std::env::var_os("SLUICE_BENCH_SLUICE").map_or_else(
        || env!("CARGO_BIN_EXE_sluice").into(),
        |path| std::path::absolute(&path).unwrap_or(path.into()),
    );
    let mut cmd = Command::new(bin);
    for (name, _) in std::env::vars() {
        if name.starts_with("SLUICE_") {
            cmd.env_remove(name);
        }
    }
    cmd.env(
        "SLUICE_LOG",
        std::env::var("SLUICE_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
    );
    cmd
}
