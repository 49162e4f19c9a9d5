use super::*;
use crate::config::RetrySettings;
use crate::write::{WritePath, WriteSettings};
use async_trait::async_trait;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use tokio_util::sync::CancellationToken;

/// A test sink's dead-letter store: (key, reason) of each letter, all taken.
pub(super) fn keep_dead_letters(
    dead: &Mutex<Vec<(String, String)>>,
    letters: &[DeadLetter],
) -> WriteOutcome {
    dead.lock().unwrap().extend(
        letters
            .iter()
            .map(|l| (l.key.clone().unwrap_or_default(), l.reason.clone())),
    );
    WriteOutcome::Written {
        inserted: letters.len() as u64,
        duplicates: 0,
    }
}

/// A sink with rules: rows whose payload contains "bad" are rejected (the whole batch
/// fails, as a database constraint would), rows whose payload contains "odd" fail
/// unexplained (as a trigger raising an unknown SQLSTATE would); the first `throttles`
/// writes are throttled; writes of more than `burst` rows are throttled forever; the
/// first `transients` writes fail transiently; when `broken`, every write fails
/// unexplained (as a schema problem no rule knows would).
#[derive(Default)]
struct RuleSink {
    throttles: Mutex<u32>,
    transients: Mutex<u32>,
    burst: Option<usize>,
    broken: bool,
    /// The Retry-After of the first `throttles` answers.
    throttle_wait: Option<std::time::Duration>,
    written: Mutex<Vec<String>>,
    dead: Mutex<Vec<(String, String)>>,
    calls: Mutex<u32>,
    /// The dead-letter store refuses this many times (a full disk).
    store_failures: Mutex<u32>,
}

#[async_trait]
impl Sink for RuleSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        *self.calls.lock().unwrap() += 1;
        if self.burst.is_some_and(|b| rows.len() > b) {
            return WriteOutcome::Throttled {
                retry_after: Some(std::time::Duration::from_millis(50)),
                unit: None,
                reason: "burst".into(),
            };
        }
        let mut t = self.throttles.lock().unwrap();
        if *t > 0 {
            *t -= 1;
            return WriteOutcome::Throttled {
                retry_after: self.throttle_wait,
                unit: None,
                reason: "429".into(),
            };
        }
        let mut tr = self.transients.lock().unwrap();
        if *tr > 0 {
            *tr -= 1;
            return WriteOutcome::Transient("deadlock".into());
        }
        if self.broken {
            return WriteOutcome::Unexplained("SQLSTATE XX000: broken".into());
        }
        if rows.iter().any(|r| r.payload.contains("odd")) {
            return WriteOutcome::Unexplained("SQLSTATE ZZ001: odd row".into());
        }
        if rows.iter().any(|r| r.payload.contains("bad")) {
            return WriteOutcome::Rejected {
                rows: None,
                reason: "check constraint".into(),
            };
        }
        self.written
            .lock()
            .unwrap()
            .extend(rows.iter().map(|r| r.key.clone()));
        WriteOutcome::Written {
            inserted: rows.len() as u64,
            duplicates: 0,
        }
    }
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        let mut failures = self.store_failures.lock().unwrap();
        if *failures > 0 {
            *failures -= 1;
            return WriteOutcome::Unavailable("No space left on device".into());
        }
        keep_dead_letters(&self.dead, letters)
    }
}

pub(super) fn rows(n: usize, bad: &[usize]) -> Vec<Row> {
    rows_marked(n, bad, "bad")
}

/// `n` rows; those at `marked` carry `mark` in their payload.
pub(super) fn rows_marked(n: usize, marked: &[usize], mark: &str) -> Vec<Row> {
    (0..n)
        .map(|i| Row {
            key: format!("k{i}"),
            payload: if marked.contains(&i) {
                format!("{{\"{mark}\":1}}")
            } else {
                "{}".into()
            },
            origin: format!("t:{i}"),
            ..Default::default()
        })
        .collect()
}

/// A delivery built as the worker builds one, with these retry settings.
pub(super) fn delivery_with(
    sink: Arc<dyn Sink>,
    retry: RetrySettings,
    stats: Arc<Stats>,
) -> Arc<Delivery> {
    let settings = WriteSettings {
        retry,
        ..WriteSettings::default()
    };
    WritePath::new(sink, &settings, stats).delivery().clone()
}

fn delivery(sink: Arc<RuleSink>, max_attempts: u32) -> (Arc<Delivery>, Arc<Stats>) {
    let stats = Arc::new(Stats::default());
    let retry = RetrySettings {
        max_attempts,
        ..RetrySettings::default()
    };
    (delivery_with(sink, retry, stats.clone()), stats)
}

#[tokio::test(start_paused = true)]
async fn bisection_isolates_bad_rows_and_writes_the_rest() {
    let sink = Arc::new(RuleSink::default());
    let (d, stats) = delivery(sink.clone(), 8);
    let positions = vec![Position {
        lane: 0,
        start: 0,
        end: 1,
    }];
    let batch = Batch {
        rows: rows(100, &[7, 42, 43, 99]),
        dead: vec![],
        positions: positions.clone(),
    };
    assert_eq!(d.deliver(batch).await.unwrap(), positions);
    assert_eq!(sink.written.lock().unwrap().len(), 96);
    let dead: Vec<String> = sink
        .dead
        .lock()
        .unwrap()
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(dead, ["k7", "k42", "k43", "k99"]);
    assert_eq!(stats.dead_lettered.load(Relaxed), 4);
    let calls = *sink.calls.lock().unwrap();
    assert!(calls < 60, "bisection, not row by row: {calls} writes");
}

#[tokio::test(start_paused = true)]
async fn throttled_batches_wait_and_retry_as_they_are() {
    let sink = Arc::new(RuleSink {
        throttles: Mutex::new(2),
        ..Default::default()
    });
    let (d, stats) = delivery(sink.clone(), 8);
    d.deliver(Batch {
        rows: rows(10, &[]),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(sink.written.lock().unwrap().len(), 10);
    assert_eq!(
        *sink.calls.lock().unwrap(),
        3,
        "two throttles then one write of the whole batch"
    );
    assert_eq!(stats.throttled.load(Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn a_batch_larger_than_the_burst_is_split_instead_of_livelocking() {
    let sink = Arc::new(RuleSink {
        burst: Some(16),
        ..Default::default()
    });
    let (d, _) = delivery(sink.clone(), 8);
    d.deliver(Batch {
        rows: rows(100, &[]),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut written = sink.written.lock().unwrap().clone();
    written.sort();
    written.dedup();
    assert_eq!(written.len(), 100);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_retry_then_dead_letter_after_max_attempts() {
    let sink = Arc::new(RuleSink {
        transients: Mutex::new(2),
        ..Default::default()
    });
    let (d, stats) = delivery(sink.clone(), 8);
    d.deliver(Batch {
        rows: rows(5, &[]),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(sink.written.lock().unwrap().len(), 5);
    assert_eq!(stats.retries.load(Relaxed), 2);

    let sink = Arc::new(RuleSink {
        transients: Mutex::new(1000),
        ..Default::default()
    });
    let (d, _) = delivery(sink.clone(), 3);
    d.deliver(Batch {
        rows: rows(2, &[]),
        ..Default::default()
    })
    .await
    .unwrap();
    let dead = sink.dead.lock().unwrap().clone();
    assert_eq!(dead.len(), 2);
    assert!(
        dead[0].1.contains("gave up after 3 attempts: deadlock"),
        "{dead:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn unexplained_errors_of_some_rows_are_isolated_and_dead_lettered() {
    let sink = Arc::new(RuleSink::default());
    let (d, stats) = delivery(sink.clone(), 8);
    d.deliver(Batch {
        rows: rows_marked(100, &[0, 31, 99], "odd"),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(sink.written.lock().unwrap().len(), 97);
    let dead = sink.dead.lock().unwrap().clone();
    let keys: Vec<&str> = dead.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["k0", "k31", "k99"]);
    assert!(
        dead.iter().all(|(_, r)| r == "SQLSTATE ZZ001: odd row"),
        "{dead:?}"
    );
    assert_eq!(stats.dead_lettered.load(Relaxed), 3);
}

#[tokio::test(start_paused = true)]
async fn an_unexplained_error_that_hits_every_row_stops_without_dead_letters() {
    let sink = Arc::new(RuleSink {
        broken: true,
        ..Default::default()
    });
    let (d, _) = delivery(sink.clone(), 8);
    let err = d
        .deliver(Batch {
            rows: rows(64, &[]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.0.contains("SQLSTATE XX000: broken"), "{err}");
    assert!(err.0.contains("not a row's fault"), "{err}");
    assert!(sink.dead.lock().unwrap().is_empty());
    assert!(sink.written.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn every_row_failing_unexplained_is_no_row_error_even_with_one_row_or_all_odd() {
    for batch in [
        rows_marked(1, &[0], "odd"),
        rows_marked(5, &[0, 1, 2, 3, 4], "odd"),
    ] {
        let sink = Arc::new(RuleSink::default());
        let (d, _) = delivery(sink.clone(), 8);
        let result = d
            .deliver(Batch {
                rows: batch,
                ..Default::default()
            })
            .await;
        assert!(result.is_err(), "no write succeeded, so no row is to blame");
        assert!(sink.dead.lock().unwrap().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_a_throttle_pause_leaves_the_batch_unacknowledged_at_once() {
    let sink = Arc::new(RuleSink {
        throttles: Mutex::new(u32::MAX),
        throttle_wait: Some(std::time::Duration::from_secs(30)),
        ..Default::default()
    });
    let (d, _) = delivery(sink.clone(), 8);
    let d = Arc::new(d);
    let stopped = CancellationToken::new();
    let stop = stopped.clone();
    let task = tokio::spawn({
        let d = d.clone();
        async move {
            d.deliver_until(
                Batch {
                    rows: rows(10, &[]),
                    dead: vec![],
                    positions: vec![Position {
                        lane: 0,
                        start: 0,
                        end: 10,
                    }],
                },
                stopped,
            )
            .await
        }
    });
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(*sink.calls.lock().unwrap(), 1, "sent once, then paused");
    let asked = tokio::time::Instant::now();
    stop.cancel();
    let acked = task.await.unwrap().unwrap();
    assert_eq!(asked.elapsed(), std::time::Duration::ZERO, "no waiting out");
    assert!(acked.is_empty(), "nothing acknowledged: {acked:?}");
    assert_eq!(*sink.calls.lock().unwrap(), 1, "not sent again");
    assert!(sink.written.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_need_not_wait_is_still_written_after_shutdown() {
    let sink = Arc::new(RuleSink::default());
    let (d, _) = delivery(sink.clone(), 8);
    let stopped = CancellationToken::new();
    let stop = stopped.clone();
    stop.cancel();
    let positions = vec![Position {
        lane: 0,
        start: 0,
        end: 3,
    }];
    let acked = d
        .deliver_until(
            Batch {
                rows: rows(3, &[]),
                dead: vec![],
                positions: positions.clone(),
            },
            stopped,
        )
        .await
        .unwrap();
    assert_eq!(acked, positions);
    assert_eq!(sink.written.lock().unwrap().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_an_outage_backoff_gives_the_batch_up() {
    struct Down;
    #[async_trait]
    impl Sink for Down {
        async fn write(&self, _: &[Row]) -> WriteOutcome {
            WriteOutcome::Unavailable("connection refused".into())
        }
        async fn dead_letter(&self, _: &[DeadLetter]) -> WriteOutcome {
            WriteOutcome::Unavailable("connection refused".into())
        }
    }
    let stats = Arc::new(Stats::default());
    let d = delivery_with(Arc::new(Down), RetrySettings::default(), stats);
    let stopped = CancellationToken::new();
    let stop = stopped.clone();
    let started = tokio::time::Instant::now();
    let task = tokio::spawn(async move {
        d.deliver_until(
            Batch {
                rows: rows(2, &[]),
                dead: vec![],
                positions: vec![Position {
                    lane: 0,
                    start: 0,
                    end: 2,
                }],
            },
            stopped,
        )
        .await
    });
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    stop.cancel();
    assert!(task.await.unwrap().unwrap().is_empty());
    assert_eq!(started.elapsed(), std::time::Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_failing_dead_letter_store_holds_the_batch_until_it_takes_the_letters() {
    let sink = Arc::new(RuleSink {
        store_failures: Mutex::new(1000),
        ..Default::default()
    });
    let (d, stats) = delivery(sink.clone(), 8);
    let d = Arc::new(d);
    let positions = vec![Position {
        lane: 0,
        start: 0,
        end: 1,
    }];
    let batch = Batch {
        rows: rows(4, &[2]),
        dead: vec![],
        positions: positions.clone(),
    };
    let task = tokio::spawn({
        let d = d.clone();
        async move { d.deliver(batch).await }
    });
    // An hour of a full disk: never settled, never counted, the worker not ready.
    tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    assert!(!task.is_finished());
    assert_eq!(stats.dead_lettered.load(Relaxed), 0);
    assert_eq!(stats.dead_letter_outages.load(Relaxed), 1);
    assert!(
        *sink.store_failures.lock().unwrap() < 900,
        "retried all along"
    );
    *sink.store_failures.lock().unwrap() = 0;
    assert_eq!(task.await.unwrap().unwrap(), positions);
    assert_eq!(stats.dead_lettered.load(Relaxed), 1);
    assert_eq!(stats.dead_letter_outages.load(Relaxed), 0);
    assert_eq!(sink.dead.lock().unwrap().len(), 1);
}
