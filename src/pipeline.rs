//! The loop: each tick the cadence grants up to `rate × tick` records; while a batch slot
//! is free the pipeline pulls at most what was granted, decodes it, and hands it to a
//! delivery; when a delivery settles its batch, the positions are acknowledged to the
//! source. Nothing is pulled that cannot be written now, and nothing is acknowledged
//! before it is written or dead-lettered.
//!
//! The sink's push-back steers the loop: while the worker is paused nothing is pulled;
//! records sent again are deducted from the next ticks' allowance; and after each tick's
//! take the cadence and the batch size are set to what the sink's learned limit allows.
//! When the sink counts requests, a batch is larger than a tick's grant: grants are
//! banked over ticks until a batch's worth is there, so the record rate stays and the
//! request rate falls.
//!
//! [`Pipeline::run`] reads as the loop it is; the loop's state and each step are in
//! `run.rs`, the rate, batch and slots it is steered by in `steering.rs`, how pulled
//! records become batches on their way in `dispatch.rs`, the upsert order of keys in
//! `key_order.rs`, and the clock the cadence runs on in `clock.rs`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::task::JoinHandle;

use crate::control::cadence::Cadence;
use crate::control::target_rate::TargetRate;
use crate::decode::Decoder;
use crate::health::{Critical, Health};
use crate::record::Position;
use crate::sink::Sink;
use crate::source::{Source, SourceError};
use crate::stats::{Stats, Summary};
use crate::write::WritePath;
use crate::write::backpressure::Backpressure;
use crate::write::delivery::{Delivery, FatalSinkError};
use crate::write::limit_gate::LimitGate;
use clock::TokioClock;
use key_order::KeyOrder;
use run::Run;
use tokio_util::sync::CancellationToken;

pub mod clock;
mod dispatch;
mod key_order;
mod run;
mod steering;

/// How a run ends and how big its steps are.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Stop once the source is caught up and everything pulled is settled.
    pub until_empty: bool,
    /// Stop after pulling this many records.
    pub max_records: Option<u64>,
    /// Most records per batch (one sink write).
    pub max_batch: usize,
    /// Most bytes of records per batch; a larger batch is split.
    pub max_batch_bytes: Option<u64>,
    /// Most batches in flight.
    pub max_in_flight: usize,
    /// How long batches in flight may take to finish after shutdown is requested.
    pub grace: Duration,
    /// `(capacity, reserved)` when the rate is the source's share of a capacity (Kafka:
    /// assigned / topic partitions), re-read every tick so a rebalance re-divides it.
    pub capacity_by_share: Option<(f64, f64)>,
    /// The worker's own ceiling on a leased or shared rate (`rate.records_per_second` when
    /// set): what the leases or the share give beyond it goes unused.
    pub rate_ceiling: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("source failed: {0}")]
    Source(#[from] SourceError),
    #[error(transparent)]
    Sink(#[from] FatalSinkError),
    #[error(
        "shutdown grace period ran out with {0} batches in flight; they were not acknowledged and will be delivered again"
    )]
    GraceExpired(usize),
    #[error("a delivery task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Critical(#[from] Critical),
}

pub struct Pipeline {
    source: Box<dyn Source>,
    sink: Arc<dyn Sink>,
    decoder: Decoder,
    cadence: Cadence<TokioClock>,
    target_rate: TargetRate,
    delivery: Arc<Delivery>,
    pressure: Arc<Backpressure>,
    gate: Arc<LimitGate>,
    stats: Arc<Stats>,
    options: RunOptions,
    /// Records per batch: a tick's grant, or more when the sink counts requests.
    batch: usize,
    /// Most records per batch now: `max_batch`, or what the operator set.
    max_batch: usize,
    /// Database-health probes and operator controls, asked at every tick.
    health: Arc<Health>,
    key_order: Option<Arc<KeyOrder>>,
    /// What the target rate is, for "bounded by": the configured rate, or the leases.
    target_by: &'static str,
    /// What set the rate at the last plan (empty: nothing, there is no ceiling).
    rate_by: String,
}

/// A batch's delivery, spawned: the positions to acknowledge once the batch is settled.
type DeliveryTask = JoinHandle<Result<Vec<Position>, FatalSinkError>>;
type InFlight = FuturesUnordered<DeliveryTask>;

impl Pipeline {
    pub fn new(
        source: Box<dyn Source>,
        decoder: Decoder,
        cadence: Cadence<TokioClock>,
        write_path: WritePath,
        stats: Arc<Stats>,
        options: RunOptions,
    ) -> Self {
        let pressure = write_path.pressure().clone();
        pressure.set_ceiling(cadence.rate());
        let batch = cadence.quantum().max(1) as usize;
        Pipeline {
            batch,
            max_batch: options.max_batch,
            health: Arc::new(Health::new(&[], stats.clone())),
            key_order: decoder.is_upsert().then(Arc::default),
            target_by: crate::control::bounded_by::CEILING,
            rate_by: String::new(),
            source,
            sink: write_path.sink().clone(),
            decoder,
            target_rate: TargetRate::new(cadence.rate()),
            cadence,
            pressure,
            gate: write_path.gate().clone(),
            delivery: write_path.delivery().clone(),
            stats,
            options,
        }
    }

    /// Holds or stops new writes by `health`'s verdict, and takes the operator's controls
    /// from it.
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        self.health = health;
        self
    }

    /// The target rate comes from leases (or a share of a capacity), not the
    /// configuration: "bounded by" says so, and every second holds no more than the
    /// rate, so that what the workers sharing the capacity send adds up to no more than
    /// it in any second.
    pub fn leased(mut self) -> Self {
        self.target_by = "leases";
        self.cadence.hold_each_second();
        self
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    pub fn sink(&self) -> Arc<dyn Sink> {
        self.sink.clone()
    }

    /// A handle to change the rate while the pipeline runs; applied at the next tick.
    pub fn target_rate(&self) -> TargetRate {
        self.target_rate.clone()
    }

    /// Runs until drained (`until_empty`), `max_records` is reached, or shutdown: after
    /// each step it waits for whichever comes first of the bucket holding a batch, a tick,
    /// a batch settled, shutdown and the end of its grace period.
    pub async fn run(self, shutdown: CancellationToken) -> Result<Summary, PipelineError> {
        let mut run = Run::start(self).await?;
        loop {
            run.fill_free_slots(&shutdown).await;
            run.after_the_take().await;
            if let Some(summary) = run.finish_when_done().await? {
                return Ok(summary);
            }
            let refill = sleep_until(run.refill_at());
            let grace_over = sleep_until(run.stop_deadline);
            tokio::select! {
                _ = refill => {}
                _ = run.ticker.tick(), if !run.stopping() => run.on_tick().await,
                Some(done) = run.in_flight.next() => run.on_settled(done).await,
                _ = shutdown.cancelled(), if run.stop_deadline.is_none() => run.on_shutdown(),
                _ = grace_over => return Err(run.grace_expired().await),
            }
        }
    }
}

/// Completes at `at`; never without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
