//! The write path: everything between a batch the pipeline has pulled and the positions it
//! may acknowledge. [`WritePath`] composes it in one place from configuration; the worker
//! and the tests build it the same way. The policies act on every write in this order
//! (as a tower `ServiceBuilder` stack reads, outermost first):
//!
//! 1. **Admission** ([`limit_gate`]): the pipeline starts a batch only while the batches in
//!    flight are under the concurrency limit, and pulls nothing while the worker is paused
//!    ([`backpressure`]).
//! 2. **Backoff** ([`delivery`]): a piece that failed waits the retry or outage backoff
//!    its failure called for.
//! 3. **Pace** ([`backpressure`]): a first attempt earns the retry budget a share of a
//!    retry; a retry waits for the budget; records the sink refused item by item wait for
//!    their resend turn. What is sent again is owed to the cadence, which pulls that many
//!    fewer fresh records.
//! 4. **Pause** ([`backpressure`]): every write waits while the worker is paused (a
//!    throttle, a Retry-After, an outage).
//! 5. **Limit** ([`limit_gate`]): a resend after no answer, or of rows pushed back at more
//!    writes in flight than the sink took, waits for a place under the limit.
//! 6. **Write, cut when overdue** ([`limit_gate`]): the sink write races the gate's cut
//!    for a write far over the limit; its latency and outcome feed the limit.
//! 7. **Settle** ([`delivery`]): the answer decides each row — written, sent again
//!    (paced as its failure asks, back at step 2), halved to find bad rows, or
//!    dead-lettered — and tells [`backpressure`] what the sink took or refused, which
//!    learns the sink's limit and plans the next tick's rate and batch.
//! 8. **Dead letters**: once every row is settled they are stored, secrets masked; only
//!    then are the batch's positions returned to be acknowledged.

pub mod backpressure;
pub mod delivery;
pub mod limit_gate;
pub mod limit_memory;
mod path;

pub use path::{WritePath, WriteSettings};
