//! Secrets planted in every form a configuration can hold them — `user:password@` in URLs,
//! `?password=` / `?token=` in query strings, an Authorization header read from the
//! environment, a Kafka SASL password — never appear in anything sluice shows: logs at
//! every level (text and JSON), `check`, `plan`, `leases`, error messages, `/metrics`,
//! `/readyz` and dead letters, with each source kind (file, Kafka, RabbitMQ) and sink kind
//! (SQLite, PostgreSQL, HTTP).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;

mod channels;

/// Every planted secret starts with this; none may be found anywhere.
const PLANTED: &str = "Pl4nted";
const PW: &str = "Pl4nted-pw-7c1";
const QS: &str = "Pl4nted-qs-93e";
const HEADER: &str = "Pl4nted-hdr-51a";
const SASL: &str = "Pl4nted-sasl-22b";

/// The SASL PLAIN response lapin's trace would print for guest/guest:
/// `\0guest\0guest` as a list of bytes.
const AMQP_LOGIN_FRAME: &str = "0, 103, 117, 101, 115, 116, 0, 103, 117, 101, 115, 116";

/// PostgreSQL here trusts local users: the planted password is accepted and ignored.
fn planted_pg_url(db_url: &str) -> String {
    let url = db_url.replacen("://postgres@", &format!("://postgres:{PW}@"), 1);
    format!("{url}?password={QS}&application_name=sluice-secrets")
}

struct Channels(Vec<(String, String)>);

impl Channels {
    fn add(&mut self, name: impl Into<String>, text: impl Into<String>) {
        self.0.push((name.into(), text.into()));
    }

    fn add_output(&mut self, name: &str, out: &Output) {
        self.add(
            format!("{name} stderr"),
            String::from_utf8_lossy(&out.stderr),
        );
        self.add(
            format!("{name} stdout"),
            String::from_utf8_lossy(&out.stdout),
        );
    }

    /// Nothing planted shows anywhere; the channels were not empty (the test could fail).
    fn assert_clean(&self) {
        for (name, text) in &self.0 {
            for needle in [PLANTED, AMQP_LOGIN_FRAME, ":guest@"] {
                assert!(
                    !text.contains(needle),
                    "{name} shows {needle:?}:\n{}",
                    excerpt(text, needle)
                );
            }
        }
        let total: usize = self.0.iter().map(|(_, t)| t.len()).sum();
        assert!(
            total > 1000,
            "the channels said almost nothing: {total} bytes"
        );
    }
}

fn excerpt(text: &str, needle: &str) -> String {
    let at = text.find(needle).unwrap_or(0);
    let start = text[..at]
        .char_indices()
        .rev()
        .nth(300)
        .map_or(0, |(i, _)| i);
    let end = (at + 300).min(text.len());
    text.get(start..end).unwrap_or(text).to_string()
}

fn traced(dir: &Path) -> Command {
    let mut cmd = sluice();
    cmd.current_dir(dir)
        .env("SLUICE_LOG", "trace")
        .env("INGEST_TOKEN", HEADER);
    cmd
}

fn get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match crate::common::http().get(url).send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    })
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every channel of one configuration: check, plan, leases, a traced daemon run with its
/// /metrics and /readyz, and a JSON-logged one-shot run.
fn collect(dir: &Path, records: u64, with_leases: bool, ch: &mut Channels) {
    let out = traced(dir)
        .args(["check", "-c", "sluice.toml"])
        .output()
        .unwrap();
    ch.add_output("check", &out);
    for args in [&["plan"][..], &["plan", "--json"]] {
        let out = traced(dir)
            .args(args)
            .args(["-c", "sluice.toml"])
            .output()
            .unwrap();
        ch.add_output(&args.join(" "), &out);
    }
    if with_leases {
        for args in [&["leases"][..], &["leases", "--json"]] {
            let out = traced(dir)
                .args(args)
                .args(["-c", "sluice.toml"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", stderr(&out));
            ch.add_output(&args.join(" "), &out);
        }
    }

    let port = free_port();
    let child = traced(dir)
        .args(["run", "-c", "sluice.toml", "--summary", "json"])
        .env("SLUICE_TELEMETRY__LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let metrics = loop {
        let (code, body) = get(&format!("{base}/metrics"));
        let settled = metric(&body, "sluice_records_written_total")
            + metric(&body, "sluice_records_duplicates_total")
            + metric(&body, "sluice_records_dead_lettered_total");
        if code == 200 && settled >= records as f64 {
            break body;
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-9", &child.id().to_string()])
                .status();
            let out = child.wait_with_output().unwrap();
            panic!("not drained: {body}\n{}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    ch.add("/metrics", metrics);
    let (_, ready) = get(&format!("{base}/readyz"));
    ch.add("/readyz", ready);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = finish(child, Duration::from_secs(60));
    ch.add_output("run (trace, text)", &out);

    let out = traced(dir)
        .args([
            "--log-format",
            "json",
            "run",
            "-c",
            "sluice.toml",
            "--until-empty",
        ])
        .args(["--summary", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    ch.add_output("run (trace, json)", &out);
}

/// Files holding raw records are created 0600, whatever the umask.
fn assert_owner_only(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{} has mode {mode:o}", path.display());
}

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

fn pg_query(url: &str, sql: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
            .await
            .unwrap();
        let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_all(&mut conn)
            .await
            .unwrap();
        rows.into_iter().map(|r| r.0).collect::<Vec<_>>().join("\n")
    })
}

fn sqlite_dump(db: &Path) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}", db.display());
        let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT position || ' ' || coalesce(key, '') || ' ' || reason FROM sluice_dead_letters",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        rows.into_iter().map(|r| r.0).collect::<Vec<_>>().join("\n")
    })
}

#[test]
fn file_into_sqlite_with_a_lease_store_holding_secrets() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 200, &[7, 70]);
    let pool = unique("secrets_pool");
    write_config(
        dir.path(),
        "in.ndjson",
        5000.0,
        &format!(
            "[leases]\nstore = {:?}\npool = {pool:?}\ncapacity = 5000\npartitions = 2\nttl = \"3s\"\nreserved = 500\n",
            planted_pg_url(&pg_url())
        ),
    );
    let mut ch = Channels(Vec::new());
    collect(dir.path(), 200, true, &mut ch);
    assert_owner_only(&dir.path().join("out.db"));
    let letters = sqlite_dump(&dir.path().join("out.db"));
    assert_eq!(letters.lines().count(), 2, "{letters}");
    ch.add("dead letters (sqlite)", letters);
    ch.assert_clean();
}

#[test]
fn file_into_postgres_endpoints_holding_secrets() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 200, &[]);
    // A row PostgreSQL refuses (NUL in jsonb text is refused) becomes a dead letter.
    let mut body = std::fs::read_to_string(dir.path().join("in.ndjson")).unwrap();
    body.push_str("{\"id\":\"nul\",\"note\":\"a\\u0000b\"}\n");
    std::fs::write(dir.path().join("in.ndjson"), body).unwrap();
    let table = unique("secrets_pg");
    let url = planted_pg_url(&pg_url());
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"postgres\"\ntable = {table:?}\nkey = \"/id\"\nurls = [{url:?}, {{ url = {url:?}, name = \"primary-b\" }}]\n[retry]\nmax_attempts = 2\n"
        ),
    )
    .unwrap();
    let mut ch = Channels(Vec::new());
    collect(dir.path(), 201, false, &mut ch);
    let metrics = &ch.0.iter().find(|(n, _)| n == "/metrics").unwrap().1;
    // Endpoints appear once written to; whichever did, by host:port or name only.
    assert!(
        metrics.contains("endpoint=\"127.0.0.1:5432\"")
            || metrics.contains("endpoint=\"primary-b\""),
        "{metrics}"
    );
    assert!(!metrics.contains("endpoint=\"postgres"), "{metrics}");
    let letters = pg_query(
        &pg_url(),
        "SELECT position || ' ' || coalesce(key, '') || ' ' || reason FROM sluice_dead_letters WHERE key = 'nul'",
    );
    assert!(!letters.is_empty(), "the refused row was dead-lettered");
    ch.add("dead letters (postgres)", letters);
    pg_exec(&pg_url(), &format!("DROP TABLE \"{table}\""));
    ch.assert_clean();
}
