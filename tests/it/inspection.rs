//! `check`, `plan` and `leases` inspect and change nothing: on a fresh target they leave no
//! file, table or queue behind. `check` reaches everything `run` needs, each probe within
//! its timeout, and a failure names the endpoint.

use crate::common;

use std::net::TcpListener;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;

fn pg_exec(url: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut conn)
            .await
            .unwrap();
    });
}

fn pg_tables(url: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
            .await
            .unwrap();
        let (n,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        n
    })
}

/// A database of this test's own, dropped at the end.
struct FreshDb {
    name: String,
    url: String,
}

impl FreshDb {
    fn new() -> FreshDb {
        let name = unique("sluice_fresh");
        pg_exec(&pg_url(), &format!("CREATE DATABASE \"{name}\""));
        let url = pg_url().replace("/sluice_test", &format!("/{name}"));
        assert_ne!(
            url,
            pg_url(),
            "SLUICE_TEST_PG_URL names the sluice_test database"
        );
        FreshDb { name, url }
    }
}

impl Drop for FreshDb {
    fn drop(&mut self) {
        pg_exec(
            &pg_url(),
            &format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name),
        );
    }
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn inspect(dir: &Path, config: &str) -> Vec<Output> {
    let commands: [&[&str]; 5] = [
        &["check"],
        &["plan"],
        &["plan", "--json"],
        &["leases"],
        &["leases", "--json"],
    ];
    commands
        .iter()
        .map(|args| {
            sluice()
                .current_dir(dir)
                .args(*args)
                .args(["-c", config])
                .output()
                .unwrap()
        })
        .collect()
}

#[test]
fn inspection_leaves_no_file_or_table_behind_on_a_fresh_target() {
    let db = FreshDb::new();
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 10, &[]);
    let leases = format!(
        "[leases]\nstore = {:?}\npool = \"fresh\"\ncapacity = 100\npartitions = 2\n",
        db.url
    );
    std::fs::write(
        dir.path().join("sqlite.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\n{leases}"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("postgres.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"postgres\"\nurl = {:?}\n{leases}",
            db.url
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("http.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"http\"\nurl = \"http://127.0.0.1:{}/in\"\n[sink.dead_letters]\nurl = \"sqlite://dead.db\"\n{leases}",
            free_port()
        ),
    )
    .unwrap();
    let before = files_in(dir.path());
    for config in ["sqlite.toml", "postgres.toml", "http.toml"] {
        let outs = inspect(dir.path(), config);
        let check = stderr(&outs[0]);
        if config == "http.toml" {
            assert_eq!(outs[0].status.code(), Some(1), "{check}");
        } else {
            assert!(outs[0].status.success(), "{config}: {check}");
            assert!(
                check.contains("run creates") || check.contains("will be created"),
                "{check}"
            );
        }
        for out in &outs[1..] {
            assert!(out.status.success(), "{config}: {}", stderr(out));
        }
        assert!(
            String::from_utf8_lossy(&outs[3].stdout).contains("(free)"),
            "an empty pool reads as free"
        );
        assert_eq!(files_in(dir.path()), before, "{config} left a file");
        assert_eq!(pg_tables(&db.url), 0, "{config} left a table");
    }
    // The same target is then used for real: run creates what check said it would.
    let out = run_in(dir.path(), &["run", "-c", "postgres.toml", "--until-empty"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        pg_tables(&db.url) >= 3,
        "records, dead letters and leases tables"
    );
}

#[test]
fn check_declares_no_queue() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_check_fresh");
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\n",
            amqp_url()
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("run declares it"), "{err}");
    let listed = std::process::Command::new("rabbitmqctl")
        .args(["-q", "list_queues", "name"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&queue));
    assert_eq!(files_in(dir.path()), ["sluice.toml"]);
}

/// A TCP listener that accepts connections and never says a word.
fn silent_listener() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    port
}

fn checked_within(dir: &Path, body: &str, port: u16, what: &str) {
    std::fs::write(dir.join("probe.toml"), body).unwrap();
    let began = Instant::now();
    let out = sluice()
        .current_dir(dir)
        .args(["check", "-c", "probe.toml", "--timeout", "2s"])
        .output()
        .unwrap();
    let took = began.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("FAIL") && l.contains(&format!("127.0.0.1:{port}"))),
        "{what}: the failure names the endpoint: {err}"
    );
    // 2 s for the probe, the rest for starting the process and the other probes.
    assert!(
        took < Duration::from_secs(6),
        "{what}: took {took:?}: {err}"
    );
}

#[test]
fn check_fails_within_its_timeout_naming_each_unreachable_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    let file = "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n";
    let sqlite = "[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\n";
    for (kind, port) in [("closed", free_port()), ("silent", silent_listener())] {
        let http = format!(
            "{file}[sink]\nkind = \"http\"\nurl = \"http://127.0.0.1:{port}/in\"\n[sink.dead_letters]\npath = \"d.ndjson\"\n"
        );
        checked_within(dir.path(), &http, port, &format!("{kind} http sink"));
        let pg = pg_url().replace(":5432/", &format!(":{port}/"));
        let postgres = format!("{file}[sink]\nkind = \"postgres\"\nurl = {pg:?}\n");
        checked_within(
            dir.path(),
            &postgres,
            port,
            &format!("{kind} postgres sink"),
        );
        let leases = format!(
            "{file}{sqlite}[leases]\nstore = {pg:?}\npool = \"p\"\ncapacity = 10\npartitions = 1\n"
        );
        checked_within(dir.path(), &leases, port, &format!("{kind} lease store"));
        let amqp = amqp_url().replace(":5672/", &format!(":{port}/"));
        let source = format!("[source]\nkind = \"amqp\"\nurl = {amqp:?}\nqueue = \"q\"\n{sqlite}");
        checked_within(dir.path(), &source, port, &format!("{kind} amqp source"));
    }
    assert!(!dir.path().join("out.db").exists());
}

#[test]
fn an_unusable_checkpoint_directory_is_named_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(dir.path(), "in.ndjson", 100.0, "");
    let body = std::fs::read_to_string(dir.path().join("sluice.toml"))
        .unwrap()
        .replace(
            "path = \"in.ndjson\"",
            "path = \"in.ndjson\"\ncheckpoint = \"no/such/dir/cp\"",
        );
    std::fs::write(dir.path().join("sluice.toml"), body).unwrap();
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("FAIL  checkpoint no/such/dir/cp"), "{err}");
    let out = run_in(dir.path(), &["run", "-c", "sluice.toml", "--until-empty"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("source.checkpoint") && err.contains("no/such/dir"),
        "{err}"
    );
    assert!(!dir.path().join("out.db").exists(), "nothing was written");
}
