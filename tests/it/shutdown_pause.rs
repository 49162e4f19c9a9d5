//! SIGTERM while the sink has asked for a 30 s pause (429, Retry-After: 30): the batch is
//! only waiting to be retried, so the worker stops at once, exits 0 with its summary, and
//! leaves the batch unacknowledged; the next run delivers every record, as many as the
//! summary's `remaining` said.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::throttled::{AlwaysThrottled, accepting_sink, sigterm};
use common::*;

fn config(dir: &std::path::Path, url: &str) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"http\"\nurl = {url:?}\nkey = \"/id\"\nmax_batch = 50\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n\n\
             [retry]\nmax_delay = \"60s\"\n\n\
             [shutdown]\ngrace = \"30s\"\n"
        ),
    )
    .unwrap();
}

#[test]
fn sigterm_during_a_retry_after_pause_exits_at_once_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 300, &[]);
    let throttled = AlwaysThrottled::start();
    config(dir.path(), &throttled.url());
    let mut child = worker(dir.path(), false);
    throttled.wait_until_paused(&mut child);
    let asked = Instant::now();
    sigterm(&child);
    while child.try_wait().unwrap().is_none() {
        if asked.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("still waiting out the pause 10 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = asked.elapsed();
    let out = child.wait_with_output().unwrap();
    eprintln!("stopped {took:?} after SIGTERM");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(took < Duration::from_secs(1), "took {took:?} to stop");
    let first = summary(&out);
    assert_eq!(first["written"], 0, "{first}");
    assert!(first["throttled"].as_u64().unwrap() >= 1, "{first}");
    assert!(first.get("error").is_none(), "{first}");
    assert_eq!(
        first["remaining"], 300,
        "what was pulled and never acknowledged is left for the next run: {first}"
    );
    assert_eq!(
        throttled.requests.load(Ordering::SeqCst),
        first["throttled"].as_u64().unwrap(),
        "no write went out after the signal"
    );

    // The rerun, against a sink that takes everything: all 300, none skipped.
    let (rt, sim) = accepting_sink();
    let url = sim.ingest_url();
    let out = finish(
        sluice()
            .current_dir(dir.path())
            .args(DRAIN)
            .args(["--sink-url", &url])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let second = summary(&out);
    assert_eq!(second["written"], 300, "{}", stderr(&out));
    assert_eq!(second["pulled"], first["remaining"], "{second}");
    let keys = {
        let _guard = rt.enter();
        sim.keys()
    };
    let mut keys: Vec<String> = keys;
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 300, "every record delivered on the rerun");
}

/// `--summary json` prints the summary, with the failure, when a run exits 1.
#[test]
fn a_failed_run_still_prints_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 20, &[]);
    // A sink URL whose 404 means a wrong endpoint: fatal, exit 1.
    let (_rt, sim) = accepting_sink();
    config(
        dir.path(),
        &format!("http://{}/no-such-endpoint", sim.addr()),
    );
    let out = finish(worker(dir.path(), true), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 0, "{s}");
    assert!(s["pulled"].as_u64().unwrap() > 0, "{s}");
    let error = s["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {s}"));
    assert!(error.contains("404"), "{error}");
    assert_eq!(s["remaining"], 20, "nothing was acknowledged: {s}");

    // Failing before the pipeline starts (the sink cannot be opened): the summary says so
    // too.
    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let body = std::fs::read_to_string(dir.path().join("sluice.toml"))
        .unwrap()
        .replace("sqlite://out.db", "sqlite:///nonexistent/sluice/out.db");
    std::fs::write(dir.path().join("sluice.toml"), body).unwrap();
    let out = finish(worker(dir.path(), true), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["pulled"], 0, "{s}");
    assert!(s["error"].as_str().is_some_and(|e| !e.is_empty()), "{s}");
    assert_eq!(s["remaining"], 20, "{s}");
}
