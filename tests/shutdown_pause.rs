//! SIGTERM while the sink has asked for a 30 s pause (429, Retry-After: 30): the batch is
//! only waiting to be retried, so the worker stops at once, exits 0 with its summary, and
//! leaves the batch unacknowledged; the next run delivers every record.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use sluice::sim_sink::{SimSink, SimSinkConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An endpoint that answers every request `429 Too Many Requests`, `Retry-After: 30`;
/// counts the requests. Runs on its own runtime for the length of a test.
struct AlwaysThrottled {
    port: u16,
    requests: Arc<AtomicU64>,
    _rt: tokio::runtime::Runtime,
}

impl AlwaysThrottled {
    fn start() -> AlwaysThrottled {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        rt.spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    continue;
                };
                let counted = counted.clone();
                tokio::spawn(async move {
                    // One request per connection is enough: read its head and body, answer,
                    // close.
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 8192];
                    let body_at = loop {
                        let Ok(n) = conn.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        if let Some(i) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&seen[..body_at]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while seen.len() < body_at + length {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        AlwaysThrottled {
            port,
            requests,
            _rt: rt,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ingest", self.port)
    }
}

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
    let deadline = Instant::now() + Duration::from_secs(30);
    while throttled.requests.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the worker never wrote");
        assert!(child.try_wait().unwrap().is_none(), "the worker exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Well inside the 30 s pause.
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
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
        throttled.requests.load(Ordering::SeqCst),
        first["throttled"].as_u64().unwrap(),
        "no write went out after the signal"
    );

    // The rerun, against a sink that takes everything: all 300, none skipped.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sim = rt
        .block_on(SimSink::start(SimSinkConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            100_000.0,
        )))
        .unwrap();
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
    assert_eq!(summary(&out)["written"], 300, "{}", stderr(&out));
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sim = rt
        .block_on(SimSink::start(SimSinkConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            100_000.0,
        )))
        .unwrap();
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
}
