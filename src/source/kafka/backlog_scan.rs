//! Counts a group's backlog exactly, for `sluice plan`: from each partition's committed
//! offset (its start, for a group that never committed there) to its end, by reading it.
//! Offset answers cannot be trusted on every broker (Tansu has answered high watermarks
//! below the committed offsets), and a plan that misstates the backlog misstates the ETA.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use super::client;
use super::context::ReaderContext;
use super::settings::KafkaSettings;
use crate::source::SourceError;

fn fail(what: &str, e: impl std::fmt::Display) -> SourceError {
    SourceError::Other(format!("kafka: {what}: {e}"))
}

/// Records between the group's committed offsets and the ends of the topic's partitions.
/// Blocking: run it off the async threads.
pub fn count(source: &KafkaSettings, timeout: Duration) -> Result<u64, SourceError> {
    let consumer: BaseConsumer<ReaderContext> = client::consumer(source)
        .create_with_context(ReaderContext)
        .map_err(|e| fail("cannot create a consumer", e))?;
    let result = count_with(&consumer, source, timeout);
    // Dropping a consumer after `committed_offsets` has hung in rd_kafka_destroy on some
    // brokers; this one-shot reader is left for the process exit to reclaim.
    std::mem::forget(consumer);
    result
}

fn count_with(
    consumer: &BaseConsumer<ReaderContext>,
    source: &KafkaSettings,
    timeout: Duration,
) -> Result<u64, SourceError> {
    let topic = source.topic.as_deref().unwrap_or_default();
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| fail("metadata", e))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    let mut wanted = TopicPartitionList::new();
    for p in &partitions {
        wanted.add_partition(topic, *p);
    }
    let committed = consumer
        .committed_offsets(wanted, timeout)
        .map_err(|e| fail("committed offsets", e))?;
    let mut start = TopicPartitionList::new();
    for e in committed.elements() {
        let from = match e.offset() {
            Offset::Offset(n) => Offset::Offset(n),
            _ => Offset::Beginning,
        };
        start
            .add_partition_offset(topic, e.partition(), from)
            .map_err(|e| fail("offsets", e))?;
    }
    consumer.assign(&start).map_err(|e| fail("assign", e))?;
    let mut open: BTreeSet<i32> = partitions.into_iter().collect();
    let deadline = Instant::now() + timeout;
    let mut records = 0u64;
    while !open.is_empty() {
        if Instant::now() > deadline {
            return Err(fail(
                "counting the backlog",
                format!("partitions {open:?} not read to their end in {timeout:?}"),
            ));
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(_)) => records += 1,
            Some(Err(KafkaError::PartitionEOF(p))) => {
                open.remove(&p);
            }
            Some(Err(e)) => return Err(fail("reading", e)),
            None => {}
        }
    }
    Ok(records)
}
