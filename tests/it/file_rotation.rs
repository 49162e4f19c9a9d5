//! A followed file rotated (renamed and recreated, the writer still appending to the old
//! one for a while), copytruncated, both (the new file copytruncated while the old one is
//! finished), and truncated without a copy, while the worker runs and across a SIGTERM and
//! a restart: the real binary, real files, SQLite. Every line of every file is written
//! exactly once by key, except what a truncation without a copy took before it was read,
//! which is reported in bytes.

use crate::common;

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
    wait_for_rows_within(db, n, child, Duration::from_secs(60));
}

fn wait_for_rows_within(db: &Path, n: usize, child: &mut Child, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = written_keys(db).len();
        if got >= n {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("worker exited with {status} at {got} rows of {n}");
        }
        assert!(
            Instant::now() < deadline,
            "{got} rows of {n} after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A temp dir with `in.ndjson` (lines a1..a`first`) and a config following it into
/// SQLite (`out.db`).
struct Setup {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    input: std::path::PathBuf,
    db: std::path::PathBuf,
}

fn setup(first: u32, rate: f64, rotate_wait: &str) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("in.ndjson"), lines("a", 1..=first)).unwrap();
    config(&dir, rate, rotate_wait);
    Setup {
        input: dir.join("in.ndjson"),
        db: dir.join("out.db"),
        dir,
        _tmp: tmp,
    }
}

/// Renamed away as logrotate's `create` does, the writer keeping its handle on the old
/// file (now `in.ndjson.1`): that handle, and a writer on the new file at the path.
fn rename_away(input: &Path) -> (std::fs::File, std::fs::File) {
    let old = appender(input);
    std::fs::rename(input, input.with_extension("ndjson.1")).unwrap();
    (old, appender(input))
}

fn truncate(path: &Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(0)
        .unwrap();
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
    let s = setup(100, 2_000.0, "2s");
    let (dir, input, db) = (s.dir.as_path(), &s.input, &s.db);
    let mut worker = start(dir);
    wait_for_rows(db, 100, &mut worker);

    // Rotated: the writer keeps its handle on the old file and appends for a while; a
    // second writer fills the new file.
    let (mut old, mut new) = rename_away(input);
    new.write_all(lines("b", 1..=50).as_bytes()).unwrap();
    write_slowly(&mut old, "a", 101..=150, 5, Duration::from_millis(100));
    wait_for_rows(db, 150, &mut worker);
    let log = stop(worker);
    assert!(log.contains("was rotated"), "the rotation is logged: {log}");
    let files = common::checkpoint_files(&dir.join("in.ndjson"));
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
    wait_for_rows(db, 400, &mut worker);
    // The new file is read all along; the old one is finished once it stayed unchanged
    // for its 2 s rotate-wait.
    std::thread::sleep(Duration::from_secs(3));
    let log = stop(worker);
    assert!(
        log.contains("finished"),
        "finishing the old file is logged: {log}"
    );

    let mut expected = keys("a", 1..=250);
    expected.extend(keys("b", 1..=150));
    assert_exactly(db, &expected);
    let files = common::checkpoint_files(&dir.join("in.ndjson"));
    assert_eq!(files.len(), 1, "the finished old file left: {files:?}");
}

#[test]
fn copytruncate_while_behind_across_a_restart() {
    let s = setup(100, 400.0, "1s");
    let (dir, input, db) = (s.dir.as_path(), &s.input, &s.db);
    let mut worker = start(dir);
    wait_for_rows(db, 1, &mut worker);
    let mut writer = appender(input);
    write_slowly(&mut writer, "a", 101..=300, 4, Duration::from_millis(50));

    // logrotate's copytruncate: copy, then cut the file the writer still appends to. The
    // worker is behind, so part of the old content is only in the copy now.
    std::fs::copy(input, dir.join("in.ndjson.1")).unwrap();
    truncate(input);
    assert!(
        written_keys(db).len() < 300,
        "the worker should still be behind"
    );
    write_slowly(&mut writer, "b", 1..=50, 5, Duration::from_millis(50));
    wait_for_rows(db, 200, &mut worker);
    let log = stop(worker);
    assert!(
        log.contains("was truncated"),
        "the truncation is logged: {log}"
    );

    writer.write_all(lines("b", 51..=100).as_bytes()).unwrap();
    let mut worker = start(dir);
    write_slowly(&mut writer, "b", 101..=150, 5, Duration::from_millis(50));
    wait_for_rows(db, 450, &mut worker);
    std::thread::sleep(Duration::from_millis(300));
    stop(worker);

    let mut expected = keys("a", 1..=300);
    expected.extend(keys("b", 1..=150));
    assert_exactly(db, &expected);
}

/// The new file is read while the rotated one is finished: its lines are written long
/// before the old file's 30 s quiet wait ends, while the old file's writer still appends.
/// Stopped then, the checkpoint holds both files' progress.
#[test]
fn the_new_file_is_read_while_the_old_one_is_finished() {
    let s = setup(50, 2_000.0, "30s");
    let (dir, input, db) = (s.dir.as_path(), &s.input, &s.db);
    let mut worker = start(dir);
    wait_for_rows(db, 50, &mut worker);

    let (mut old, mut new) = rename_away(input);
    new.write_all(lines("b", 1..=50).as_bytes()).unwrap();
    write_slowly(&mut old, "a", 51..=70, 10, Duration::from_millis(200));
    wait_for_rows_within(db, 120, &mut worker, Duration::from_secs(15));
    let log = stop(worker);
    assert!(log.contains("was rotated"), "{log}");
    let mut expected = keys("a", 1..=70);
    expected.extend(keys("b", 1..=50));
    assert_exactly(db, &expected);
    let files = common::checkpoint_files(&dir.join("in.ndjson"));
    let at: Vec<(&str, u64)> = files
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["line"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        at,
        [("in.ndjson.1", 71), ("in.ndjson", 51)],
        "each file's progress"
    );
}

/// The case: renamed away (its writer appending to it a moment longer), the new
/// file seen while empty, 200 lines written to it, then copytruncated under 2 s later
/// (`cp in in.2 && truncate in`) while the old one is still being finished and before the
/// worker (at 200 rec/s) has read them all: the rest comes from the copy.
#[test]
fn rename_then_copytruncate_of_the_new_file_loses_nothing() {
    let s = setup(100, 200.0, "3s");
    let (dir, input, db) = (s.dir.as_path(), &s.input, &s.db);
    let mut worker = start(dir);
    wait_for_rows(db, 100, &mut worker);

    let (mut old, mut new) = rename_away(input);
    std::thread::sleep(Duration::from_millis(300));
    write_slowly(&mut old, "a", 101..=110, 5, Duration::from_millis(20));
    new.write_all(lines("b", 1..=200).as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::copy(input, dir.join("in.ndjson.2")).unwrap();
    truncate(input);
    new.write_all(lines("b", 201..=250).as_bytes()).unwrap();
    wait_for_rows(db, 360, &mut worker);
    std::thread::sleep(Duration::from_millis(300));
    let log = stop(worker);
    assert!(log.contains("was truncated"), "{log}");
    let mut expected = keys("a", 1..=110);
    expected.extend(keys("b", 1..=250));
    assert_exactly(db, &expected);
    assert!(!log.contains("lost"), "nothing lost: {log}");
}

/// GET `path` on the worker's telemetry port.
fn get(port: u16, path: &str) -> String {
    rt().block_on(async {
        crate::common::http()
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    })
}

/// Truncated with no copy while the worker is behind: the lines it had read are written,
/// and the ones it saw on disk and never read are reported lost in bytes, in a warning
/// and in `sluice_source_lost_bytes_total`; lines written after the truncation are read.
#[test]
fn a_truncation_without_a_copy_reports_the_bytes_lost() {
    let s = setup(200, 100.0, "1s");
    let (dir, input, db) = (s.dir.as_path(), &s.input, &s.db);
    let port = free_port();
    let cfg = std::fs::read_to_string(dir.join("sluice.toml")).unwrap();
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "{cfg}
[telemetry]
listen = \"127.0.0.1:{port}\"\n"
        ),
    )
    .unwrap();
    let mut worker = start(dir);
    wait_for_rows(db, 1, &mut worker);
    // Appended while the worker is 1-2 s behind; looked at, not read.
    let mut writer = appender(input);
    writer.write_all(lines("a", 201..=400).as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    truncate(input);
    writer.write_all(lines("b", 1..=20).as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !written_keys(db).iter().any(|k| k == "b20") {
        assert!(
            Instant::now() < deadline,
            "the lines after the cut never came"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let metrics = get(port, "/metrics");
    let log = stop(worker);

    let written: BTreeSet<String> = written_keys(db).into_iter().collect();
    let unread: Vec<u32> = (1..=400)
        .filter(|i| !written.contains(&format!("a{i}")))
        .collect();
    assert!(unread.len() > 100, "the worker was behind: {unread:?}");
    let lost: usize = unread.iter().map(|&i| lines("a", i..=i).len()).sum();
    assert!(
        log.contains(&format!("({lost} bytes)")),
        "a warning names the {lost} bytes: {log}"
    );
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("sluice_source_lost_bytes_total"))
        .unwrap_or_else(|| panic!("no lost-bytes metric: {metrics}"));
    assert_eq!(
        counted.split_whitespace().last(),
        Some(lost.to_string().as_str()),
        "{counted}"
    );
    assert!(keys("b", 1..=20).is_subset(&written));
    assert_eq!(
        written.len(),
        400 - unread.len() + 20,
        "every line read before the cut written, once"
    );
}
