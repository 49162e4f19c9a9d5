//! A followed file rotated (renamed and recreated, the writer still appending to the old
//! one for a while) and copytruncated, while the worker runs and across a SIGTERM and a
//! restart: the real binary, real files, SQLite. Every line of both files is written
//! exactly once by key.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;

/// Short ticks and a short rotate-wait keep the test quick; the wait is still far longer
/// than the writer's pauses, so the old file is seen growing on.
fn config(dir: &Path, rate: f64, rotate_wait: &str) {
    write_config(dir, "in.ndjson", rate, "");
    let cfg = std::fs::read_to_string(dir.join("sluice.toml")).unwrap();
    std::fs::write(
        dir.join("sluice.toml"),
        cfg.replace(
            "[sink]",
            &format!("rotate_wait = \"{rotate_wait}\"\n\n[sink]"),
        )
        .replace("tick = \"200ms\"", "tick = \"50ms\""),
    )
    .unwrap();
}

fn lines(prefix: &str, range: std::ops::RangeInclusive<u32>) -> String {
    range
        .map(|i| format!("{{\"id\":\"{prefix}{i}\",\"n\":{i}}}\n"))
        .collect()
}

fn keys(prefix: &str, range: std::ops::RangeInclusive<u32>) -> BTreeSet<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

/// Appends `prefix{range}` to `file` in `chunks` writes, `pause` apart: a live writer.
fn write_slowly(
    file: &mut std::fs::File,
    prefix: &str,
    range: std::ops::RangeInclusive<u32>,
    chunks: u32,
    pause: Duration,
) {
    let (first, last) = (*range.start(), *range.end());
    let per = (last - first + 1).div_ceil(chunks);
    let mut i = first;
    while i <= last {
        let to = (i + per - 1).min(last);
        file.write_all(lines(prefix, i..=to).as_bytes()).unwrap();
        i = to + 1;
        std::thread::sleep(pause);
    }
}

fn appender(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every key written, with how often (the key is the primary key: once, or the count
/// check below fails).
fn written_keys(db: &Path) -> Vec<String> {
    rt().block_on(async {
        let url = format!("sqlite://{}", db.display());
        let Ok(mut conn) = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url).await else {
            return Vec::new();
        };
        sqlx::query_as::<_, (String,)>("select key from records")
            .fetch_all(&mut conn)
            .await
            .map(|rows| rows.into_iter().map(|(k,)| k).collect())
            .unwrap_or_default()
    })
}

fn wait_for_rows(db: &Path, n: usize, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = written_keys(db).len();
        if got >= n {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("worker exited with {status} at {got} rows of {n}");
        }
        assert!(Instant::now() < deadline, "{got} rows of {n} after 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start(dir: &Path) -> Child {
    sluice()
        .current_dir(dir)
        .env("SLUICE_LOG", "info")
        .args(["run", "-c", "sluice.toml", "--summary", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// SIGTERM; the worker must exit 0. Returns its stderr (the log).
fn stop(child: Child) -> String {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = finish(child, Duration::from_secs(30));
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    log
}

fn checkpoint_files(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("in.ndjson.sluice-checkpoint")).unwrap();
    let cp: serde_json::Value = serde_json::from_str(&text).unwrap();
    cp["files"].as_array().unwrap().clone()
}

fn assert_exactly(db: &Path, expected: &BTreeSet<String>) {
    let got = written_keys(db);
    assert_eq!(got.len(), expected.len(), "rows");
    let set: BTreeSet<String> = got.into_iter().collect();
    assert_eq!(&set, expected);
    assert_eq!(
        sqlite_count(db, "select count(*) from sluice_dead_letters"),
        0,
        "no fragment dead-lettered"
    );
}

#[test]
fn rename_and_recreate_with_the_writer_still_appending_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let input = dir.join("in.ndjson");
    let db = dir.join("out.db");
    std::fs::write(&input, lines("a", 1..=100)).unwrap();
    config(dir, 2_000.0, "2s");
    let mut worker = start(dir);
    wait_for_rows(&db, 100, &mut worker);

    // Rotated: the writer keeps its handle on the old file and appends for a while; a
    // second writer fills the new file.
    let mut old = appender(&input);
    std::fs::rename(&input, dir.join("in.ndjson.1")).unwrap();
    let mut new = appender(&input);
    new.write_all(lines("b", 1..=50).as_bytes()).unwrap();
    write_slowly(&mut old, "a", 101..=150, 5, Duration::from_millis(100));
    wait_for_rows(&db, 150, &mut worker);
    let log = stop(worker);
    assert!(log.contains("was rotated"), "the rotation is logged: {log}");
    let files = checkpoint_files(dir);
    assert_eq!(
        files.len(),
        2,
        "stopped while the old file was still being finished: {files:?}"
    );
    assert_eq!(files[0]["name"], "in.ndjson.1");

    // While it is down both files grow; after the restart the old one still does.
    old.write_all(lines("a", 151..=200).as_bytes()).unwrap();
    new.write_all(lines("b", 51..=100).as_bytes()).unwrap();
    let mut worker = start(dir);
    write_slowly(&mut old, "a", 201..=250, 5, Duration::from_millis(100));
    drop(old);
    new.write_all(lines("b", 101..=150).as_bytes()).unwrap();
    wait_for_rows(&db, 400, &mut worker);
    std::thread::sleep(Duration::from_millis(300));
    let log = stop(worker);
    assert!(
        log.contains("finished"),
        "finishing the old file is logged: {log}"
    );

    let mut expected = keys("a", 1..=250);
    expected.extend(keys("b", 1..=150));
    assert_exactly(&db, &expected);
    let files = checkpoint_files(dir);
    assert_eq!(files.len(), 1, "the finished old file left: {files:?}");
}

#[test]
fn copytruncate_while_behind_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let input = dir.join("in.ndjson");
    let db = dir.join("out.db");
    std::fs::write(&input, lines("a", 1..=100)).unwrap();
    config(dir, 400.0, "1s");
    let mut worker = start(dir);
    wait_for_rows(&db, 1, &mut worker);
    let mut writer = appender(&input);
    write_slowly(&mut writer, "a", 101..=300, 4, Duration::from_millis(50));

    // logrotate's copytruncate: copy, then cut the file the writer still appends to. The
    // worker is behind, so part of the old content is only in the copy now.
    std::fs::copy(&input, dir.join("in.ndjson.1")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&input)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert!(
        written_keys(&db).len() < 300,
        "the worker should still be behind"
    );
    write_slowly(&mut writer, "b", 1..=50, 5, Duration::from_millis(50));
    wait_for_rows(&db, 200, &mut worker);
    let log = stop(worker);
    assert!(
        log.contains("was truncated"),
        "the truncation is logged: {log}"
    );

    writer.write_all(lines("b", 51..=100).as_bytes()).unwrap();
    let mut worker = start(dir);
    write_slowly(&mut writer, "b", 101..=150, 5, Duration::from_millis(50));
    wait_for_rows(&db, 450, &mut worker);
    std::thread::sleep(Duration::from_millis(300));
    stop(worker);

    let mut expected = keys("a", 1..=300);
    expected.extend(keys("b", 1..=150));
    assert_exactly(&db, &expected);
}
