//! RabbitMQ (AMQP 0-9-1) queue. The broker's prefetch is sized from what the worker may
//! write now, so unacknowledged messages held in memory stay bounded; messages are acked
//! (multiple-ack over contiguous delivery tags) only after their batch is written or
//! dead-lettered. A lost connection is re-established with backoff: whatever was not
//! acked is redelivered by the broker and absorbed by the idempotent sink.
//!
//! The settings are always compiled, so a configuration naming AMQP is read and refused
//! by name in a build without the `amqp` feature; the client (lapin) only with it.

pub mod settings;

#[cfg(feature = "amqp")]
mod broker;
#[cfg(feature = "amqp")]
mod consumer;
#[cfg(feature = "amqp")]
mod headers;

#[cfg(feature = "amqp")]
pub use broker::{QueueDepth, connect, inspect};
#[cfg(feature = "amqp")]
pub use consumer::AmqpSource;
