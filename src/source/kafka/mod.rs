//! Kafka: a consumer in a group. Offsets are committed by hand, per partition, and only
//! up to the first record that is not yet written or dead-lettered (batches finish out
//! of order), so a crash or a rebalance redelivers instead of skipping. librdkafka's
//! local queue is bounded, so memory stays flat whatever the backlog.

//!
//! The settings are always compiled, so a configuration naming Kafka is read and refused
//! by name in a build without the `kafka` feature (no librdkafka, no OpenSSL); the client
//! is compiled only with it.

pub mod settings;

#[cfg(feature = "kafka")]
pub mod assignment;
#[cfg(feature = "kafka")]
pub(crate) mod backlog_scan;
#[cfg(feature = "kafka")]
pub mod client;
#[cfg(feature = "kafka")]
mod consumer;
#[cfg(feature = "kafka")]
pub mod context;
#[cfg(feature = "kafka")]
pub mod end_probe;
#[cfg(feature = "kafka")]
mod leave;
#[cfg(feature = "kafka")]
mod ready;

#[cfg(feature = "kafka")]
pub use consumer::KafkaSource;
