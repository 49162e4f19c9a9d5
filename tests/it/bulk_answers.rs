//! The Elasticsearch sink against in-test `_bulk` servers that answer as a cluster would,
//! or as a proxy or an imitation server might: items in another order, another number of
//! them, a missing index for one document, minutes of 502. Whatever the answer, no
//! document is counted written that the server did not take, and every one lands once
//! the answers can be believed.

use crate::common;
use crate::http_support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use http_support::*;
use serde_json::{Value, json};

/// The actions of a `_bulk` body: (index, id) of each.
fn actions(body: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(body)
        .lines()
        .step_by(2)
        .map(|line| {
            let action: Value = serde_json::from_str(line).unwrap();
            let target = &action["create"];
            (
                target["_index"].as_str().unwrap().to_string(),
                target["_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn created(index: &str, id: &str) -> Value {
    json!({"create": {"_index": index, "_id": id, "_version": 1, "result": "created", "status": 201}})
}

fn refused(index: &str, id: &str) -> Value {
    json!({"create": {"_index": index, "_id": id, "status": 429,
        "error": {"type": "es_rejected_execution_exception", "reason": "rejected execution"}}})
}

fn bulk_answer(items: &[Value]) -> Reply {
    let errors = items.iter().any(|i| i["create"]["status"] != 201);
    answer(
        "200 OK",
        "Content-Type: application/json\r\n",
        &json!({"took": 1, "errors": errors, "items": items}).to_string(),
    )
}

/// What a server stored: each (index, id) with the times it was stored.
#[derive(Default)]
struct Store(Mutex<Vec<(String, String)>>);

impl Store {
    /// Stores (or, for an id already there, answers 409) each action; returns the items.
    fn take(&self, actions: &[(String, String)], refuse: impl Fn(usize) -> bool) -> Vec<Value> {
        let mut stored = self.0.lock().unwrap();
        actions
            .iter()
            .enumerate()
            .map(|(i, (index, id))| {
                if refuse(i) {
                    return refused(index, id);
                }
                if stored.iter().any(|(x, y)| x == index && y == id) {
                    return json!({"create": {"_index": index, "_id": id, "status": 409,
                        "error": {"type": "version_conflict_engine_exception", "reason": "exists"}}});
                }
                stored.push((index.clone(), id.clone()));
                created(index, id)
            })
            .collect()
    }

    fn ids(&self) -> BTreeSet<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, id)| id.clone())
            .collect()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// The HTTP tests' configuration, as an Elasticsearch sink writing to `index`.
fn es_config(dir: &std::path::Path, n: usize, url: &str, index: &str) {
    http_config(dir, n, &format!("url = {url:?}"), "", "");
    let text = std::fs::read_to_string(dir.join("sluice.toml"))
        .unwrap()
        .replace("kind = \"http\"", "kind = \"elasticsearch\"")
        .replace(
            "[sink.dead_letters]",
            &format!("[sink.elasticsearch]\nindex = {index:?}\n\n[sink.dead_letters]"),
        );
    std::fs::write(dir.join("sluice.toml"), text).unwrap();
}

/// A proxy answering the items in reverse order, with a twentieth refused: read by
/// position, 223 of 5,000 documents went missing while counted written. Now no answer is
/// believed: nothing is acknowledged, and after `retry.max_attempts` such answers the
/// worker stops; a rerun through a faithful server writes every document once.
#[test]
fn items_in_another_order_are_believed_for_no_document() {
    let store = Arc::new(Store::default());
    let faithful = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s, f) = (store.clone(), faithful.clone());
    let server = RawServer::start(move |n, r| {
        let actions = actions(&r.body);
        let mut items = s.take(&actions, |i| (n * 7 + i) % 20 == 0);
        if !f.load(Ordering::SeqCst) {
            items.reverse();
        }
        bulk_answer(&items)
    });
    let dir = tempfile::tempdir().unwrap();
    let n = 600;
    es_config(dir.path(), n, &server.url(""), "orders");
    let out = drain(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not in the order of the actions"), "{err}");
    assert!(err.contains("could not be matched"), "{err}");
    let s = summary(&out);
    assert_eq!(
        s["written"], 0,
        "nothing counted written from a misplaced answer: {s}"
    );
    assert_eq!(s["dead_lettered"], 0, "{s}");

    faithful.store(true, Ordering::SeqCst);
    let out = drain(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    let settled = s["written"].as_u64().unwrap() + s["duplicates"].as_u64().unwrap();
    assert_eq!(settled, n as u64, "{s}");
    assert_eq!(store.ids(), all_keys(n), "every document stored");
    assert_eq!(store.len(), n, "each once");
}

/// An imitation server that reorders its first two answers only: they are sent again,
/// and every document lands once, counted once.
#[test]
fn a_few_misplaced_answers_are_sent_again_and_nothing_is_lost() {
    let store = Arc::new(Store::default());
    let s = store.clone();
    let server = RawServer::start(move |n, r| {
        let actions = actions(&r.body);
        let mut items = s.take(&actions, |i| i % 20 == 3);
        if n < 2 {
            items.reverse();
        }
        if n == 2 {
            items.pop();
        }
        bulk_answer(&items)
    });
    let dir = tempfile::tempdir().unwrap();
    let n = 400;
    es_config(dir.path(), n, &server.url(""), "orders");
    // Whole ticks from the first (ten requests of 20 at once), so that the three answers
    // it garbles belong to three batches: in slow start's first ticks of 20 and 5 the
    // first batch's resend is the third answer, and a batch garbled twice in a row is a
    // sink that cannot be believed (`retry.max_attempts` = 2), which stops the worker.
    let config = dir.path().join("sluice.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("[throttle]\n", "[throttle]\nslow_start = false\n"),
    )
    .unwrap();
    let out = drain(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    let settled = s["written"].as_u64().unwrap() + s["duplicates"].as_u64().unwrap();
    assert_eq!(settled, n as u64, "{s}");
    assert_eq!(s["dead_lettered"], 0, "{s}");
    assert_eq!(store.ids(), all_keys(n));
    assert_eq!(store.len(), n);
}

/// `index = "orders-{/day}"`: one record's day has no index (and the cluster does not
/// create one). It stopped the worker with its batch-mates unsettled; it is that record's
/// dead letter, with the cluster's reason, and the rest land.
#[test]
fn a_document_whose_index_does_not_exist_is_dead_lettered_and_the_rest_written() {
    let store = Arc::new(Store::default());
    let s = store.clone();
    let server = RawServer::start(move |_, r| {
        let actions = actions(&r.body);
        let mut items = s.take(&actions, |_| false);
        for (item, (index, id)) in items.iter_mut().zip(&actions) {
            if index == "orders-1999.12.31" {
                s.0.lock().unwrap().retain(|(x, _)| x != index);
                *item = json!({"create": {"_index": index, "_id": id, "status": 404,
                    "error": {"type": "index_not_found_exception",
                        "reason": format!("no such index [{index}]"), "index": index}}});
            }
        }
        bulk_answer(&items)
    });
    let dir = tempfile::tempdir().unwrap();
    let n = 200;
    es_config(dir.path(), n, &server.url(""), "orders-{/day}");
    // Every record names its day; k77's has no index.
    let mut text = String::new();
    for i in 1..=n {
        let day = if i == 77 { "1999.12.31" } else { "2026.01.15" };
        text.push_str(&format!("{{\"id\":\"k{i}\",\"day\":\"{day}\"}}\n"));
    }
    std::fs::write(dir.path().join("in.ndjson"), text).unwrap();
    let out = drain(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], n as u64 - 1, "{s}");
    assert_eq!(s["dead_lettered"], 1, "{s}");
    let letters = std::fs::read_to_string(dir.path().join("dead.ndjson")).unwrap();
    let letter: Value = serde_json::from_str(letters.lines().next().unwrap()).unwrap();
    assert_eq!(letter["key"], "k77");
    assert_eq!(
        letter["reason"],
        "HTTP 404 index_not_found_exception: no such index [orders-1999.12.31]"
    );
    let mut expected = all_keys(n);
    expected.remove("k77");
    assert_eq!(store.ids(), expected);
}

/// Every `_bulk` request answered 502 by the gateway in front of the cluster for 6 s: an
/// outage, not the documents' fault (they were dead-lettered after `max_attempts`).
#[test]
fn a_gateway_answering_502_for_a_while_costs_no_document() {
    let store = Arc::new(Store::default());
    let started: Arc<Mutex<Option<Instant>>> = Arc::default();
    let requests = Arc::new(AtomicUsize::new(0));
    let (s, t, c) = (store.clone(), started.clone(), requests.clone());
    let server = RawServer::start(move |_, r| {
        c.fetch_add(1, Ordering::SeqCst);
        let first = *t.lock().unwrap().get_or_insert_with(Instant::now);
        if first.elapsed() < Duration::from_secs(6) {
            return answer("502 Bad Gateway", "", "<html>502 Bad Gateway</html>");
        }
        bulk_answer(&s.take(&actions(&r.body), |_| false))
    });
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    es_config(dir.path(), n, &server.url(""), "orders");
    let out = drain(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], n as u64, "{s}");
    assert_eq!(s["dead_lettered"], 0, "{s}");
    assert_eq!(store.ids(), all_keys(n));
    // http_config's retry.max_attempts is 2: it did not bound the attempts.
    assert!(requests.load(Ordering::SeqCst) > 4);
}
