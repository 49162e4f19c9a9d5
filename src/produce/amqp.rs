//! Publishes to a RabbitMQ queue: persistent messages through the default exchange, with
//! publisher confirms, so a message counts as delivered only once the broker has it.

use std::collections::VecDeque;

use async_trait::async_trait;
use lapin::PublisherConfirm;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use sha2::{Digest, Sha256};

use super::{ProduceError, Publisher, Tally};
use crate::source::amqp::settings::{AmqpSettings, MOST_NAME_BYTES};

/// Confirmations awaited before the next publish waits for the oldest.
const MAX_UNCONFIRMED: usize = 4096;

pub struct AmqpPublisher {
    connection: Connection,
    channel: Channel,
    queue: String,
    pending: VecDeque<PublisherConfirm>,
    tally: Tally,
}

fn queue_error(e: lapin::Error) -> ProduceError {
    ProduceError::Queue(format!("amqp: {e}"))
}

impl AmqpPublisher {
    pub async fn open(source: &AmqpSettings) -> Result<Self, ProduceError> {
        let url = source.url.as_deref().unwrap_or_default();
        let queue = source.queue.clone().unwrap_or_default();
        let tls = source.tls.as_ref();
        let connection = crate::source::amqp::connect(url, tls, ConnectionProperties::default())
            .await
            .map_err(queue_error)?;
        let channel = connection.create_channel().await.map_err(queue_error)?;
        if source.declare {
            channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map_err(queue_error)?;
        }
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(queue_error)?;
        Ok(AmqpPublisher {
            connection,
            channel,
            queue,
            pending: VecDeque::new(),
            tally: Tally::default(),
        })
    }

    async fn settle_oldest(&mut self) {
        if let Some(confirm) = self.pending.pop_front() {
            match confirm.await {
                Ok(c) if c.is_ack() => self.tally.delivered += 1,
                Ok(_) => self.tally.fail("the broker refused the message (nack)"),
                Err(e) => self.tally.fail(e),
            }
        }
    }
}

/// The message id for a record's key: the key itself when it fits AMQP's short string,
/// else `sha256:` and the first 16 bytes of its digest in hex (the form the worker gives a
/// message without an id). The id only labels the message: the worker reads the key from
/// the record by `sink.key`, whatever its length, so a long key is no reason to refuse a
/// record the worker can load.
fn message_id(key: &str) -> String {
    if key.len() <= MOST_NAME_BYTES {
        key.to_string()
    } else {
        format!("sha256:{}", hex::encode(&Sha256::digest(key)[..16]))
    }
}

#[async_trait]
impl Publisher for AmqpPublisher {
    async fn publish(&mut self, key: Option<&str>, payload: &[u8]) -> Result<(), ProduceError> {
        if self.pending.len() >= MAX_UNCONFIRMED {
            self.settle_oldest().await;
        }
        let mut properties = BasicProperties::default().with_delivery_mode(2);
        if let Some(key) = key {
            properties = properties.with_message_id(message_id(key).into());
        }
        let confirm = self
            .channel
            .basic_publish(
                "".into(),
                self.queue.as_str().into(),
                BasicPublishOptions::default(),
                payload,
                properties,
            )
            .await
            .map_err(queue_error)?;
        self.pending.push_back(confirm);
        Ok(())
    }

    async fn finish(&mut self) -> Result<Tally, ProduceError> {
        while !self.pending.is_empty() {
            self.settle_oldest().await;
        }
        let _ = self
            .connection
            .close(200, "sluice produce done".into())
            .await;
        Ok(std::mem::take(&mut self.tally))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_too_long_for_a_message_id_gives_its_digest() {
        assert_eq!(message_id("order-1"), "order-1");
        let long = "k".repeat(300);
        let id = message_id(&long);
        assert!(
            id.starts_with("sha256:") && id.len() <= MOST_NAME_BYTES,
            "{id}"
        );
        assert_eq!(id, message_id(&long), "the same key, the same id");
        assert_eq!(message_id(&"é".repeat(127)).len(), 254, "fits: kept");
    }
}
