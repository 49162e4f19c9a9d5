//! sluice drains a durable queue into a database that must not be overrun: it pulls at a
//! smoothed cadence, writes idempotent batches, backs off when the sink says so, and
//! acknowledges only what is durably written or dead-lettered.

pub(crate) mod atomic_f64;
pub(crate) mod check;
pub mod cli;
pub mod config;
pub mod control;
pub mod decode;
#[doc(hidden)]
pub mod fuzz_targets;
pub(crate) mod health;
pub mod lease;
pub(crate) mod lock;
pub(crate) mod logging;
pub mod pipeline;
pub(crate) mod plan;
pub(crate) mod produce;
pub(crate) mod progress;
pub mod record;
pub(crate) mod redact;
pub mod settings;
pub mod shutdown;
pub mod sim_sink;
pub mod sink;
pub mod source;
pub mod stats;
pub mod telemetry;
pub mod tls;
pub mod write;
