//! The HTTP sink against odd answers from a tiny raw server (a tokio `TcpListener` writing
//! bytes by hand): redirects, resets, answers cut short, hangs, refusals. In every case
//! either every record reaches the server in a request it answered in full, or the worker
//! keeps the records unacknowledged — a second run over the same input writes them.

use crate::common;
use crate::http_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use common::*;
use http_support::get;
use http_support::*;

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

/// 307 and 308 are followed a few hops; an endpoint redirecting on and on stops the
/// worker saying so, and where the last hop pointed (it said "a redirected POST is not
/// written", of a redirect that keeps the POST).
#[test]
fn redirects_past_the_hop_limit_say_so_and_where_the_last_pointed() {
    let server = RawServer::start(|_, r| {
        let next = match r.path.strip_prefix("/hop/") {
            Some(n) => n.parse::<u32>().unwrap() + 1,
            None => 1,
        };
        answer(
            "307 Temporary Redirect",
            &format!("Location: /hop/{next}\r\n"),
            "",
        )
    });
    let dir = tempfile::tempdir().unwrap();
    http_config(
        dir.path(),
        10,
        &format!("url = {:?}", server.url("/in")),
        "",
        "",
    );
    let out = drain(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("HTTP 307 Temporary Redirect: redirect limit reached after 3 hops; the last pointed to /hop/4"),
        "{err}"
    );
    assert!(!err.contains("is not written"), "{err}");
    let posts: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(
        posts[..4],
        ["/in", "/hop/1", "/hop/2", "/hop/3"],
        "{posts:?}"
    );
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
