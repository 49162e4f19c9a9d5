//! HTTP endpoints that answer every request alike: one that throttles each for 30 s
//! (`429`, `Retry-After: 30`), so a worker writing to it is in a Retry-After pause once it
//! has written, and `sim-sink` taking everything, for the run after.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An endpoint that answers every request `429 Too Many Requests`, `Retry-After: 30`;
/// counts the requests. Runs on its own runtime for the length of a test.
pub struct AlwaysThrottled {
    port: u16,
    pub requests: Arc<AtomicU64>,
    _rt: tokio::runtime::Runtime,
}

impl AlwaysThrottled {
    pub fn start() -> AlwaysThrottled {
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

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ingest", self.port)
    }

    /// Waits until `worker` has written once, so that it is in the 30 s pause, and half
    /// a second more: well inside it.
    pub fn wait_until_paused(&self, worker: &mut std::process::Child) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.requests.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the worker never wrote");
            assert!(worker.try_wait().unwrap().is_none(), "the worker exited");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Sends SIGTERM to a worker.
pub fn sigterm(worker: &std::process::Child) {
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

/// `sim-sink` taking up to 100,000 records a second (all a test sends), on a runtime of its
/// own that must outlive it.
pub fn accepting_sink() -> (tokio::runtime::Runtime, sluice::sim_sink::SimSink) {
    super::sim_sink(sluice::sim_sink::SimSinkSettings::new(
        "127.0.0.1:0".parse().unwrap(),
        100_000.0,
    ))
}
