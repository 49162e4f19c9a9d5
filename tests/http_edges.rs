//! The HTTP sink against odd answers from a tiny raw server (a tokio `TcpListener` writing
//! bytes by hand): redirects, resets, answers cut short, hangs, refusals. In every case
//! either every record reaches the server in a request it answered in full, or the worker
//! keeps the records unacknowledged — a second run over the same input writes them.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the raw server does with one request.
#[derive(Clone)]
enum Reply {
    /// Writes these bytes and closes the connection.
    Send(Vec<u8>),
    /// Writes these bytes (perhaps none), then resets the connection.
    SendThenReset(Vec<u8>),
    /// Answers nothing and keeps the connection open.
    Hang,
}

#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    keys: Vec<String>,
    at: Instant,
    /// Answered with a complete 2xx: the server stored these keys.
    stored: bool,
    /// The connection was reset after the request was read.
    reset: bool,
}

type Handler = dyn Fn(usize, &Request) -> Reply + Send + Sync;

struct RawServer {
    port: u16,
    log: Arc<Mutex<Vec<Request>>>,
    _rt: tokio::runtime::Runtime,
}

impl RawServer {
    fn start(handler: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static) -> RawServer {
        Self::start_on(0, handler)
    }

    /// Listens on `port` (0: any free one); `handler` gets each request with its number.
    fn start_on(
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

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }

    fn stored_keys(&self) -> BTreeSet<String> {
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
fn complete_2xx(bytes: &[u8]) -> bool {
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
fn answer(status: &str, headers: &str, body: &str) -> Reply {
    Reply::Send(
        format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

fn ok() -> Reply {
    answer("200 OK", "", "{}")
}

/// An HTTP sink config in `dir` draining `n` records; `sink_extra` goes into `[sink]`,
/// `extra` after it.
fn http_config(dir: &std::path::Path, n: usize, url: &str, sink_extra: &str, extra: &str) {
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

fn all_keys(n: usize) -> BTreeSet<String> {
    (1..=n).map(|i| format!("k{i}")).collect()
}

fn drain(dir: &std::path::Path) -> std::process::Output {
    finish(worker(dir, true), Duration::from_secs(120))
}

#[test]
fn redirects_that_turn_a_post_into_a_get_stop_the_worker_and_acknowledge_nothing() {
    for code in ["301 Moved Permanently", "302 Found", "303 See Other"] {
        let healthy = Arc::new(AtomicBool::new(false));
        let port = Arc::new(AtomicU16::new(0));
        let (h, p) = (healthy.clone(), port.clone());
        let server = RawServer::start(move |_, r| {
            if h.load(Ordering::SeqCst) {
                ok()
            } else if r.path == "/in" {
                let to = format!(
                    "Location: http://ops:hunter2@127.0.0.1:{}/login?next=/in\r\n",
                    p.load(Ordering::SeqCst)
                );
                answer(code, &to, "")
            } else {
                // A login page: a 200 that stores nothing.
                answer("200 OK", "", "<html>login</html>")
            }
        });
        port.store(server.port, Ordering::SeqCst);
        let dir = tempfile::tempdir().unwrap();
        http_config(
            dir.path(),
            60,
            &format!("url = {:?}", server.url("/in")),
            "",
            "",
        );
        let out = drain(dir.path());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{code}: {err}");
        assert!(
            err.contains(&code[..3]),
            "{code}: names the redirect: {err}"
        );
        assert!(
            err.contains(&format!("ops:***@127.0.0.1:{}/login", server.port)),
            "{code}: names the target: {err}"
        );
        assert!(!err.contains("hunter2"), "{code}: the password is masked");
        let requests = server.requests();
        assert!(
            requests
                .iter()
                .all(|r| r.path == "/in" && r.method == "POST"),
            "{code}: the redirect is not followed: {requests:?}"
        );

        // Nothing was acknowledged: once the endpoint takes writes, all of it is written.
        healthy.store(true, Ordering::SeqCst);
        let out = drain(dir.path());
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(summary(&out)["written"], 60, "{code}");
        assert_eq!(server.stored_keys(), all_keys(60), "{code}");
    }
}

#[test]
fn a_307_or_308_is_followed_with_its_method_and_body() {
    let server = RawServer::start(|n, r| match r.path.as_str() {
        "/in" if n % 2 == 0 => answer("307 Temporary Redirect", "Location: /v2/in\r\n", ""),
        "/in" => answer("308 Permanent Redirect", "Location: /v2/in\r\n", ""),
        "/v2/in" => ok(),
        _ => answer("404 Not Found", "", ""),
    });
    let dir = tempfile::tempdir().unwrap();
    http_config(
        dir.path(),
        100,
        &format!("url = {:?}", server.url("/in")),
        "",
        "",
    );
    let out = drain(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["written"], 100);
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.method == "POST"), "{requests:?}");
    assert!(requests.iter().any(|r| r.path == "/v2/in" && r.stored));
    assert_eq!(server.stored_keys(), all_keys(100));
}

#[test]
fn resets_are_an_outage_never_blamed_on_the_records() {
    // The first twelve requests are reset: before any answer, or after the status line.
    let server = RawServer::start(|n, _| match n {
        0..12 if n % 2 == 0 => Reply::SendThenReset(Vec::new()),
        0..12 => Reply::SendThenReset(b"HTTP/1.1 200 OK\r\n".to_vec()),
        _ => ok(),
    });
    let dir = tempfile::tempdir().unwrap();
    http_config(
        dir.path(),
        100,
        &format!("url = {:?}", server.url("/in")),
        "",
        "",
    );
    let out = drain(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 100, "{s}");
    assert_eq!(s["dead_lettered"], 0, "{s}");
    assert_eq!(server.stored_keys(), all_keys(100));
    // Never split: every batch that met a reset was sent again whole.
    let requests = server.requests();
    let stored: Vec<BTreeSet<&String>> = requests
        .iter()
        .filter(|r| r.stored)
        .map(|r| r.keys.iter().collect())
        .collect();
    let resets: Vec<&Request> = requests.iter().filter(|r| r.reset).collect();
    assert_eq!(resets.len(), 12);
    for reset in resets {
        let keys: BTreeSet<&String> = reset.keys.iter().collect();
        assert!(
            stored.contains(&keys),
            "a reset batch of {} was split or dropped",
            keys.len()
        );
    }
}

#[test]
fn an_answer_cut_short_is_not_a_success() {
    // 200 with a declared length the body never reaches (reset, or a clean close), and a
    // chunked 200 reset before its last chunk: none stores anything.
    let server = RawServer::start(|n, _| match n {
        0..9 if n % 3 == 0 => Reply::SendThenReset(
            b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n{\"inserted\":".to_vec(),
        ),
        0..9 if n % 3 == 1 => Reply::Send(
            b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\nConnection: close\r\n\r\n{\"ins".to_vec(),
        ),
        0..9 => Reply::SendThenReset(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"ins\r\n".to_vec(),
        ),
        _ => ok(),
    });
    let dir = tempfile::tempdir().unwrap();
    http_config(
        dir.path(),
        100,
        &format!("url = {:?}", server.url("/in")),
        "",
        "",
    );
    let out = drain(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 100, "{s}");
    assert_eq!(s["dead_lettered"], 0, "{s}");
    assert!(server.requests().len() > 9, "the cut answers were retried");
    assert_eq!(
        server.stored_keys(),
        all_keys(100),
        "every record reached the server in a request it answered in full"
    );
}

fn get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder()
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
fn wait_for(url: &str, within: Duration, want: impl Fn(u16, &str) -> bool) -> (u16, String) {
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

#[test]
fn readyz_is_503_while_the_sink_refuses_and_200_once_it_takes_writes() {
    let sink_port = free_port();
    let telemetry = free_port();
    let dir = tempfile::tempdir().unwrap();
    http_config(
        dir.path(),
        40,
        &format!("url = \"http://127.0.0.1:{sink_port}/in\""),
        "",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{telemetry}\"\n"),
    );
    let mut child = worker(dir.path(), false);
    let readyz = format!("http://127.0.0.1:{telemetry}/readyz");
    let (_, text) = wait_for(&readyz, Duration::from_secs(30), |code, _| code != 0);
    for _ in 0..5 {
        let (code, text) = get(&readyz);
        assert_eq!(code, 503, "nothing listens on the sink's port: {text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(text.contains("sink"), "{text}");

    // The sink comes up; HEAD is not routed there (405), POST stores.
    let server = RawServer::start_on(sink_port, |_, r| {
        if r.method == "POST" {
            ok()
        } else {
            answer("405 Method Not Allowed", "", "")
        }
    });
    wait_for(&readyz, Duration::from_secs(30), |code, _| code == 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.stored_keys() != all_keys(40) {
        assert!(Instant::now() < deadline, "not all records written");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn readyz_is_503_while_every_endpoint_is_hung_refusing_or_answering_503() {
    let hung = RawServer::start(|_, _| Reply::Hang);
    let busy = RawServer::start(|_, _| answer("503 Service Unavailable", "", "busy"));
    let refused = free_port();
    let telemetry = free_port();
    let dir = tempfile::tempdir().unwrap();
    http_config(
        dir.path(),
        40,
        &format!(
            "urls = [{:?}, {:?}, \"http://127.0.0.1:{refused}/in\"]",
            hung.url("/in"),
            busy.url("/in")
        ),
        "",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{telemetry}\"\n"),
    );
    let mut child = worker(dir.path(), false);
    let readyz = format!("http://127.0.0.1:{telemetry}/readyz");
    wait_for(&readyz, Duration::from_secs(30), |code, _| code != 0);
    // Long enough for each endpoint to have been tried and probed more than once.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let (code, text) = get(&readyz);
        assert_eq!(code, 503, "{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!busy.requests().is_empty() && !hung.requests().is_empty());
}

/// The `/metrics` lines of `name` whose labels mention `port`.
fn metric_lines(text: &str, name: &str, port: u16) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(&format!("127.0.0.1:{port}")))
        .map(String::from)
        .collect()
}

fn value(line: &str) -> f64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn after_an_outage_the_healthy_endpoint_takes_the_writes_and_metrics_tell_the_truth() {
    // One endpoint hung, one answering 503 forever, one refusing for the first 12 s.
    let hung = RawServer::start(|_, _| Reply::Hang);
    let busy = RawServer::start(|_, _| answer("503 Service Unavailable", "", "busy"));
    let back_port = free_port();
    let telemetry = free_port();
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    http_config(
        dir.path(),
        n,
        &format!(
            "urls = [{:?}, {:?}, \"http://127.0.0.1:{back_port}/in\"]",
            hung.url("/in"),
            busy.url("/in")
        ),
        "",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{telemetry}\"\n"),
    );
    let text = std::fs::read_to_string(dir.path().join("sluice.toml"))
        .unwrap()
        .replace("timeout = \"2s\"", "timeout = \"1s\"");
    std::fs::write(dir.path().join("sluice.toml"), text).unwrap();
    let mut child = worker(dir.path(), false);
    std::thread::sleep(Duration::from_secs(12));
    let back_at = Instant::now();
    let back = RawServer::start_on(back_port, |_, _| ok());
    let deadline = Instant::now() + Duration::from_secs(60);
    while back.stored_keys() != all_keys(n) {
        assert!(Instant::now() < deadline, "not all records written");
        std::thread::sleep(Duration::from_millis(100));
    }
    let first = back.requests()[0].at - back_at;
    eprintln!(
        "back after refusing: first request {first:?} after it listened; the 503 endpoint got {} requests, the hung one {}",
        busy.requests().len(),
        hung.requests().len()
    );
    // throttle.max_pause is 1 s (the old backoff grew to 30 s); a batch may first wait out
    // the hung endpoint's 1 s timeout. Generous for a loaded machine, far from 30 s.
    assert!(
        first < Duration::from_secs(5),
        "the endpoint was back for {first:?} before its first request"
    );
    let (_, metrics) = get(&format!("http://127.0.0.1:{telemetry}/metrics"));
    child.kill().unwrap();
    child.wait().unwrap();

    // The hung endpoint's latency is its timeout, not the 0.1 s assumed before any answer.
    let latency = metric_lines(&metrics, "sluice_endpoint_latency_seconds", hung.port);
    assert_eq!(latency.len(), 1, "{metrics}");
    assert!(value(&latency[0]) >= 0.9, "{}", latency[0]);
    // Refusals are counted as unavailable, never as throttled.
    let back_requests = metric_lines(&metrics, "sluice_endpoint_requests_total", back_port);
    assert!(
        back_requests
            .iter()
            .any(|l| l.contains("outcome=\"unavailable\"") && value(l) >= 1.0),
        "{back_requests:?}"
    );
    assert!(
        back_requests
            .iter()
            .all(|l| !l.contains("outcome=\"throttled\"")),
        "{back_requests:?}"
    );
    let busy_requests = metric_lines(&metrics, "sluice_endpoint_requests_total", busy.port);
    assert!(
        busy_requests
            .iter()
            .all(|l| l.contains("outcome=\"throttled\"")),
        "{busy_requests:?}"
    );
}
