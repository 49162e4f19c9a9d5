//! Publishes to the configured Kafka topic and counts delivery reports. Messages are
//! handed to librdkafka without waiting (it batches them); only the number awaiting a
//! report is bounded, so a large file streams through in constant memory.

use async_trait::async_trait;
use futures::StreamExt;
use futures::channel::oneshot::Canceled;
use futures::stream::FuturesUnordered;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use std::time::Duration;

use super::{ProduceError, Publisher, Tally};
use crate::source::kafka::client;
use crate::source::kafka::settings::KafkaSettings;

/// Most messages awaiting their delivery report.
const MAX_UNCONFIRMED: usize = 50_000;

pub struct KafkaPublisher {
    producer: FutureProducer,
    topic: String,
    unconfirmed: FuturesUnordered<DeliveryFuture>,
    tally: Tally,
}

impl KafkaPublisher {
    pub fn open(source: &KafkaSettings) -> Result<Self, ProduceError> {
        let producer = client::producer(source)
            .create()
            .map_err(|e| ProduceError::Queue(format!("kafka: cannot create the producer: {e}")))?;
        Ok(KafkaPublisher {
            producer,
            topic: source.topic.clone().unwrap_or_default(),
            unconfirmed: FuturesUnordered::new(),
            tally: Tally::default(),
        })
    }
}

fn settle(tally: &mut Tally, report: Result<OwnedDeliveryResult, Canceled>) {
    match report {
        Ok(Ok(_)) => tally.delivered += 1,
        Ok(Err((e, _))) => tally.fail(format!("kafka: {e}")),
        Err(Canceled) => tally.fail("kafka: the producer went away before reporting"),
    }
}

#[async_trait]
impl Publisher for KafkaPublisher {
    async fn publish(&mut self, key: Option<&str>, payload: &[u8]) -> Result<(), ProduceError> {
        loop {
            let mut record = FutureRecord::to(&self.topic).payload(payload);
            if let Some(key) = key {
                record = record.key(key);
            }
            match self.producer.send_result(record) {
                Ok(report) => {
                    self.unconfirmed.push(report);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    // librdkafka's own queue is full: wait for a report to make room.
                    match self.unconfirmed.next().await {
                        Some(report) => settle(&mut self.tally, report),
                        None => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
                Err((e, _)) => {
                    self.tally.fail(format!("kafka: {e}"));
                    break;
                }
            }
        }
        while self.unconfirmed.len() >= MAX_UNCONFIRMED {
            if let Some(report) = self.unconfirmed.next().await {
                settle(&mut self.tally, report);
            }
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<Tally, ProduceError> {
        while let Some(report) = self.unconfirmed.next().await {
            settle(&mut self.tally, report);
        }
        Ok(std::mem::take(&mut self.tally))
    }
}
