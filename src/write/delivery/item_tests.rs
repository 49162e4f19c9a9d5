//! Sinks that answer record by record (bulk APIs): only the items refused go again, and a
//! batch settles item by item.

use super::tests::{delivery_with, keep_dead_letters, rows, rows_marked};
use super::*;
use crate::config::RetrySettings;
use crate::sink::ItemOutcome;
use async_trait::async_trait;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;

/// Answers record by record, as a bulk API does: takes at most `room` records per write
/// and refuses the rest for now; rejects rows marked "bad" for good; fails rows marked
/// "flaky" the first time and rows marked "down" every time.
#[derive(Default)]
struct ItemSink {
    room: usize,
    sent: Mutex<Vec<String>>,
    refused: Mutex<Vec<String>>,
    written: Mutex<Vec<String>>,
    flaked: Mutex<Vec<String>>,
    dead: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl Sink for ItemSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let mut room = self.room;
        let items = rows
            .iter()
            .map(|r| {
                self.sent.lock().unwrap().push(r.key.clone());
                if r.payload.contains("bad") {
                    return ItemOutcome::Rejected("mapper_parsing_exception: bad".into());
                }
                if r.payload.contains("down") {
                    return ItemOutcome::Failed("HTTP 500 for this item, always".into());
                }
                let mut flaked = self.flaked.lock().unwrap();
                if r.payload.contains("flaky") && !flaked.contains(&r.key) {
                    flaked.push(r.key.clone());
                    return ItemOutcome::Failed("HTTP 500 for this item".into());
                }
                if room == 0 {
                    self.refused.lock().unwrap().push(r.key.clone());
                    return ItemOutcome::Throttled("es_rejected_execution_exception".into());
                }
                room -= 1;
                let mut written = self.written.lock().unwrap();
                if written.contains(&r.key) {
                    ItemOutcome::Duplicate
                } else {
                    written.push(r.key.clone());
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
async fn only_the_items_refused_go_again_and_the_batch_settles_at_item_granularity() {
    let sink = Arc::new(ItemSink {
        room: 30,
        ..Default::default()
    });
    let stats = Arc::new(Stats::default());
    let retry = RetrySettings {
        max_attempts: 3,
        ..RetrySettings::default()
    };
    let d = delivery_with(sink.clone(), retry, stats.clone());
    let mut rows = rows_marked(100, &[3, 50], "bad");
    rows[10].payload = r#"{"flaky":1}"#.into();
    rows[77].payload = r#"{"down":1}"#.into();
    rows[78].payload = r#"{"down":1}"#.into();
    let positions = vec![Position {
        lane: 0,
        start: 0,
        end: 100,
    }];
    let acked = d
        .deliver(Batch {
            rows,
            dead: vec![],
            positions: positions.clone(),
        })
        .await
        .unwrap();
    assert_eq!(acked, positions);

    let mut written = sink.written.lock().unwrap().clone();
    written.sort();
    let mut expected: Vec<String> = (0..100)
        .filter(|i| ![3, 50, 77, 78].contains(i))
        .map(|i| format!("k{i}"))
        .collect();
    expected.sort();
    assert_eq!(written, expected, "every good record once");
    let dead = sink.dead.lock().unwrap().clone();
    let dead_keys: Vec<&str> = dead.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(dead_keys, ["k3", "k50", "k77", "k78"]);
    assert_eq!(dead[0].1, "mapper_parsing_exception: bad");
    assert_eq!(
        dead[2].1,
        "gave up after 3 attempts: HTTP 500 for this item, always (the sink took other records meanwhile)"
    );

    // Nothing taken was sent again but one canary: every send beyond the first of each
    // record answers a refusal, a failure, or the two records that never work (failed item
    // by item, they are not halved once more as a request failed whole would be); before
    // they are tried with nothing else left to send, a record taken goes again to show
    // that the sink still takes writes.
    let sent = sink.sent.lock().unwrap().len();
    let refused = sink.refused.lock().unwrap().len();
    assert_eq!(
        sent,
        100 + refused + 1 + 2 * 2 + 1,
        "{sent} sent, {refused} refused"
    );
    assert!(refused >= 60, "three writes at most 30 each: {refused}");
    assert_eq!(stats.written.load(Relaxed), 96);
    assert_eq!(stats.duplicates.load(Relaxed), 0);
    assert_eq!(stats.dead_lettered.load(Relaxed), 4);
    assert_eq!(stats.throttled_records.load(Relaxed), refused as u64);
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_does_not_match_the_batch_acknowledges_nothing() {
    struct Short;
    #[async_trait]
    impl Sink for Short {
        async fn write(&self, _: &[Row]) -> WriteOutcome {
            WriteOutcome::from_items(
                vec![ItemOutcome::Written, ItemOutcome::Throttled("429".into())],
                None,
                None,
            )
        }
        async fn dead_letter(&self, _: &[DeadLetter]) -> WriteOutcome {
            unreachable!()
        }
    }
    let d = delivery_with(
        Arc::new(Short),
        RetrySettings::default(),
        Arc::new(Stats::default()),
    );
    let err = d
        .deliver(Batch {
            rows: rows(3, &[]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.0.contains("2 items for 3 records"), "{err}");
}
