//! `--until-empty` on Kafka: each partition stops at its end as the first fetch of it in
//! this run found it, taken as soon as that fetch is answered.

use rdkafka::consumer::Consumer;

use super::KafkaSource;
use crate::source::kafka::context::lock;
use crate::source::kafka::end_probe::fetched_high_watermark;

impl KafkaSource {
    /// Stops each partition at its end offset as the broker reports it in the first fetch
    /// of it in this run (`--until-empty`): records produced later are left for the next
    /// run, so a one-shot load ends even while producers outpace the sink. The fetch's
    /// high watermark is used, not a ListOffsets answer, which some brokers get wrong
    /// (Tansu answers one past the last batch's first offset).
    pub fn bound_at_start(&mut self) {
        lock(&self.assignment).bound_each_partition();
    }

    /// Takes the bound of every held partition that has none yet and whose first fetch
    /// has been answered. The fetcher asks for every partition at once, whatever the rate,
    /// so this comes right after the assignment; taken instead when a partition's first
    /// record reached the worker, the last of eight partitions at 1,000 rec/s was bounded
    /// 19 s in, with everything produced meanwhile.
    pub(super) fn take_bounds(&self) {
        let unbounded = lock(&self.assignment).unbounded();
        for partition in unbounded {
            self.take_bound(partition, None);
        }
    }

    /// Takes `partition`'s bound if the run needs it and has none: the high watermark of
    /// the latest fetch response, which librdkafka keeps (no request is made). `seen` is
    /// an offset known to exist there.
    pub(super) fn take_bound(&self, partition: i32, seen: Option<u64>) {
        if !lock(&self.assignment).wants_bound(partition) {
            return;
        }
        let Some(high) = self.cached_high_watermark(partition) else {
            return;
        };
        let end = seen.map_or(high, |offset| high.max(offset + 1));
        tracing::info!(topic = %self.topic, partition, end, "reading the partition up to its end as of now; later records are left for the next run");
        lock(&self.assignment).set_bound(partition, end);
    }

    /// The high watermark the last fetch response of `partition` carried.
    pub(super) fn cached_high_watermark(&self, partition: i32) -> Option<u64> {
        fetched_high_watermark(self.consumer.client(), &self.topic, partition)
    }

    /// Stops fetching partitions read up to their bound.
    pub(super) fn pause_finished(&self) {
        let done = lock(&self.assignment).to_pause();
        if done.is_empty() {
            return;
        }
        let mut list = rdkafka::TopicPartitionList::new();
        for p in &done {
            list.add_partition(&self.topic, *p);
        }
        if let Err(e) = self.consumer.pause(&list) {
            tracing::debug!("kafka: pausing {done:?}: {e}");
        }
    }
}
