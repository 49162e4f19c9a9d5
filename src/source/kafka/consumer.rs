//! The group consumer: the [`Source`] that pulls from the topic, commits settled offsets
//! and follows the group's assignment.

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};

mod bounds;
mod direct;

use super::assignment::Assignment;
use super::context::{GroupContext, lock, offset_list};
use super::leave::DropWithin;
use super::ready::ready_now;
use super::{client, settings};
use crate::record::{HeaderValue, Position, Record, SourceContext};
use crate::source::{Backlog, Pulled, Source, SourceError};

/// How long a pull waits for records that are not ready yet (never once every partition
/// is at its end).
const PULL_WAIT: Duration = Duration::from_millis(50);
/// Settled offsets are committed at most this often while running (always on revoke and
/// close): a crash redelivers at most this much, which the sink absorbs.
const COMMIT_EVERY: Duration = Duration::from_millis(500);
/// How long opening waits for the brokers to describe the topic.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// "Caught up" also needs this long without a record: end-of-partition events are not
/// trusted alone.
const QUIET: Duration = Duration::from_millis(500);

/// The longest closing the consumer (leaving the group) may hold the worker's exit.
const LEAVE_WAIT: Duration = Duration::from_secs(10);
/// How long the summary's count waits for the client's statistics (every second by
/// default) to report a committed offset it has no other way to know.
const STATS_WAIT: Duration = Duration::from_secs(2);
/// How long a direct assignment waits at start for the first fetch of every partition,
/// which carries its end (a healthy broker answers in milliseconds).
const FIRST_FETCH_WAIT: Duration = Duration::from_secs(5);
/// Partitions without a fetch answer this long into a direct assignment have their ends
/// read by a reader of their own: their first fetch is waiting for room in the queue.
const OWN_FETCH_AFTER: Duration = Duration::from_millis(500);

pub struct KafkaSource {
    consumer: DropWithin<StreamConsumer<GroupContext>>,
    assignment: Arc<Mutex<Assignment>>,
    topic: String,
    group: String,
    follow: bool,
    max_record_bytes: usize,
    assignment_timeout: Duration,
    committed_at: Instant,
    warned_unassigned: bool,
    subscribed: bool,
    /// The topic's partition count, for the share of a capacity split by assignment.
    partitions: usize,
    /// For the backlog count's own reader.
    config: settings::KafkaSettings,
    /// A record [`Source::watch`] found while the worker had no allowance, with the
    /// assignment epoch it was fetched in; handed out first by the next pull (or dropped
    /// there if its partition changed hands meanwhile, to be fetched again).
    lookahead: Option<(Record, u64)>,
}

fn fail(what: &str, e: impl std::fmt::Display) -> SourceError {
    SourceError::Other(format!("kafka: {what}: {e}"))
}

impl KafkaSource {
    pub async fn open(source: &settings::KafkaSettings, follow: bool) -> Result<Self, SourceError> {
        let topic = source.topic.clone().unwrap_or_default();
        let group = source.group.clone().unwrap_or_default();
        let assignment = Arc::new(Mutex::new(Assignment::new(Instant::now())));
        let consumer: StreamConsumer<GroupContext> = client::consumer(source)
            .create_with_context(GroupContext::new(topic.clone(), assignment.clone()))
            .map_err(|e| fail("cannot create the consumer", e))?;
        // Fail at start, not at the assignment timeout, when the brokers are unreachable or
        // the topic does not exist.
        let metadata = consumer
            .fetch_metadata(Some(&topic), METADATA_TIMEOUT)
            .map_err(|e| {
                fail(
                    &format!(
                        "cannot reach {}",
                        source.brokers.as_deref().unwrap_or_default()
                    ),
                    e,
                )
            })?;
        let partitions = match metadata.topics().iter().find(|t| t.name() == topic) {
            Some(t) if t.error().is_none() && !t.partitions().is_empty() => t.partitions().len(),
            Some(t) => {
                let why = t
                    .error()
                    .map(|e| format!("{:?}", rdkafka::types::RDKafkaErrorCode::from(e)));
                return Err(fail(
                    &format!("topic {topic:?} is not available"),
                    why.unwrap_or_else(|| "no partitions".into()),
                ));
            }
            None => return Err(fail(&format!("topic {topic:?}"), "does not exist")),
        };
        Ok(KafkaSource {
            partitions,
            config: source.clone(),
            consumer: DropWithin::new(consumer, LEAVE_WAIT, "the Kafka consumer"),
            assignment,
            topic,
            group,
            follow,
            max_record_bytes: source.max_record_bytes,
            assignment_timeout: source.assignment_timeout,
            committed_at: Instant::now(),
            warned_unassigned: false,
            subscribed: false,
            lookahead: None,
        })
    }

    /// Joins the group at the first pull, not at open: `sluice check` opens the source
    /// too, and a member that joins and leaves would make the group's live workers
    /// rebalance.
    fn subscribe(&mut self) -> Result<(), SourceError> {
        if !self.subscribed {
            self.consumer
                .subscribe(&[&self.topic])
                .map_err(|e| fail("cannot subscribe", e))?;
            self.subscribed = true;
            lock(&self.assignment).restart(Instant::now());
            tracing::info!(topic = %self.topic, group = %self.group, "joining the consumer group");
        }
        Ok(())
    }

    /// What a pull or a watch does with an error from the stream: the end of a partition
    /// is noted (and bounds it under `--until-empty`), a fatal one stops the source, any
    /// other is logged and the stream read on.
    fn consumer_error(&self, e: KafkaError) -> Result<(), SourceError> {
        match e {
            KafkaError::PartitionEOF(partition) => {
                self.take_bound(partition, None);
                lock(&self.assignment).reached_end(partition);
            }
            e @ KafkaError::MessageConsumptionFatal(_) => return Err(fail("consumer failed", e)),
            e => tracing::warn!("kafka: {e}"),
        }
        Ok(())
    }

    /// Turns a fetched message into a record, or `None` if its partition is not ours.
    fn admit(&self, message: &BorrowedMessage<'_>) -> Option<Record> {
        let partition = message.partition();
        let offset = u64::try_from(message.offset()).ok()?;
        self.take_bound(partition, Some(offset));
        if !lock(&self.assignment).admit(partition, offset) {
            return None;
        }
        let context = SourceContext {
            key: message.key().map(<[u8]>::to_vec),
            headers: message.headers().map_or_else(Vec::new, |headers| {
                headers
                    .iter()
                    .map(|h| (h.key.to_string(), h.value.map(HeaderValue::from)))
                    .collect()
            }),
            tombstone: message.payload().is_none(),
        };
        let body = message.payload().unwrap_or_default();
        let (payload, oversize) = if body.len() > self.max_record_bytes {
            (
                body[..self.max_record_bytes].to_vec(),
                Some(body.len() as u64),
            )
        } else {
            (body.to_vec(), None)
        };
        let mut origin = String::with_capacity(self.topic.len() + 32);
        let _ = write!(origin, "{}/{partition}/{offset}", self.topic);
        Some(Record {
            position: Position {
                lane: partition,
                start: offset,
                end: offset + 1,
            },
            fallback_key: origin.clone(),
            origin,
            payload,
            oversize,
            undecodable: None,
            context,
        })
    }

    /// Commits the settled offsets the store lacks: asynchronously and at most every
    /// `COMMIT_EVERY` while running; synchronously when `final_commit`, every settled
    /// offset (an async commit that seemed to land may not have).
    fn commit(&mut self, final_commit: bool) -> Result<(), SourceError> {
        if !final_commit && self.committed_at.elapsed() < COMMIT_EVERY {
            return Ok(());
        }
        let due = if final_commit {
            lock(&self.assignment).settled_offsets()
        } else {
            lock(&self.assignment).due()
        };
        if due.is_empty() {
            return Ok(());
        }
        self.committed_at = Instant::now();
        let list = offset_list(&self.topic, &due).map_err(|e| fail("commit", e))?;
        let mode = if final_commit {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        match self.consumer.commit(&list, mode) {
            Ok(()) => {
                lock(&self.assignment).stored(&due);
                Ok(())
            }
            Err(e) if final_commit => {
                let partitions: Vec<i32> = due.iter().map(|(p, _)| *p).collect();
                lock(&self.assignment).commit_failed(&partitions);
                Err(fail("final offset commit failed", e))
            }
            Err(e) => {
                tracing::warn!("offset commit failed, will retry: {e}");
                Ok(())
            }
        }
    }

    /// The group's committed offset of every held partition (see
    /// [`Assignment::committed_offsets`]). A partition nothing was fetched from in this
    /// run (a short one) has it only in the client's statistics, which come every
    /// `statistics.interval.ms`: the consumer's events are served for up to `STATS_WAIT`
    /// until they have.
    async fn committed_offsets(&mut self) -> Option<Vec<(i32, Option<u64>)>> {
        let deadline = tokio::time::Instant::now() + STATS_WAIT;
        loop {
            let held = lock(&self.assignment).committed_offsets()?;
            if held.iter().all(|(_, c)| c.is_some()) || tokio::time::Instant::now() >= deadline {
                return Some(held);
            }
            // Fetched messages met on the way are dropped: nothing more is taken.
            let mut stream = self.consumer.stream();
            while ready_now(&mut stream).is_some() {}
            drop(stream);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Fails a one-shot run that never got partitions; a daemon keeps waiting.
    fn check_assignment(&mut self) -> Result<(), SourceError> {
        let Some(waited) = lock(&self.assignment).unassigned_for(Instant::now()) else {
            self.warned_unassigned = false;
            return Ok(());
        };
        if waited < self.assignment_timeout {
            return Ok(());
        }
        if !self.follow {
            return Err(SourceError::Other(format!(
                "kafka: group {:?} assigned no partitions of {:?} within {} (source.assignment_timeout); is the broker reachable?",
                self.group,
                self.topic,
                humantime::format_duration(self.assignment_timeout)
            )));
        }
        if !self.warned_unassigned {
            self.warned_unassigned = true;
            tracing::warn!(
                group = %self.group,
                topic = %self.topic,
                "no partitions assigned after {}; still waiting",
                humantime::format_duration(waited)
            );
        }
        Ok(())
    }
}

#[async_trait]
impl Source for KafkaSource {
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError> {
        self.subscribe()?;
        self.commit(false)?;
        self.take_bounds();
        let mut epoch = lock(&self.assignment).epoch();
        let mut records = Vec::with_capacity(max.min(4096));
        if let Some((record, fetched_in)) = self.lookahead.take()
            && lock(&self.assignment).held_since(record.position.lane, fetched_in)
        {
            records.push(record);
        }
        let deadline = tokio::time::Instant::now() + PULL_WAIT;
        let mut stream = self.consumer.stream();
        while records.len() < max {
            // What is ready first; then wait, until the deadline, only while more may come:
            // a pull under load returns a full batch, a caught-up pull returns at once.
            let next = match ready_now(&mut stream) {
                Some(next) => next,
                None if lock(&self.assignment).all_at_end() => break,
                None => match tokio::time::timeout_at(deadline, stream.next()).await {
                    Ok(Some(next)) => next,
                    _ => break,
                },
            };
            {
                let assignment = lock(&self.assignment);
                if assignment.epoch() != epoch {
                    // A rebalance ran inside that poll: records of partitions taken away
                    // (or handed over afresh) are fetched again from the committed offset.
                    records.retain(|r: &Record| assignment.held_since(r.position.lane, epoch));
                    epoch = assignment.epoch();
                }
            }
            match next {
                Ok(message) => match self.admit(&message) {
                    Some(record) => records.push(record),
                    // Past the bound (or not ours): stop once no partition has more.
                    None => {
                        self.pause_finished();
                        if lock(&self.assignment).all_at_end() {
                            break;
                        }
                    }
                },
                Err(e) => self.consumer_error(e)?,
            }
        }
        drop(stream);
        let caught_up = {
            let mut assignment = lock(&self.assignment);
            if !records.is_empty() {
                assignment.active(Instant::now());
            }
            records.is_empty() && assignment.caught_up(Instant::now(), QUIET)
        };
        self.check_assignment()?;
        Ok(Pulled { records, caught_up })
    }

    /// Serves the consumer's events (rebalances, statistics with the high watermarks that
    /// make the backlog, commit results) and keeps the first record that is ready for the
    /// next pull. Without this, a worker granted nothing never polled its consumer, so it
    /// never learnt of new records and never asked for the capacity to pull them.
    async fn watch(&mut self) -> Result<bool, SourceError> {
        self.subscribe()?;
        self.commit(false)?;
        self.take_bounds();
        if self.lookahead.is_none() {
            let mut stream = self.consumer.stream();
            while let Some(next) = ready_now(&mut stream) {
                match next {
                    Ok(message) => {
                        if let Some(record) = self.admit(&message) {
                            let epoch = lock(&self.assignment).epoch();
                            self.lookahead = Some((record, epoch));
                            break;
                        }
                        self.pause_finished();
                        if lock(&self.assignment).all_at_end() {
                            break;
                        }
                    }
                    Err(e) => self.consumer_error(e)?,
                }
            }
        }
        self.check_assignment()?;
        Ok(self.lookahead.is_some())
    }

    async fn ack(&mut self, positions: &[Position]) -> Result<(), SourceError> {
        let mut moved = false;
        {
            let mut assignment = lock(&self.assignment);
            for p in positions {
                moved |= assignment.ack(p.lane, p.start);
            }
        }
        if moved {
            self.commit(false)?;
        }
        Ok(())
    }

    async fn count_backlog(&mut self) -> Result<Option<u64>, SourceError> {
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || {
            super::backlog_scan::count(&config, Duration::from_secs(60))
        })
        .await
        .map_err(|e| SourceError::Other(format!("kafka: counting the backlog: {e}")))?
        .map(Some)
    }

    fn capacity_share(&self) -> Option<f64> {
        Some(lock(&self.assignment).assigned() as f64 / self.partitions.max(1) as f64)
    }

    async fn backlog(&mut self) -> Result<Backlog, SourceError> {
        Ok(lock(&self.assignment)
            .backlog()
            .map_or(Backlog::Unknown, Backlog::Records))
    }

    async fn close(&mut self, drained: bool) -> Result<(), SourceError> {
        match self.commit(true) {
            Err(e) if !drained => {
                tracing::warn!("{e}; settled records will be delivered again");
                Ok(())
            }
            other => other,
        }
    }

    /// What the next run reads: Σ (end offset now − committed offset) over the partitions
    /// held at the end, so records pulled and never written count. The end is the larger
    /// of the broker's ListOffsets answer (current, but too low on some brokers) and the
    /// last fetch's high watermark (right, but as of the last fetch).
    async fn remaining(&mut self) -> Option<u64> {
        let held = self.committed_offsets().await?;
        let mut total = 0;
        for (partition, settled) in held {
            let listed = self
                .consumer
                .fetch_watermarks(&self.topic, partition, Duration::from_secs(5))
                .ok()
                .and_then(|(_, high)| u64::try_from(high).ok());
            let high = listed.max(self.cached_high_watermark(partition))?;
            total += high.saturating_sub(settled?);
        }
        Some(total)
    }
}
