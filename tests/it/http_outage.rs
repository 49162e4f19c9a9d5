//! The HTTP sink while its endpoint fails: a gateway answering 502 or 504, or the service
//! answering 500 to every request, for seconds on end, is an outage — waited out, `/readyz`
//! not ready meanwhile, no record dead-lettered (they were, after `retry.max_attempts`, and
//! the run ended with exit 0 and the records missing). A 500 that one record provokes is
//! that record's dead letter.

use crate::common;
use crate::http_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use http_support::get;
use http_support::*;

/// A server answering `status` to every request for `outage` from its first request, then
/// taking every write.
fn failing_for(status: &'static str, outage: Duration) -> RawServer {
    let first: Arc<Mutex<Option<Instant>>> = Arc::default();
    RawServer::start(move |_, _| {
        let first = *first.lock().unwrap().get_or_insert_with(Instant::now);
        if first.elapsed() < outage {
            answer(
                status,
                "",
                "upstream connect error or disconnect/reset before headers",
            )
        } else {
            ok()
        }
    })
}

#[test]
fn seconds_of_502_504_or_500_from_every_request_dead_letter_nothing() {
    for status in [
        "502 Bad Gateway",
        "504 Gateway Timeout",
        "500 Internal Server Error",
    ] {
        let server = failing_for(status, Duration::from_secs(5));
        let telemetry = free_port();
        let dir = tempfile::tempdir().unwrap();
        let n = 200;
        http_config(
            dir.path(),
            n,
            &format!("url = {:?}", server.url("/in")),
            "",
            &format!("[telemetry]\nlisten = \"127.0.0.1:{telemetry}\"\n"),
        );
        let child = worker(dir.path(), true);
        // Not ready while the endpoint fails, and saying why.
        let readyz = format!("http://127.0.0.1:{telemetry}/readyz");
        let deadline = Instant::now() + Duration::from_secs(30);
        let why = loop {
            let (code, text) = get(&readyz);
            if code == 503 && text.contains(&status[..3]) || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = finish(child, Duration::from_secs(120));
        assert!(
            why.starts_with("sink unreachable") && why.contains(&status[..3]),
            "{status}: {why}"
        );
        assert!(out.status.success(), "{status}: {}", stderr(&out));
        let s = summary(&out);
        assert_eq!(s["written"], n as u64, "{status}: {s}");
        assert_eq!(s["dead_lettered"], 0, "{status}: {s}");
        assert_eq!(server.stored_keys(), all_keys(n), "{status}");
        let failed = server.requests().iter().filter(|r| !r.stored).count();
        assert!(
            failed > 4,
            "{status}: the outage was met ({failed} failed requests)"
        );
    }
}

/// The endpoint crashes on one record's content: that record is dead-lettered with the
/// answer, its neighbours land.
#[test]
fn a_500_one_record_provokes_dead_letters_that_record_only() {
    let server = RawServer::start(|_, r| {
        if String::from_utf8_lossy(&r.body).contains("\"k17\"") {
            answer("500 Internal Server Error", "", "NullPointerException")
        } else {
            ok()
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let n = 100;
    http_config(
        dir.path(),
        n,
        &format!("url = {:?}", server.url("/in")),
        "",
        "",
    );
    let out = drain(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], n as u64 - 1, "{s}");
    assert_eq!(s["dead_lettered"], 1, "{s}");
    let letters = std::fs::read_to_string(dir.path().join("dead.ndjson")).unwrap();
    let letter: serde_json::Value = serde_json::from_str(letters.trim()).unwrap();
    assert_eq!(letter["key"], "k17");
    assert_eq!(
        letter["reason"],
        "gave up after 2 attempts: HTTP 500 Internal Server Error: NullPointerException (the sink took other records meanwhile)"
    );
    let mut expected = all_keys(n);
    expected.remove("k17");
    assert_eq!(server.stored_keys(), expected);
}
