//! A tiny raw HTTP server for the HTTP sink's tests (a tokio `TcpListener` writing bytes
//! by hand, so that any answer can be given: redirects, resets, answers cut short, hangs),
//! the configuration those tests share, and small clients for `/readyz` and `/metrics`.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{finish, worker, write_records};

/// What the raw server does with one request.
#[derive(Clone)]
pub enum Reply {
    /// Writes these bytes and closes the connection.
    Send(Vec<u8>),
    /// Writes these bytes (perhaps none), then resets the connection.
    SendThenReset(Vec<u8>),
    /// Answers nothing and keeps the connection open.
    Hang,
}

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The request line and headers, as sent.
    pub head: String,
    pub body: Vec<u8>,
    /// The keys of sluice's envelope in the body, if it is one.
    pub keys: Vec<String>,
    pub at: Instant,
    /// Answered with a complete 2xx: the server stored these keys.
    pub stored: bool,
    /// The connection was reset after the request was read.
    pub reset: bool,
}

pub type Handler = dyn Fn(usize, &Request) -> Reply + Send + Sync;

pub struct RawServer {
    pub port: u16,
    log: Arc<Mutex<Vec<Request>>>,
    _rt: tokio::runtime::Runtime,
}

impl RawServer {
    pub fn start(handler: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static) -> RawServer {
        Self::start_on(0, handler)
    }

    /// Listens on `port` (0: any free one); `handler` gets each request with its number.
    pub fn start_on(
        port: u16,
        handler: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static,
    ) -> RawServer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt.block_on(TcpListener::bind(("127.0.0.1", port))).unwrap();
        let port = listener.local_addr().unwrap().port();
        let log: Arc<Mutex<Vec<Request>>> = Arc::default();
        let handler: Arc<Handler> = Arc::new(handler);
        let count = Arc::new(AtomicUsize::new(0));
        let server_log = log.clone();
        rt.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, handler, count) = (server_log.clone(), handler.clone(), count.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, &log, &*handler, &count).await;
                });
            }
        });
        RawServer { port, log, _rt: rt }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }

    pub fn stored_keys(&self) -> BTreeSet<String> {
        self.requests()
            .iter()
            .filter(|r| r.stored)
            .flat_map(|r| r.keys.clone())
            .collect()
    }
}

/// Requests on one connection until it closes; each answered as `handler` says.
async fn serve(
    mut stream: TcpStream,
    log: &Mutex<Vec<Request>>,
    handler: &Handler,
    count: &AtomicUsize,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or_default().to_string();
        let path = words.next().unwrap_or_default().to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 65536];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body: Vec<u8> = buf.drain(..head_end + length).skip(head_end).collect();
        let keys = serde_json::from_slice::<Vec<serde_json::Value>>(&body)
            .map(|records| {
                records
                    .iter()
                    .map(|r| r["key"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let mut request = Request {
            method,
            path,
            head,
            body,
            keys,
            at: Instant::now(),
            stored: false,
            reset: false,
        };
        let reply = handler(count.fetch_add(1, Ordering::SeqCst), &request);
        match &reply {
            Reply::Send(bytes) => request.stored = request.method == "POST" && complete_2xx(bytes),
            Reply::SendThenReset(_) => request.reset = true,
            Reply::Hang => {}
        }
        log.lock().unwrap().push(request);
        match reply {
            Reply::Send(bytes) => {
                stream.write_all(&bytes).await?;
                stream.flush().await?;
                return Ok(());
            }
            Reply::SendThenReset(bytes) => {
                stream.write_all(&bytes).await?;
                stream.flush().await?;
                // Let the bytes leave before the reset overtakes them.
                tokio::time::sleep(Duration::from_millis(20)).await;
                stream.set_zero_linger()?;
                drop(stream);
                return Ok(());
            }
            Reply::Hang => {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Whether `bytes` is a 2xx whose body is as long as its Content-Length says.
pub fn complete_2xx(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    head.starts_with("HTTP/1.1 2") && length == Some(body.len())
}

/// A complete answer with `status` and `body`, closing the connection.
pub fn answer(status: &str, headers: &str, body: &str) -> Reply {
    Reply::Send(
        format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

pub fn ok() -> Reply {
    answer("200 OK", "", "{}")
}

/// An HTTP sink config in `dir` draining `n` records; `sink_extra` goes into `[sink]`,
/// `extra` after it.
pub fn http_config(dir: &std::path::Path, n: usize, url: &str, sink_extra: &str, extra: &str) {
    write_records(&dir.join("in.ndjson"), n, &[]);
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"http\"\n{url}\nkey = \"/id\"\nmax_batch = 20\ntimeout = \"2s\"\n{sink_extra}\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\nrecords_per_second = 2000\ntick = \"100ms\"\n\n\
             [retry]\nmin_delay = \"20ms\"\nmax_delay = \"200ms\"\nmax_attempts = 2\n\
             budget_ratio = 100.0\nbudget_min_per_second = 1000.0\n\n\
             [throttle]\nmax_pause = \"1s\"\n\n{extra}"
        ),
    )
    .unwrap();
}

pub fn all_keys(n: usize) -> BTreeSet<String> {
    (1..=n).map(|i| format!("k{i}")).collect()
}

pub fn drain(dir: &std::path::Path) -> std::process::Output {
    finish(worker(dir, true), Duration::from_secs(120))
}

pub fn get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = sluice::tls::http_client()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        match client.get(url).send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    })
}

/// Polls `url` until `want` holds for the answer; panics after `within`.
pub fn wait_for(url: &str, within: Duration, want: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let deadline = Instant::now() + within;
    loop {
        let (code, text) = get(url);
        if want(code, &text) {
            return (code, text);
        }
        assert!(Instant::now() < deadline, "{url}: last {code} {text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
