//! What the broker holds, read by the tests' own consumers: the group's committed offsets
//! and each partition's end.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::brokers;

/// The offsets the group committed, per partition (-1 when none).
pub async fn committed_offsets(topic: &str, group: &str, partitions: i32) -> Vec<i64> {
    let (topic, group) = (topic.to_string(), group.to_string());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition(&topic, p);
        }
        let committed = consumer
            .committed_offsets(list, Duration::from_secs(10))
            .unwrap();
        (0..partitions)
            .map(
                |p| match committed.find_partition(&topic, p).unwrap().offset() {
                    Offset::Offset(o) => o,
                    _ => -1,
                },
            )
            .collect()
    })
    .await
    .unwrap()
}

/// A bare consumer assigned every partition of `topic` from the beginning, reporting
/// each partition's end; its group (`<topic>-<role>`, needed by assign()) never commits.
pub(super) fn reader(topic: &str, role: &str, partitions: i32) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", format!("{topic}-{role}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&list).unwrap();
    consumer
}

/// Each partition's high watermark, found by reading it to its end (the broker's own
/// ListOffsets answer is not trusted: Tansu's was wrong when measured).
pub async fn high_watermarks(topic: &str, partitions: i32) -> Vec<i64> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = reader(&topic, "reader", partitions);
        let mut high = vec![0i64; partitions as usize];
        let mut ended = vec![false; partitions as usize];
        let started = Instant::now();
        while ended.iter().any(|e| !e) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "reading {topic} to its end"
            );
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    high[m.partition() as usize] = m.offset() + 1;
                    ended[m.partition() as usize] = false;
                }
                Some(Err(KafkaError::PartitionEOF(p))) => ended[p as usize] = true,
                Some(Err(e)) => panic!("reading {topic}: {e}"),
                None => {}
            }
        }
        high
    })
    .await
    .unwrap()
}
