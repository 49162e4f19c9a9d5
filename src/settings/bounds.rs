//! The bounds configuration values are held to, wherever they are checked: past them a
//! wait, a buffer or a count would outgrow what the worker can hold.

/// The slowest rate (and smallest lease capacity) taken: one record in about 17 minutes.
/// Slower, the wait for one record outgrows any clock.
pub const LEAST_RATE: f64 = 0.001;
/// The most records in one batch.
pub const MOST_BATCH: u64 = 1_000_000;
/// The longest record a source holds in memory: 1 GiB.
pub const MOST_RECORD_BYTES: u64 = 1 << 30;
/// The most batches in flight at once.
pub const MOST_IN_FLIGHT: u64 = 10_000;
/// The most latency samples an adaptive limit judges at once.
pub const MOST_WINDOW: u64 = 100_000;
