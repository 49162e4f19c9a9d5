//! sluice drains a durable queue into a database that must not be overrun: it pulls at a
//! smoothed cadence, writes idempotent batches, backs off when the sink says so, and
//! acknowledges only what is durably written or dead-lettered.

pub mod cli;
pub mod config;
pub mod control;
pub mod decode;
pub mod delivery;
pub mod pipeline;
pub mod produce;
pub mod progress;
pub mod record;
pub mod shutdown;
pub mod sink;
pub mod source;
pub mod stats;
