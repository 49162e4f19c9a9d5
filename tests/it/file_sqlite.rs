//! The embedded default end to end: NDJSON file → SQLite through the real binary.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

const BAD: [usize; 7] = [3, 100, 2500, 5000, 7777, 9001, 10_000];

#[test]
fn drains_with_dead_letters_and_a_rerun_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 10_000, &BAD);
    write_config(dir.path(), "in.ndjson", 1_000_000.0, "");

    let first = run_in(dir.path(), DRAIN);
    assert!(first.status.success(), "{}", stderr(&first));
    let s = summary(&first);
    assert_eq!(
        (s["pulled"].as_u64(), s["written"].as_u64()),
        (Some(10_000), Some(9_993))
    );
    assert_eq!(s["dead_lettered"], 7);
    assert_eq!(s["duplicates"], 0);
    let db = dir.path().join("out.db");
    assert_eq!(sqlite_count(&db, "select count(*) from records"), 9_993);
    assert_eq!(
        sqlite_count(&db, "select count(*) from sluice_dead_letters"),
        7
    );
    assert_eq!(
        sqlite_count(
            &db,
            "select count(*) from sluice_dead_letters where reason like 'malformed JSON%' and position like 'in.ndjson:%'"
        ),
        7
    );
    assert!(
        !dir.path().join("in.ndjson.sluice-checkpoint").exists(),
        "a finished load leaves no checkpoint"
    );

    let second = run_in(dir.path(), DRAIN);
    assert!(second.status.success(), "{}", stderr(&second));
    let s = summary(&second);
    assert_eq!(s["written"], 0);
    assert_eq!(s["duplicates"], 9_993);
    assert_eq!(sqlite_count(&db, "select count(*) from records"), 9_993);
    assert_eq!(
        sqlite_count(&db, "select count(*) from sluice_dead_letters"),
        7,
        "a bad record is one letter"
    );
}

#[test]
fn missing_keys_and_oversize_lines_are_dead_lettered_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let big = format!("{{\"id\":\"big\",\"pad\":\"{}\"}}", "x".repeat(5000));
    std::fs::write(
        dir.path().join("in.ndjson"),
        format!("{{\"id\":\"a\"}}\n{{\"no_id\":1}}\n{big}\n{{\"id\":\"b\"}}\n"),
    )
    .unwrap();
    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let cfg = std::fs::read_to_string(dir.path().join("sluice.toml")).unwrap();
    std::fs::write(
        dir.path().join("sluice.toml"),
        cfg.replace("[sink]", "max_record_bytes = 1024\n\n[sink]"),
    )
    .unwrap();
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    let db = dir.path().join("out.db");
    assert_eq!(sqlite_count(&db, "select count(*) from records"), 2);
    assert_eq!(
        sqlite_count(
            &db,
            "select count(*) from sluice_dead_letters where reason = 'missing key /id'"
        ),
        1
    );
    assert_eq!(
        sqlite_count(
            &db,
            "select count(*) from sluice_dead_letters where reason like '%exceeds source.max_record_bytes%' and length(raw) = 1024"
        ),
        1
    );
}

#[test]
fn the_limiter_really_limits() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3_000, &[]);
    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let started = Instant::now();
    let out = run_in(dir.path(), DRAIN);
    let took = started.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["written"], 3_000);
    assert!(
        took >= Duration::from_millis(2_500),
        "3,000 records at 1,000/s took {took:?}"
    );
}

#[test]
fn max_records_stops_early_and_stdin_works() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 500, &[]);
    write_config(dir.path(), "-", 100_000.0, "");
    let input = std::fs::File::open(dir.path().join("in.ndjson")).unwrap();
    let out = sluice()
        .current_dir(dir.path())
        .args([
            "run",
            "-c",
            "sluice.toml",
            "--max-records",
            "120",
            "--summary",
            "json",
        ])
        .stdin(input)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["pulled"], 120);
    assert_eq!(
        sqlite_count(&dir.path().join("out.db"), "select count(*) from records"),
        120
    );
}

#[test]
fn kill_9_mid_run_then_rerun_leaves_every_key_once() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 10_000, &[]);
    write_config(dir.path(), "in.ndjson", 2_500.0, "");
    let mut child = sluice()
        .current_dir(dir.path())
        .args(["run", "-c", "sluice.toml", "--until-empty"])
        .spawn()
        .unwrap();
    let db = dir.path().join("out.db");
    let deadline = Instant::now() + Duration::from_secs(30);
    // Kill once a fair part is written but well before the end.
    while !(db.exists() && sqlite_count_or_zero(&db) >= 2_000) {
        assert!(Instant::now() < deadline, "no progress");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let written_before = sqlite_count(&db, "select count(*) from records");
    assert!(written_before < 10_000, "killed too late to prove anything");
    assert!(
        dir.path().join("in.ndjson.sluice-checkpoint").exists(),
        "progress was checkpointed"
    );

    let out = run_in(dir.path(), &[DRAIN, &["--rate", "100000"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert!(
        s["pulled"].as_u64().unwrap() < 10_000,
        "resumed from the checkpoint: {s}"
    );
    assert_eq!(sqlite_count(&db, "select count(*) from records"), 10_000);
    assert_eq!(
        sqlite_count(&db, "select count(distinct key) from records"),
        10_000
    );
    assert_eq!(
        sqlite_count(&db, "select count(*) from records where key not like 'k%'"),
        0
    );
}

fn sqlite_count_or_zero(db: &std::path::Path) -> i64 {
    std::panic::catch_unwind(|| sqlite_count(db, "select count(*) from records")).unwrap_or(0)
}

#[test]
fn sigterm_finishes_in_flight_batches_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 5_000, &[]);
    write_config(dir.path(), "in.ndjson", 1_000.0, "");
    // Without --until-empty the worker follows the file like tail -f.
    let child = sluice()
        .current_dir(dir.path())
        .args(["run", "-c", "sluice.toml", "--summary", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    let pulled = s["pulled"].as_i64().unwrap();
    assert!(pulled > 0 && pulled < 5_000, "{s}");
    let db = dir.path().join("out.db");
    assert_eq!(
        sqlite_count(&db, "select count(*) from records"),
        pulled,
        "everything pulled was written"
    );
    let line = common::checkpoint_files(&dir.path().join("in.ndjson"))[0]["line"]
        .as_i64()
        .unwrap();
    assert_eq!(
        line,
        pulled + 1,
        "checkpoint points after the last written record"
    );
}

#[test]
fn follows_a_growing_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ndjson");
    std::fs::write(&input, "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":").unwrap();
    write_config(dir.path(), "in.ndjson", 1_000.0, "");
    let child = sluice()
        .current_dir(dir.path())
        .args(["run", "-c", "sluice.toml", "--summary", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&input)
        .unwrap();
    f.write_all(b"\"c\"}\n{\"id\":\"d\"}\n").unwrap();
    drop(f);
    let db = dir.path().join("out.db");
    let deadline = Instant::now() + Duration::from_secs(20);
    while sqlite_count_or_zero(&db) < 4 {
        assert!(Instant::now() < deadline, "appended lines never arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(
            &db,
            "select count(*) from records where key in ('a','b','c','d')"
        ),
        4
    );
    assert_eq!(
        sqlite_count(&db, "select count(*) from sluice_dead_letters"),
        0,
        "the half-written line waited"
    );
}

use std::process::Command;

#[test]
fn plan_counts_the_backlog_exactly() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 12_345, &[17]);
    write_config(dir.path(), "in.ndjson", 800.0, "");
    let out = run_in(dir.path(), &["plan", "-c", "sluice.toml"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "12,345 records queued; at 800 rec/s about 15 s"
    );
    let out = run_in(dir.path(), &["plan", "-c", "sluice.toml", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["backlog"], 12_345);
}

/// A reader of the summary that went away (`sluice run --summary json | head -c0`, a log
/// shipper that died) costs nothing: the drain is done and committed, the exit is 0, and
/// nothing panics (`println!` did, exit 101, with a backtrace after a finished run). A
/// full disk under a redirected stdout is said and fails the run: the summary asked for
/// was not delivered. A stderr nobody reads loses its lines, and nothing else.
#[test]
fn a_closed_or_full_stdout_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 500, &[]);
    write_config(dir.path(), "in.ndjson", 1_000_000.0, "");
    let mut child = worker(dir.path(), true);
    drop(child.stdout.take());
    let out = finish(child, Duration::from_secs(60));
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(&dir.path().join("out.db"), "SELECT count(*) FROM records"),
        500
    );

    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = sluice()
        .current_dir(dir.path())
        .args(DRAIN)
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot write the summary to standard output"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));

    // And a stderr nobody reads: the summary line said there is lost, the run is not.
    let mut child = worker(dir.path(), true);
    drop(child.stderr.take());
    let out = finish(child, Duration::from_secs(60));
    assert!(out.status.success(), "{:?}", out.status);
    assert_eq!(
        summary(&out)["written"],
        0,
        "all 500 written by the first run"
    );
}
