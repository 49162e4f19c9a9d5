//! sluice drains a durable queue into a database that must not be overrun: it pulls at a
//! smoothed cadence, writes idempotent batches, backs off when the sink says so, and
//! acknowledges only what is durably written or dead-lettered.
//!
//! # Map
//!
//! A record's way, then what steers it, then what runs around it; one module a line.
//!
//! - [`source`]: where records come from (a file, Kafka, AMQP); pulls only what is asked.
//! - [`record`]: what flows from a source to a sink (positions, rows, dead letters).
//! - [`decode`]: raw records into rows, or into dead letters saying what is wrong.
//! - [`pipeline`]: the loop: each tick pulls what the cadence grants into free batch slots.
//! - [`write`]: from a pulled batch to the positions it may acknowledge (limits, retries).
//! - [`sink`]: where rows go (SQLite, PostgreSQL, MySQL, HTTP, Elasticsearch).
//! - [`control`]: pure state machines (cadence, limits, backoff) that are given the time.
//! - [`health`]: the database's health and the operator's say, turned into write or hold.
//! - [`lease`]: capacity leases, so N workers share one sink's capacity.
//! - [`stats`]: counters shared by the pipeline, its deliveries and its reports.
//! - [`config`]: the configuration: file, `SLUICE_*` variables, flags; validated up front.
//! - [`settings`]: what every component's settings are checked with (problems, bounds).
//! - [`tls`]: TLS files shared by HTTP sinks and AMQP, and refused certificates told apart.
//! - [`cli`]: the command line: loads the configuration, runs a command, maps exit codes.
//! - [`check`]: `sluice check`: reaches everything `run` needs, changing nothing.
//! - [`plan`]: `sluice plan`: what is queued, at what rate, and for how long.
//! - [`produce`]: `sluice produce`: NDJSON lines into the configured queue.
//! - [`sim_sink`]: `sluice sim-sink`: an HTTP endpoint that behaves like a limited database.
//! - [`telemetry`]: Prometheus metrics, liveness, readiness and the control API over HTTP.
//! - [`progress`]: a progress bar in a terminal, a log line every ten seconds elsewhere.
//! - [`logging`]: log lines on stderr, text or JSON, always through [`redact`].
//! - [`redact`]: credentials never reach a log line, an error, a metric or a report.
//! - [`shutdown`]: the run's `CancellationToken`, cancelled on a signal or the deadline.
//! - [`lock`]: a mutex that stays usable after a holder panicked.
//! - [`atomic_f64`]: an `f64` shared by tasks without a lock.
//! - `fuzz_targets`: the bodies of the fuzz targets (hidden from the docs).
//! - `testing`: helpers the unit tests share (tests only).

pub(crate) mod atomic_f64;
pub(crate) mod check;
pub mod cli;
pub mod config;
pub mod control;
pub mod decode;
pub mod format;
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
#[cfg(test)]
mod testing;
pub mod tls;
pub mod write;
