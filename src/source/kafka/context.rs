//! The consumer's callbacks: rebalances, statistics and commit results, all of which
//! librdkafka delivers on the thread that polls the consumer (inside `pull`).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{Statistics, TopicPartitionList};

use super::assignment::Assignment;

pub struct GroupContext {
    topic: String,
    assignment: Arc<Mutex<Assignment>>,
}

impl GroupContext {
    pub fn new(topic: String, assignment: Arc<Mutex<Assignment>>) -> Self {
        GroupContext { topic, assignment }
    }

    fn assignment(&self) -> MutexGuard<'_, Assignment> {
        lock(&self.assignment)
    }

    fn partitions(&self, list: &TopicPartitionList) -> Vec<i32> {
        list.elements_for_topic(&self.topic)
            .iter()
            .map(|e| e.partition())
            .collect()
    }
}

/// The state stays consistent under a panic elsewhere (every update is one step).
pub fn lock(assignment: &Mutex<Assignment>) -> MutexGuard<'_, Assignment> {
    crate::lock::lock(assignment)
}

/// A commit request for `offsets` of `topic`.
pub fn offset_list(topic: &str, offsets: &[(i32, u64)]) -> KafkaResult<TopicPartitionList> {
    let mut list = TopicPartitionList::with_capacity(offsets.len());
    for &(partition, offset) in offsets {
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        list.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset))?;
    }
    Ok(list)
}

impl ClientContext for GroupContext {
    fn stats(&self, statistics: Statistics) {
        let Some(topic) = statistics.topics.get(&self.topic) else {
            return;
        };
        let mut assignment = self.assignment();
        for partition in topic.partitions.values() {
            assignment.reported(
                partition.partition,
                partition.hi_offset,
                partition.lo_offset,
                partition.committed_offset,
            );
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log_error(error, reason);
    }
}

/// librdkafka's error callback: every consumer event error passes here, the end of a
/// partition included, which is news to no one (the reader counts it where it arrives).
fn log_error(error: KafkaError, reason: &str) {
    match error {
        KafkaError::Global(rdkafka::types::RDKafkaErrorCode::PartitionEOF) => {
            tracing::debug!("kafka: {reason}")
        }
        error => tracing::warn!("kafka: {error}: {reason}"),
    }
}

/// The context of a one-shot reader outside the group (the backlog count of `sluice
/// plan`): the default one logs every end of partition as an ERROR.
pub struct ReaderContext;

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        log_error(error, reason);
    }
}

impl ConsumerContext for ReaderContext {}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                let partitions = self.partitions(list);
                tracing::info!(topic = %self.topic, ?partitions, "partitions assigned");
                self.assignment().assign(&partitions, Instant::now());
            }
            Rebalance::Revoke(list) => {
                let partitions = self.partitions(list);
                let due = self.assignment().revoke(&partitions, Instant::now());
                tracing::info!(topic = %self.topic, ?partitions, committing = ?due, "partitions revoked");
                if due.is_empty() {
                    return;
                }
                // Commit what is settled before the next owner reads the store; records
                // still in flight are fetched again by it and absorbed by the sink.
                let result = offset_list(&self.topic, &due)
                    .and_then(|list| consumer.commit(&list, CommitMode::Sync));
                if let Err(e) = result {
                    tracing::warn!(
                        "committing revoked partitions failed ({e}); their settled records will be delivered again"
                    );
                }
            }
            Rebalance::Error(e) => tracing::warn!("kafka rebalance failed: {e}"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(e) = result {
            let partitions = self.partitions(offsets);
            tracing::warn!(?partitions, "offset commit failed, will retry: {e}");
            self.assignment().commit_failed(&partitions);
        }
    }
}
