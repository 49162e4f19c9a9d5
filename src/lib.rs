//! sluice drains a durable queue into a database that must not be overrun: it pulls at a
//! smoothed cadence, writes idempotent batches, backs off when the sink says so, and
//! acknowledges only what is durably written or dead-lettered.

pub mod atomic_f64;
pub mod check;
pub mod cli;
pub mod config;
pub mod control;
pub mod decode;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod health;
pub mod lease;
pub mod lock;
pub mod logging;
pub mod pipeline;
pub mod plan;
pub mod produce;
pub mod progress;
pub mod record;
pub mod redact;
pub mod settings;
pub mod shutdown;
pub mod sim_sink;
pub mod sink;
pub mod source;
pub mod stats;
pub mod telemetry;
pub mod tls;
pub mod write;
