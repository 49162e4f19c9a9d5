//! Dead letters against real full filesystems (/dev/full, a tiny tmpfs mounted for the
//! test) and real brokers: every record ends written or stored as a dead letter, or stays
//! unacknowledged; a letter is never counted while its store holds nothing.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use sluice::sim_sink::{SimSink, SimSinkConfig};

/// A tmpfs of `size` mounted on a temp dir for one test; unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// None (with a message saying why the test is skipped) where mounting is not allowed.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs here (needs root): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
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

fn http_config(dir: &Path, sim: &SimSink, dead_letters: &str, port: u16) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"http\"\nurl = \"{}\"\nkey = \"/id\"\n\n[sink.dead_letters]\n{dead_letters}\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n\n{RETRY}\n[shutdown]\ngrace = \"2s\"\n\n[telemetry]\nlisten = \"127.0.0.1:{port}\"\n",
            sim.ingest_url()
        ),
    )
    .unwrap();
}

async fn sim() -> SimSink {
    SimSink::start(SimSinkConfig::new(
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

/// What a full-tmpfs case runs against: the config's dead-letter section (or sink), and
/// how to count the letters stored.
enum Store {
    NdjsonFile,
    SqliteFile,
    SqliteSinkTable,
}

async fn full_tmpfs_case(store: Store) {
    let Some(fs) = Tmpfs::mount("512k") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sim = sim().await;
    // Five letters of about 40 KB: 200 KB, with 96 KB left on the filesystem.
    write_input(&dir.path().join("in.ndjson"), 20, 5, 40_000);
    let port = free_port();
    let on_tmpfs = |name: &str| fs.path().join(name).display().to_string();
    match store {
        Store::NdjsonFile => http_config(
            dir.path(),
            &sim,
            &format!("path = {:?}", on_tmpfs("dead.ndjson")),
            port,
        ),
        Store::SqliteFile => http_config(
            dir.path(),
            &sim,
            &format!("url = \"sqlite://{}\"", on_tmpfs("dead.db")),
            port,
        ),
        Store::SqliteSinkTable => std::fs::write(
            dir.path().join("sluice.toml"),
            format!(
                "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://{}\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n\n{RETRY}\n[telemetry]\nlisten = \"127.0.0.1:{port}\"\n",
                on_tmpfs("out.db")
            ),
        )
        .unwrap(),
    }
    let filler = fs.fill(96 << 10);
    let mut child = spawn_worker(dir.path());
    let d = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        wait_for_store_failure(&d, &mut child);
        assert_held(&d, &mut child, port);
        std::fs::remove_file(&filler).unwrap();
        wait_output(child)
    })
    .await
    .unwrap();
    let log = log_of(dir.path());
    assert!(out.status.success(), "{log}");
    assert_eq!(summary(&out)["dead_lettered"], 5, "{log}");
    let count = |db: PathBuf, sql: &'static str| async move {
        tokio::task::spawn_blocking(move || sqlite_count(&db, sql))
            .await
            .unwrap()
    };
    let stored = match store {
        Store::NdjsonFile => ndjson_letters(&fs.path().join("dead.ndjson")).len() as i64,
        Store::SqliteFile => {
            count(
                fs.path().join("dead.db"),
                "select count(*) from sluice_dead_letters",
            )
            .await
        }
        Store::SqliteSinkTable => {
            let db = fs.path().join("out.db");
            assert_eq!(count(db.clone(), "select count(*) from records").await, 20);
            count(db, "select count(*) from sluice_dead_letters").await
        }
    };
    assert_eq!(stored, 5, "{log}");
    if !matches!(store, Store::SqliteSinkTable) {
        assert_eq!(sim.stats().inserted, 20);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ndjson_dead_letter_file_on_a_full_tmpfs_holds_the_run_until_space_returns() {
    full_tmpfs_case(Store::NdjsonFile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_dead_letter_db_on_a_full_tmpfs_holds_the_run_until_space_returns() {
    full_tmpfs_case(Store::SqliteFile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_sink_on_a_full_tmpfs_holds_the_run_until_space_returns() {
    full_tmpfs_case(Store::SqliteSinkTable).await;
}

#[test]
fn keys_of_different_json_types_are_different_rows() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("in.ndjson"),
        "{\"id\":5}\n{\"id\":\"5\"}\n{\"id\":true}\n{\"id\":\"true\"}\n{\"id\":\"abc\"}\n{\"id\":\"\\\"5\\\"\"}\n{\"id\":5}\n",
    )
    .unwrap();
    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 6, "{s}");
    assert_eq!(
        s["duplicates"], 1,
        "only the repeated 5 is a duplicate: {s}"
    );
    let db = dir.path().join("out.db");
    for (key, n) in [
        ("5", 1),
        ("\"5\"", 1),
        ("true", 1),
        ("\"true\"", 1),
        ("abc", 1),
        ("\"\\\"5\\\"\"", 1),
    ] {
        let sql = format!(
            "select count(*) from records where key = '{}'",
            key.replace('\'', "''")
        );
        assert_eq!(sqlite_count(&db, &sql), n, "key {key}");
    }
}

#[test]
fn amqp_messages_over_max_record_bytes_are_dead_lettered_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_oversize");
    let big =
        |id: &str, mb: usize| format!("{{\"id\":\"{id}\",\"blob\":\"{}\"}}", "y".repeat(mb << 20));
    amqp_publish_bodies(
        &queue,
        &[
            "{\"id\":\"small1\"}".into(),
            big("two_mb", 2),
            "{\"id\":\"small2\"}".into(),
            big("three_mb", 3),
        ],
    );
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\nmax_record_bytes = 1048576\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n",
            amqp_url()
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 2, "{s}");
    assert_eq!(s["dead_lettered"], 2, "{s}");
    let db = dir.path().join("out.db");
    assert_eq!(sqlite_count(&db, "select count(*) from records"), 2);
    assert_eq!(
        sqlite_count(
            &db,
            "select count(*) from sluice_dead_letters where reason like 'record of 2097%bytes exceeds source.max_record_bytes (1048576)%' and length(raw) = 1048576"
        ),
        1
    );
    assert_eq!(
        sqlite_count(
            &db,
            "select count(*) from sluice_dead_letters where reason like 'record of 3145%bytes exceeds%'"
        ),
        1
    );
    assert_eq!(amqp_queue_counts(&queue), (0, 0));
}

async fn pg_exec(url: &str, sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn pg_scalar(url: &str, sql: &str) -> i64 {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// The PostgreSQL sink's own `sluice_dead_letters`, in a tablespace on a full tmpfs: the
/// rows land, the letters cannot, and nothing is acknowledged until they can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_dead_letter_table_on_a_full_tablespace_holds_the_run() {
    let Some(fs) = Tmpfs::mount("2m") else {
        return;
    };
    let chown = Command::new("chown")
        .arg("postgres")
        .arg(fs.path())
        .status()
        .unwrap();
    assert!(chown.success());
    let name = unique("sluice_dlfull");
    let admin = pg_url();
    pg_exec(
        &admin,
        &format!(
            "CREATE TABLESPACE {name} LOCATION '{}'",
            fs.path().display()
        ),
    )
    .await;
    pg_exec(&admin, &format!("CREATE DATABASE {name}")).await;
    let db_url = match admin.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => unreachable!("a database URL has a path"),
    };
    // The table as the sink creates it, but on the small filesystem (TOAST included).
    pg_exec(
        &db_url,
        &format!(
            "CREATE TABLE sluice_dead_letters (
                id bigserial PRIMARY KEY,
                fingerprint text NOT NULL UNIQUE,
                position text NOT NULL,
                key text,
                raw bytea NOT NULL,
                reason text NOT NULL,
                attempts integer NOT NULL,
                failed_at timestamptz NOT NULL DEFAULT now()
            ) TABLESPACE {name}"
        ),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_input(&dir.path().join("in.ndjson"), 20, 5, 200_000);
    let port = free_port();
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"postgres\"\nurl = \"{db_url}\"\ntable = \"records\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n\n{RETRY}\n[telemetry]\nlisten = \"127.0.0.1:{port}\"\n"
        ),
    )
    .unwrap();
    let filler = fs.fill(0);
    let mut child = spawn_worker(dir.path());
    let d = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        wait_for_store_failure(&d, &mut child);
        assert_held(&d, &mut child, port);
        std::fs::remove_file(&filler).unwrap();
        wait_output(child)
    })
    .await
    .unwrap();
    let log = log_of(dir.path());
    let rows = pg_scalar(&db_url, "select count(*) from records").await;
    let letters = pg_scalar(
        &db_url,
        "select count(*) from sluice_dead_letters where target = 'records' and length(raw) > 200000",
    )
    .await;
    let migrated = pg_scalar(
        &db_url,
        "select count(*) from information_schema.columns where table_name = 'sluice_dead_letters' and column_name in ('target','source_key','headers')",
    )
    .await;
    pg_exec(&admin, &format!("DROP DATABASE {name} WITH (FORCE)")).await;
    pg_exec(&admin, &format!("DROP TABLESPACE {name}")).await;
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("53100") || log.contains("No space left"),
        "{log}"
    );
    assert_eq!(summary(&out)["dead_lettered"], 5, "{log}");
    assert_eq!((rows, letters, migrated), (20, 5, 3), "{log}");
}
