//! The ends of a few partitions as a fetch of each finds them now, read by a one-shot
//! reader of their own.
//!
//! The worker's consumer fetches a partition only while its local queue has room. Under
//! `--until-empty --direct-assignment` a partition whose offset answer came after the
//! first fetch of the others met a queue already full of their records, and its first
//! fetch (which gives its bound) waited until the worker had drained it: 8.5 s at
//! 1,000 rec/s on a loaded machine, with everything produced meanwhile taken in. This
//! reader queues nothing, so its first fetch goes out at once. It starts at each
//! partition's end and reads only the high watermark the fetch answer carries: the
//! offset answer alone cannot be trusted on every broker (Tansu answers one past the
//! last batch's first offset).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::client::{Client, ClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::client;
use super::context::ReaderContext;
use super::settings::KafkaSettings;
use crate::source::SourceError;

/// The end of each of `partitions` that a fetch answered within `timeout`; those not
/// answered are left out. Blocking: run it off the async threads.
pub fn fetched_ends(
    source: &KafkaSettings,
    partitions: &[i32],
    timeout: Duration,
) -> Result<BTreeMap<i32, u64>, SourceError> {
    let fail = |what: &str, e: rdkafka::error::KafkaError| {
        SourceError::Other(format!("kafka: reading the partitions' ends: {what}: {e}"))
    };
    let topic = source.topic.as_deref().unwrap_or_default();
    let consumer: BaseConsumer<ReaderContext> = client::consumer(source)
        // A fetch at the end finds nothing new: answered at once, not after the broker's
        // long poll (500 ms by default).
        .set("fetch.wait.max.ms", "10")
        .create_with_context(ReaderContext)
        .map_err(|e| fail("cannot create a consumer", e))?;
    let mut list = TopicPartitionList::with_capacity(partitions.len());
    for &p in partitions {
        list.add_partition_offset(topic, p, Offset::End)
            .map_err(|e| fail("offsets", e))?;
    }
    consumer.assign(&list).map_err(|e| fail("assign", e))?;
    let deadline = Instant::now() + timeout;
    let mut ends = BTreeMap::new();
    while ends.len() < partitions.len() && Instant::now() < deadline {
        // Records and ends of partition alike are only what moves the client along.
        let _ = consumer.poll(Duration::from_millis(20));
        for &p in partitions {
            if let Some(end) = fetched_high_watermark(consumer.client(), topic, p) {
                ends.entry(p).or_insert(end);
            }
        }
    }
    // As for the backlog count's reader: dropping a consumer has hung in rd_kafka_destroy
    // on some brokers, so this one is left for the process exit to reclaim.
    std::mem::forget(consumer);
    Ok(ends)
}

/// The high watermark the last fetch answer of `partition` carried, which librdkafka
/// keeps (no request is made); `None` before the first.
pub fn fetched_high_watermark<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
) -> Option<u64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client handle lives as long as `client`; librdkafka only reads the
    // topic name and writes the two integers, without a network call.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            client.native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    if err != rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return None;
    }
    u64::try_from(high).ok()
}
