//! `sluice produce`: publishes NDJSON lines to the configured queue, one message per line,
//! and waits until the queue confirmed each one. This is how examples and tests load a
//! queue; each queue kind brings its own [`Publisher`].

#[cfg(feature = "amqp")]
pub mod amqp;
#[cfg(feature = "kafka")]
pub mod avro;
#[cfg(feature = "kafka")]
pub mod kafka;

use std::path::Path;

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::config::Config;
use crate::decode::Decoder;
use crate::record::{Position, Record};
use crate::source::settings::SourceKind;
#[cfg(any(feature = "kafka", feature = "amqp"))]
use crate::source::settings::SourceSettings;

#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("cannot read the input: {0}")]
    Input(#[from] std::io::Error),
    #[cfg(any(feature = "kafka", feature = "amqp"))]
    #[error("{0}")]
    Queue(String),
    #[error("source.kind = {0:?} is not a queue: nothing to produce to")]
    NotAQueue(SourceKind),
    /// The configuration or the arguments cannot produce what was asked.
    #[error("{0}")]
    Config(String),
}

/// How a load went: confirmed messages, and the ones the queue refused or lost.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub delivered: u64,
    pub failed: u64,
    /// The first failure, to tell the user why.
    pub first_error: Option<String>,
}

impl Tally {
    #[cfg(any(feature = "kafka", feature = "amqp"))]
    pub fn fail(&mut self, error: impl std::fmt::Display) {
        self.failed += 1;
        self.first_error.get_or_insert_with(|| error.to_string());
    }
}

/// Hands messages to one queue and collects its confirmations.
#[async_trait]
pub trait Publisher: Send {
    /// Hands over one message; may wait while too many are unconfirmed.
    async fn publish(&mut self, key: Option<&str>, payload: &[u8]) -> Result<(), ProduceError>;

    /// Waits for every outstanding confirmation and tells how the load went.
    async fn finish(&mut self) -> Result<Tally, ProduceError>;
}

/// The publisher for the configured source's queue.
pub async fn open(config: &Config) -> Result<Box<dyn Publisher>, ProduceError> {
    match &config.source {
        #[cfg(feature = "kafka")]
        SourceSettings::Kafka(s) => Ok(Box::new(kafka::KafkaPublisher::open(s)?)),
        #[cfg(feature = "amqp")]
        SourceSettings::Amqp(s) => Ok(Box::new(amqp::AmqpPublisher::open(s).await?)),
        other => Err(ProduceError::NotAQueue(other.kind())),
    }
}

/// Publishes every non-blank line of `input` ("-" is stdin), keyed by the value at
/// `sink.key` when it is set and the line has one.
pub async fn produce(
    config: &Config,
    input: &Path,
    value_schema: Option<&Path>,
) -> Result<Tally, ProduceError> {
    #[cfg(feature = "kafka")]
    let avro = match &config.source {
        SourceSettings::Kafka(kafka) => avro::AvroEncoder::open(kafka, value_schema).await?,
        _ if value_schema.is_some() => {
            return Err(ProduceError::Config(
                "--value-schema is for a Kafka source with source.value.format = \"avro\"".into(),
            ));
        }
        _ => None,
    };
    #[cfg(not(feature = "kafka"))]
    if value_schema.is_some() {
        return Err(ProduceError::Config(
            "--value-schema needs the kafka feature".into(),
        ));
    }
    let mut publisher = open(config).await?;
    let reader: Box<dyn AsyncRead + Unpin + Send> = if input.as_os_str() == "-" {
        Box::new(tokio::io::stdin())
    } else {
        Box::new(tokio::fs::File::open(input).await?)
    };
    let keys = config.sink.key.clone().map(|k| Decoder::new(Some(k)));
    let mut lines = BufReader::with_capacity(256 * 1024, reader).split(b'\n');
    while let Some(mut line) = lines.next_segment().await? {
        while line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let key = keys.as_ref().and_then(|d| key_of(d, &line));
        #[cfg(feature = "kafka")]
        if let Some(avro) = &avro {
            let value = avro.encode(&line).map_err(|why| {
                ProduceError::Config(format!(
                    "a line does not fit the Avro schema ({why}): {}",
                    String::from_utf8_lossy(&line[..line.len().min(200)])
                ))
            })?;
            publisher.publish(key.as_deref(), &value).await?;
            continue;
        }
        publisher.publish(key.as_deref(), &line).await?;
    }
    publisher.finish().await
}

/// The record key the worker will use, by the same rules; `None` for a line without one
/// (it is published unkeyed and the worker dead-letters it with the reason).
fn key_of(decoder: &Decoder, line: &[u8]) -> Option<String> {
    let record = Record {
        position: Position {
            lane: 0,
            start: 0,
            end: 0,
        },
        origin: String::new(),
        fallback_key: String::new(),
        payload: line.to_vec(),
        oversize: None,
        undecodable: None,
        context: Default::default(),
    };
    decoder.decode(record).ok().map(|row| row.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_worker_rules() {
        let d = Decoder::new(Some("/id".into()));
        assert_eq!(key_of(&d, br#"{"id":"a-1"}"#).as_deref(), Some("a-1"));
        assert_eq!(key_of(&d, br#"{"id":42}"#).as_deref(), Some("42"));
        assert_eq!(key_of(&d, br#"{"other":1}"#), None);
        assert_eq!(key_of(&d, b"not json"), None);
    }
}
