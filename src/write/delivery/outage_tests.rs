//! Outages and failures nobody explains, under tokio's paused clock, with each answer read
//! as the HTTP sink reads it: minutes of 502, 504 or 500 dead-letter nothing and everything
//! lands once the endpoint is back; a record that makes the endpoint fail is dead-lettered
//! only on evidence; answers that cannot be matched acknowledge nothing.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use super::tests::{delivery_with, keep_dead_letters, rows, rows_marked};
use super::*;
use crate::config::RetrySettings;
use crate::sink::ItemOutcome;
use crate::sink::http::response::classify;

const OUTAGE: Duration = Duration::from_secs(120);

type Script = dyn Fn(Duration, &[Row]) -> u16 + Send + Sync;

/// An endpoint following a script: the status of each request, from the time since the
/// test began and the rows it carries; 200 stores them. Other answers are read as the
/// HTTP sink reads them.
struct Scripted {
    began: Instant,
    script: Box<Script>,
    /// (when, rows) of each request.
    requests: Mutex<Vec<(Duration, usize)>>,
    stored: Mutex<Vec<String>>,
    dead: Mutex<Vec<(String, String)>>,
}

impl Scripted {
    fn new(script: impl Fn(Duration, &[Row]) -> u16 + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Scripted {
            began: Instant::now(),
            script: Box::new(script),
            requests: Mutex::default(),
            stored: Mutex::default(),
            dead: Mutex::default(),
        })
    }

    /// Each key stored, once, sorted.
    fn stored(&self) -> Vec<String> {
        let mut keys = self.stored.lock().unwrap().clone();
        keys.sort();
        keys.dedup();
        keys
    }

    fn requests_between(&self, from: Duration, to: Duration) -> usize {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .count()
    }
}

#[async_trait]
impl Sink for Scripted {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let at = self.began.elapsed();
        let status = (self.script)(at, rows);
        self.requests.lock().unwrap().push((at, rows.len()));
        tokio::time::sleep(Duration::from_millis(5)).await;
        if status == 200 {
            self.stored
                .lock()
                .unwrap()
                .extend(rows.iter().map(|r| r.key.clone()));
            return WriteOutcome::Written {
                inserted: rows.len() as u64,
                duplicates: 0,
            };
        }
        classify(
            StatusCode::from_u16(status).unwrap(),
            &HeaderMap::new(),
            b"upstream unavailable",
            rows.len(),
            SystemTime::now(),
            Duration::from_secs(30),
        )
    }

    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        keep_dead_letters(&self.dead, letters)
    }
}

fn all_keys(n: usize) -> Vec<String> {
    let mut keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
    keys.sort();
    keys
}

/// Few attempts, so that blaming the records for an outage would show at once.
fn few_attempts() -> RetrySettings {
    RetrySettings {
        max_attempts: 3,
        ..RetrySettings::default()
    }
}

fn deliver_to(sink: Arc<dyn Sink>, rows: Vec<Row>) -> tokio::task::JoinHandle<DeliveryResult> {
    let d = delivery_with(sink, few_attempts(), Arc::new(Stats::default()));
    tokio::spawn(async move {
        d.deliver(Batch {
            rows,
            dead: vec![],
            positions: vec![Position {
                lane: 0,
                start: 0,
                end: 1,
            }],
        })
        .await
    })
}

type DeliveryResult = Result<Vec<Position>, FatalSinkError>;

#[tokio::test(start_paused = true)]
async fn two_minutes_of_502_504_or_500_dead_letter_nothing_and_everything_lands_after() {
    for status in [502, 504, 500] {
        let sink = Scripted::new(move |at, _| if at < OUTAGE { status } else { 200 });
        let acked = deliver_to(sink.clone(), rows(200, &[]))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(acked.len(), 1, "HTTP {status}: the batch settled");
        assert!(
            sink.dead.lock().unwrap().is_empty(),
            "HTTP {status}: {:?}",
            sink.dead.lock().unwrap()
        );
        assert_eq!(sink.stored(), all_keys(200), "HTTP {status}");
        // The outage backoff paces the attempts (at least retry.min_delay apart), and
        // the batch is not shredded: few requests carry it once the endpoint is back.
        let during = sink.requests_between(Duration::ZERO, OUTAGE);
        let after = sink.requests_between(OUTAGE, OUTAGE * 10);
        assert!(
            during <= 1200,
            "HTTP {status}: {during} requests in 2 minutes"
        );
        assert!(
            after <= 40,
            "HTTP {status}: {after} requests after the outage"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_record_that_makes_the_endpoint_fail_is_dead_lettered_and_the_rest_written() {
    let poisoned = |_: Duration, rows: &[Row]| {
        if rows.iter().any(|r| r.payload.contains("poison")) {
            500
        } else {
            200
        }
    };
    let sink = Scripted::new(poisoned);
    deliver_to(sink.clone(), rows_marked(100, &[37], "poison"))
        .await
        .unwrap()
        .unwrap();
    let dead = sink.dead.lock().unwrap().clone();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].0, "k37");
    assert_eq!(
        dead[0].1,
        "gave up after 3 attempts: HTTP 500 Internal Server Error: upstream unavailable (the sink took other records meanwhile)"
    );
    let mut expected = all_keys(100);
    expected.retain(|k| k != "k37");
    assert_eq!(sink.stored(), expected);
    let requests = sink.requests.lock().unwrap().len();
    assert!(
        requests < 60,
        "halved down to the record: {requests} requests"
    );

    // The record last in its batch, with no neighbour left to give evidence: a record the
    // sink took goes again first, as a canary.
    let sink = Scripted::new(poisoned);
    deliver_to(sink.clone(), rows_marked(2, &[1], "poison"))
        .await
        .unwrap()
        .unwrap();
    let dead = sink.dead.lock().unwrap().clone();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].0, "k1");
    let sent_k0 = sink.stored.lock().unwrap().len();
    assert!(sent_k0 >= 3, "k0 went again as a canary: {sent_k0} times");
}

/// With nothing the endpoint takes, a record it fails on cannot be told from an outage:
/// it waits, not dead-lettered, however long.
#[tokio::test(start_paused = true)]
async fn a_lone_record_the_endpoint_fails_on_waits_as_in_an_outage() {
    let sink = Scripted::new(|_, _| 500);
    let task = deliver_to(sink.clone(), rows_marked(1, &[0], "poison"));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(!task.is_finished());
    assert!(sink.dead.lock().unwrap().is_empty());
    let requests = sink.requests.lock().unwrap().len();
    assert!(requests <= 6000, "{requests} requests in 10 minutes");
    task.abort();
}

/// A service that starts failing: a 500, a write that goes through, then 500 for every
/// request for two minutes. The write that went through is no evidence against the
/// records caught in the outage that followed.
#[tokio::test(start_paused = true)]
async fn an_endpoint_that_degrades_from_some_500s_to_all_costs_no_record() {
    let n = Arc::new(AtomicUsize::new(0));
    let sink = Scripted::new(move |at, _| match n.fetch_add(1, Ordering::SeqCst) {
        0 => 500,
        1 => 200,
        _ if at < OUTAGE => 500,
        _ => 200,
    });
    deliver_to(sink.clone(), rows(64, &[]))
        .await
        .unwrap()
        .unwrap();
    assert!(
        sink.dead.lock().unwrap().is_empty(),
        "{:?}",
        sink.dead.lock().unwrap()
    );
    assert_eq!(sink.stored(), all_keys(64));
}

/// A bulk endpoint answering item by item: `unavailable` rows get 503 (their shard is
/// down) and `failing` rows 500 until the outage ends; rows marked "poison" get 500
/// always.
struct ItemScripted {
    began: Instant,
    every_item_fails: bool,
    stored: Mutex<Vec<String>>,
    dead: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl Sink for ItemScripted {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let down = self.began.elapsed() < OUTAGE;
        let items = rows
            .iter()
            .map(|r| {
                if r.payload.contains("poison") {
                    ItemOutcome::Failed("HTTP 500 null_pointer_exception".into())
                } else if down && r.payload.contains("shard") {
                    ItemOutcome::Unavailable("HTTP 503 unavailable_shards_exception".into())
                } else if down && self.every_item_fails {
                    ItemOutcome::Failed("HTTP 500 node failing".into())
                } else {
                    self.stored.lock().unwrap().push(r.key.clone());
                    ItemOutcome::Written
                }
            })
            .collect();
        WriteOutcome::from_items(items, None, None)
    }

    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        keep_dead_letters(&self.dead, letters)
    }
}

#[tokio::test(start_paused = true)]
async fn items_of_a_shard_that_is_down_or_a_failing_node_wait_one_item_failing_alone_does_not() {
    for every_item_fails in [false, true] {
        let sink = Arc::new(ItemScripted {
            began: Instant::now(),
            every_item_fails,
            stored: Mutex::default(),
            dead: Mutex::default(),
        });
        let mut batch = rows_marked(50, &[3, 4, 5], "shard");
        if !every_item_fails {
            batch[20].payload = r#"{"poison":1}"#.into();
        }
        deliver_to(sink.clone(), batch).await.unwrap().unwrap();
        let dead = sink.dead.lock().unwrap().clone();
        let mut stored = sink.stored.lock().unwrap().clone();
        stored.sort();
        // A canary is a record stored before, sent again.
        stored.dedup();
        let mut expected = all_keys(50);
        if every_item_fails {
            assert!(
                dead.is_empty(),
                "a node failing every item is out: {dead:?}"
            );
        } else {
            // Other items of its answers were taken: evidence, after 3 attempts.
            assert_eq!(dead.len(), 1, "{dead:?}");
            assert_eq!(dead[0].0, "k20");
            assert!(dead[0].1.starts_with("gave up after 3 attempts: HTTP 500"));
            expected.retain(|k| k != "k20");
        }
        assert_eq!(
            stored, expected,
            "every item of the shard landed once it was up"
        );
    }
}

/// Answers that cannot be matched to the records (items reordered by a proxy, another
/// count) are no verdict: sent again; if they keep coming the worker stops, with nothing
/// of the batch acknowledged and nothing dead-lettered.
#[tokio::test(start_paused = true)]
async fn answers_that_cannot_be_matched_are_sent_again_then_stop_the_worker() {
    struct Misplacing {
        bad_answers: AtomicUsize,
        stored: Mutex<Vec<String>>,
        dead: Mutex<Vec<(String, String)>>,
    }
    #[async_trait]
    impl Sink for Misplacing {
        async fn write(&self, rows: &[Row]) -> WriteOutcome {
            let left = self.bad_answers.load(Ordering::SeqCst);
            if left > 0 {
                self.bad_answers.store(left - 1, Ordering::SeqCst);
                return WriteOutcome::Unreadable("item 0 is about _id \"k1\"".into());
            }
            self.stored
                .lock()
                .unwrap()
                .extend(rows.iter().map(|r| r.key.clone()));
            WriteOutcome::Written {
                inserted: rows.len() as u64,
                duplicates: 0,
            }
        }
        async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
            keep_dead_letters(&self.dead, letters)
        }
    }
    let sink = |bad| {
        Arc::new(Misplacing {
            bad_answers: AtomicUsize::new(bad),
            stored: Mutex::default(),
            dead: Mutex::default(),
        })
    };
    let twice = sink(2);
    deliver_to(twice.clone(), rows(10, &[]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(twice.stored.lock().unwrap().len(), 10);

    let always = sink(usize::MAX);
    let err = deliver_to(always.clone(), rows(10, &[]))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        err.0.contains("3 answers in a row could not be matched"),
        "{err}"
    );
    assert!(always.stored.lock().unwrap().is_empty());
    assert!(always.dead.lock().unwrap().is_empty());
}
