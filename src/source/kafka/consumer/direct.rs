//! `--direct-assignment`: every partition of the topic taken without a group join, from
//! the group's committed offsets, and refused while the group has an active member.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;

use super::{FIRST_FETCH_WAIT, KafkaSource, METADATA_TIMEOUT, OWN_FETCH_AFTER, fail};
use crate::source::SourceError;
use crate::source::kafka::context::lock;
use crate::source::kafka::end_probe;

impl KafkaSource {
    /// Takes every partition of the topic by direct assignment, without joining the group
    /// (a join costs seconds), from the group's committed offsets; commits still go to the
    /// group, so a daemon started later resumes where this run stopped. Refused while the
    /// group has an active member: both would read the same partitions. A bounded run
    /// waits for the first fetch of every partition, which gives each its bound.
    pub async fn assign_all(&mut self) -> Result<(), SourceError> {
        let groups = self
            .consumer
            .fetch_group_list(Some(&self.group), METADATA_TIMEOUT)
            .map_err(|e| fail(&format!("describing group {:?}", self.group), e))?;
        if let Some(group) = groups.groups().iter().find(|g| g.name() == self.group)
            && !group.members().is_empty()
        {
            let members: Vec<String> = group
                .members()
                .iter()
                .map(|m| match (m.client_id(), m.client_host()) {
                    ("", "") => m.id().to_string(),
                    (client, host) => format!("{client} at {host}"),
                })
                .collect();
            return Err(SourceError::Refused(format!(
                "kafka: group {:?} has {} active member(s): {}; --direct-assignment would read their partitions beside them. Stop them first, or run without --direct-assignment to share the partitions through the group",
                self.group,
                members.len(),
                members.join(", ")
            )));
        }
        let partitions: Vec<i32> =
            (0..i32::try_from(self.partitions).unwrap_or(i32::MAX)).collect();
        let mut list = rdkafka::TopicPartitionList::with_capacity(partitions.len());
        for &p in &partitions {
            list.add_partition_offset(&self.topic, p, rdkafka::Offset::Stored)
                .map_err(|e| fail("assign", e))?;
        }
        self.consumer
            .assign(&list)
            .map_err(|e| fail("cannot assign the partitions", e))?;
        lock(&self.assignment).assign(&partitions, Instant::now());
        self.subscribed = true;
        tracing::info!(
            topic = %self.topic,
            group = %self.group,
            "reading all {} partitions by direct assignment (no group join); offsets are committed to the group",
            partitions.len()
        );
        let started = tokio::time::Instant::now();
        let mut probed = false;
        loop {
            self.take_bounds();
            let unbounded = lock(&self.assignment).unbounded();
            if unbounded.is_empty() {
                break;
            }
            let waited = started.elapsed();
            if !probed && waited >= OWN_FETCH_AFTER {
                // Those whose first fetch waits for room in the queue: a reader of their own.
                probed = true;
                self.bound_by_own_fetch(unbounded, FIRST_FETCH_WAIT.saturating_sub(waited))
                    .await;
                continue;
            }
            if waited >= FIRST_FETCH_WAIT {
                tracing::warn!(
                    topic = %self.topic,
                    ?unbounded,
                    "no fetch answered for these partitions within {FIRST_FETCH_WAIT:?}: each one's end is taken at its first fetch"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// Bounds `partitions` at their ends as a reader of their own fetches them now.
    async fn bound_by_own_fetch(&self, partitions: Vec<i32>, timeout: Duration) {
        let source = self.config.clone();
        let found = tokio::task::spawn_blocking(move || {
            end_probe::fetched_ends(&source, &partitions, timeout)
        })
        .await;
        let ends = match found {
            Ok(Ok(ends)) => ends,
            Ok(Err(e)) => return tracing::warn!("{e}"),
            Err(e) => return tracing::warn!("kafka: reading the partitions' ends: {e}"),
        };
        for (partition, end) in ends {
            if lock(&self.assignment).wants_bound(partition) {
                tracing::info!(topic = %self.topic, partition, end, "reading the partition up to its end as of now (fetched by a reader of its own: the worker's queue was full); later records are left for the next run");
                lock(&self.assignment).set_bound(partition, end);
            }
        }
    }
}
