//! Helpers shared by the integration tests: configs in temp dirs, the real binary, and
//! direct reads of the sink database.
#![allow(dead_code)]

pub mod pg;
pub mod redis;
pub mod throttled;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Drain the config in the current directory once, with the JSON summary.
pub const DRAIN: &[&str] = &[
    "run",
    "-c",
    "sluice.toml",
    "--until-empty",
    "--summary",
    "json",
];

pub fn sluice() -> Command {
    sluice_at(env!("CARGO_BIN_EXE_sluice"))
}

/// [`sluice`] with another build of it (a release build, for a test of many processes).
pub fn sluice_at(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("SLUICE_LOG", "warn")
        .env_remove("SLUICE_RATE__RECORDS_PER_SECOND")
        .stdin(Stdio::null());
    cmd
}

/// Runs `sluice` with `args` in `dir`; returns the output.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    sluice()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("sluice runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no summary; stderr: {}", stderr(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("summary {line:?}: {e}"))
}

/// Writes `n` NDJSON records keyed `/id` = `k{i}`; lines listed in `bad` (1-based) are
/// malformed JSON instead.
pub fn write_records(path: &Path, n: usize, bad: &[usize]) {
    let mut body = String::with_capacity(n * 60);
    for i in 1..=n {
        if bad.contains(&i) {
            body.push_str(&format!("{{\"id\": \"k{i}\", \"broken\": \n"));
        } else {
            body.push_str(&format!(
                "{{\"id\":\"k{i}\",\"n\":{i},\"note\":\"record number {i}\"}}\n"
            ));
        }
    }
    std::fs::write(path, body).unwrap();
}

/// A file → SQLite config in `dir`; `extra` is appended (more tables or keys).
pub fn write_config(dir: &Path, input: &str, rate: f64, extra: &str) -> PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!(
            "[source]\nkind = \"file\"\npath = {input:?}\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\ntable = \"records\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = {rate}\ntick = \"200ms\"\n{extra}"
        ),
    )
    .unwrap();
    path
}

/// Reads one integer from the SQLite database at `db`.
pub fn sqlite_count(db: &Path, sql: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}", db.display());
        let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        n
    })
}

pub fn amqp_url() -> String {
    std::env::var("SLUICE_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A queue name no other test uses.
pub fn unique(prefix: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// Publishes `n` persistent JSON messages `{"id":"k{i}"}` with publisher confirms.
pub fn amqp_publish(queue: &str, n: usize) {
    let bodies: Vec<String> = (0..n)
        .map(|i| format!("{{\"id\":\"k{i}\",\"n\":{i}}}"))
        .collect();
    amqp_publish_bodies(queue, &bodies);
}

/// Publishes the bodies to a durable queue (declared if missing), persistent, with
/// publisher confirms awaited once all are sent.
pub fn amqp_publish_bodies(queue: &str, bodies: &[String]) {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;
    use lapin::{BasicProperties, Connection, ConnectionProperties};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .unwrap();
        let ch = conn.create_channel().await.unwrap();
        ch.queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let mut confirms = Vec::with_capacity(bodies.len());
        for body in bodies {
            let c = ch
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .unwrap();
            confirms.push(c);
        }
        for c in confirms {
            assert!(c.await.unwrap().is_ack());
        }
        conn.close(200, "done".into()).await.unwrap();
    });
}

/// Messages ready + unacknowledged in `queue`, from rabbitmqctl.
pub fn amqp_queue_counts(queue: &str) -> (u64, u64) {
    let out = Command::new("rabbitmqctl")
        .args([
            "-q",
            "list_queues",
            "name",
            "messages_ready",
            "messages_unacknowledged",
        ])
        .output()
        .expect("rabbitmqctl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 && f[0] == queue {
            return (f[1].parse().unwrap(), f[2].parse().unwrap());
        }
    }
    panic!("queue {queue} not listed: {text}");
}

pub fn pg_url() -> String {
    std::env::var("SLUICE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/sluice_test".into())
}

/// A TCP relay to a real server that a test can cut (existing connections dropped, new
/// ones refused) and restore — an outage of that server for this test alone — or freeze:
/// every connection, live or made meanwhile, stays open and passes nothing for good (a
/// host that stopped answering; TCP notices nothing), until thawed for new ones.
pub struct CuttableRelay {
    pub port: u16,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _rt: tokio::runtime::Runtime,
}

impl CuttableRelay {
    pub fn start(target: &str) -> CuttableRelay {
        use std::sync::atomic::{AtomicBool, Ordering};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let up = std::sync::Arc::new(AtomicBool::new(true));
        let frozen = std::sync::Arc::new(AtomicBool::new(false));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = target.to_string();
        let up_accept = up.clone();
        let frozen_accept = frozen.clone();
        let until = |flag: std::sync::Arc<AtomicBool>, is: bool| async move {
            while flag.load(Ordering::SeqCst) != is {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        };
        rt.spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if !up_accept.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection closed at once
                }
                let target = target.clone();
                let up_conn = up_accept.clone();
                let frozen_conn = frozen_accept.clone();
                tokio::spawn(async move {
                    if frozen_conn.load(Ordering::SeqCst) {
                        return until(up_conn, false).await; // held open until cut
                    }
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let relay = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                    tokio::select! {
                        _ = relay => {}
                        _ = until(up_conn.clone(), false) => {}
                        // Both ends stay open, passing nothing, until cut.
                        _ = until(frozen_conn, true) => until(up_conn, false).await,
                    }
                });
            }
        });
        CuttableRelay {
            port,
            up,
            frozen,
            _rt: rt,
        }
    }

    /// Drops every live connection and refuses new ones.
    pub fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Every connection, live or new, passes nothing from now on and stays open.
    pub fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// New connections pass again; the frozen ones stay as they are.
    pub fn thaw(&self) {
        self.frozen
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `sluice run -c sluice.toml --summary json` in `dir`, stdout and stderr captured.
pub fn worker(dir: &Path, until_empty: bool) -> std::process::Child {
    let mut args = vec!["run", "-c", "sluice.toml", "--summary", "json"];
    if until_empty {
        args.push("--until-empty");
    }
    sluice()
        .current_dir(dir)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits at most `within` for a worker; kills it and fails with its stderr if it runs on.
pub fn finish(mut child: std::process::Child, within: std::time::Duration) -> Output {
    let deadline = std::time::Instant::now() + within;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("worker did not finish in {within:?}: {}", stderr(&out));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Runs a future to completion on a runtime of its own.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Waits for `done`, polling every 50 ms, failing after `within`.
pub fn poll(within: std::time::Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// An HTTP client as the worker builds them (reqwest has no crypto provider of its own).
pub fn http() -> reqwest::Client {
    sluice::tls::http_client().build().unwrap()
}

/// The body of a GET to `url`; empty when it cannot be reached.
pub fn get(url: &str) -> String {
    block_on(async {
        match http().get(url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    })
}

/// `sim-sink` with `config`, on a runtime of its own that must outlive it.
pub fn sim_sink(
    config: sluice::sim_sink::SimSinkSettings,
) -> (tokio::runtime::Runtime, sluice::sim_sink::SimSink) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sim = rt
        .block_on(sluice::sim_sink::SimSink::start(config))
        .unwrap();
    (rt, sim)
}

/// The entries of the checkpoint sluice keeps beside the file input `input` (one per file
/// it is reading: offset, the number of the line there counted from 1, fingerprint).
pub fn checkpoint_files(input: &Path) -> Vec<serde_json::Value> {
    let mut name = input.as_os_str().to_owned();
    name.push(".sluice-checkpoint");
    let text = std::fs::read_to_string(&name)
        .unwrap_or_else(|e| panic!("{}: {e}", Path::new(&name).display()));
    let cp: serde_json::Value = serde_json::from_str(&text).unwrap();
    cp["files"]
        .as_array()
        .expect("a checkpoint's files")
        .clone()
}

/// Every Markdown file of the documentation: the README, ARCHITECTURE.md, the book.
pub fn documentation_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md")];
    walk(Path::new("docs"), &mut files);
    files.sort();
    files
}
