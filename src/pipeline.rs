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

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::control::cadence::Cadence;
use crate::control::target_rate::TargetRate;
use crate::decode::Decoder;
use crate::health::{Critical, Health, Verdict};
use crate::record::Position;
use crate::shutdown::Shutdown;
use crate::sink::Sink;
use crate::source::{Source, SourceError};
use crate::stats::{Stats, Summary};
use crate::write::WritePath;
use crate::write::backpressure::Backpressure;
use crate::write::delivery::{Batch, Delivery, FatalSinkError, row_bytes};
use crate::write::limit_gate::LimitGate;
use clock::TokioClock;
use key_order::KeyOrder;
pub mod clock;
mod key_order;

/// A free slot waiting for the bucket to refill looks again this soon at the earliest: a
/// high rate refills it in microseconds, and the loop must not spin.
const REFILL_AT_MOST_EVERY: Duration = Duration::from_millis(1);

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
}

type InFlight = FuturesUnordered<JoinHandle<Result<Vec<Position>, FatalSinkError>>>;

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

    /// Runs until drained (`until_empty`), `max_records` is reached, or shutdown.
    pub async fn run(mut self, mut shutdown: Shutdown) -> Result<Summary, PipelineError> {
        let started = Instant::now();
        let tick = self.cadence.tick();
        let mut ticker = tokio::time::interval_at(Instant::now() + self.first_tick(), tick);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut in_flight: InFlight = FuturesUnordered::new();
        let mut allowance: u64 = 0;
        // Granted by the cadence, not yet pulled: up to a batch.
        let mut banked: u64 = 0;
        let mut caught_up = false;
        let mut stop_deadline: Option<Instant> = None;
        let mut failure: Option<PipelineError> = None;
        let mut pulled_total: u64 = 0;
        let mut backlog_at = Instant::now();
        let mut rate_due = false;
        let mut watch_due = false;
        // New writes held by a health probe or the operator, as decided at the last tick.
        let mut held = false;
        self.source.set_prefetch(self.prefetch()).await?;
        self.stats.source_up.store(self.source.is_up(), Relaxed);
        self.stats.rate_limit.set(self.cadence.rate());
        self.stats
            .concurrency_limit
            .store(self.options.max_in_flight as u64, Relaxed);

        loop {
            let stopping = stop_deadline.is_some() || failure.is_some();
            while !stopping
                && (allowance > 0 || banked > 0)
                && in_flight.len() < self.max_in_flight()
                && !self.pressure.is_paused()
                && !held
            {
                let remaining = self
                    .options
                    .max_records
                    .map_or(u64::MAX, |m| m.saturating_sub(pulled_total));
                if remaining == 0 {
                    break;
                }
                if allowance > 0 {
                    // The bucket may be short now and fill within the tick: what is left of
                    // the tick's allowance is taken as it accrues, whenever a slot is free.
                    let granted = self.cadence.take(allowance.min(u64::from(u32::MAX)) as u32);
                    allowance -= u64::from(granted);
                    banked += u64::from(granted);
                }
                // A batch larger than a tick's grant (requests bind) waits until the grants
                // make it up. Otherwise the tick's batch goes once its allowance has accrued:
                // at once when the bucket holds it, or as it refills (split into whatever
                // accrued between wake-ups, one tick's batch became a dozen requests of a few
                // records: 3.6 records per request instead of 13 at 4,000 rec/s and 20 ms
                // ticks, which a sink counting requests throttles). What a tick granted
                // goes at once when nothing more is to come: a tick that grants one record
                // less must not hold it over to double the next.
                let target = if self.batch > self.cadence.quantum() as usize {
                    (self.batch as u64)
                        .min(self.max_batch as u64)
                        .min(remaining)
                } else {
                    (banked + allowance)
                        .min(self.max_batch as u64)
                        .min(remaining)
                        .max(1)
                };
                if banked == 0 || banked < target {
                    break;
                }
                let want = banked.min(self.max_batch as u64).min(remaining);
                banked -= want;
                watch_due = false;
                let pulled = match self.source.pull(want as usize).await {
                    Ok(p) => p,
                    Err(e) => {
                        failure = Some(e.into());
                        break;
                    }
                };
                caught_up = pulled.caught_up;
                self.stats.source_caught_up.store(caught_up, Relaxed);
                self.stats.source_up.store(self.source.is_up(), Relaxed);
                let n = pulled.records.len() as u64;
                if n > 0 {
                    pulled_total += n;
                    Stats::add(&self.stats.pulled, n);
                    for task in self.dispatch(pulled.records, shutdown.clone()) {
                        in_flight.push(task);
                    }
                }
                if caught_up || n < want {
                    allowance = 0;
                    banked = 0;
                }
            }
            if std::mem::take(&mut rate_due)
                && let Err(e) = self.replan(&mut banked).await
            {
                failure.get_or_insert(e.into());
            }
            if std::mem::take(&mut watch_due) && !stopping && failure.is_none() {
                // This tick pulled nothing: the source still hears of new records, which
                // is what earns a worker without capacity its next lease.
                match self.source.watch().await {
                    Ok(true) => self.stats.source_caught_up.store(false, Relaxed),
                    Ok(false) => {}
                    Err(e) => {
                        failure.get_or_insert(e.into());
                    }
                }
            }
            self.stats
                .batches_in_flight
                .store(in_flight.len() as u64, Relaxed);

            let drained = self.options.until_empty && caught_up;
            let limit_reached = self.options.max_records.is_some_and(|m| pulled_total >= m);
            let stopping = stop_deadline.is_some() || failure.is_some();
            if in_flight.is_empty() && (drained || limit_reached || stopping) {
                let clean = failure.is_none() && drained && !limit_reached;
                self.close(clean).await?;
                return match failure {
                    Some(e) => Err(e),
                    None => Ok(self.stats.summary(started.elapsed())),
                };
            }

            let grace_over = async {
                match stop_deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            // A slot is free and the tick's allowance is not spent, but the bucket was short:
            // wake when it holds a batch, rather than at the next tick.
            let refill_at = (!stopping
                && !limit_reached
                && allowance > 0
                && in_flight.len() < self.max_in_flight()
                && self.cadence.rate() > 0.0
                && !self.pressure.is_paused()
                && !held)
                .then(|| {
                    let need = allowance
                        .min((self.max_batch as u64).saturating_sub(banked))
                        .max(1) as f64;
                    let wait = Duration::from_secs_f64(need / self.cadence.rate());
                    Instant::now() + wait.max(REFILL_AT_MOST_EVERY)
                });
            let refill = async {
                match refill_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = refill => {}
                _ = ticker.tick(), if !stopping => {
                    // A paused tick sends nothing fresh: its allowance pays off what the
                    // retries owe, so a long pause leaves no debt to starve the ticks after.
                    let quantum = u64::from(self.cadence.quantum());
                    let fresh = quantum - self.pressure.settle_owed(quantum);
                    match self.health.verdict() {
                        Verdict::Go => held = false,
                        Verdict::Hold { .. } => {
                            // Writes come back as after an outage: from a share of the
                            // rate, climbing to all of it.
                            if !held {
                                self.pressure.unavailable();
                            }
                            held = true;
                        }
                        Verdict::Stop { probe, value } => {
                            let critical = self.health.critical(&probe, value);
                            tracing::error!("{critical}; finishing batches in flight, then stopping");
                            failure.get_or_insert(critical.into());
                        }
                    }
                    allowance = if self.pressure.is_paused() || held { 0 } else { fresh };
                    rate_due = true;
                    watch_due = true;
                    self.stats.source_up.store(self.source.is_up(), Relaxed);
                    if backlog_at.elapsed() >= Duration::from_secs(1) {
                        backlog_at = Instant::now();
                        self.report_backlog().await;
                    }
                }
                Some(done) = in_flight.next() => {
                    match done {
                        Ok(Ok(positions)) => {
                            if let Err(e) = self.source.ack(&positions).await {
                                failure.get_or_insert(e.into());
                            }
                        }
                        Ok(Err(fatal)) => {
                            tracing::error!("{fatal}; finishing batches in flight, then stopping");
                            failure.get_or_insert(fatal.into());
                        }
                        Err(join) => { failure.get_or_insert(join.into()); }
                    }
                }
                _ = shutdown.requested(), if stop_deadline.is_none() => {
                    stop_deadline = Some(Instant::now() + self.options.grace);
                    self.stats.stopping.store(true, Relaxed);
                }
                _ = grace_over => {
                    let left = in_flight.len();
                    for task in in_flight.iter() {
                        task.abort();
                    }
                    self.close(false).await?;
                    return Err(PipelineError::GraceExpired(left));
                }
            }
        }
    }

    /// Right after a tick's take, the rate and batch size for the ticks to come: the
    /// target (static, leased, or the source's share of a capacity), capped by the
    /// worker's own ceiling and the operator's controls, then scaled by what the sink's
    /// push-back allows. The one place the cadence's rate is set; the next tick gets
    /// exactly one new quantum at it.
    async fn replan(&mut self, banked: &mut u64) -> Result<(), SourceError> {
        let (quantum, before) = (self.cadence.quantum(), self.batch);
        if let Some((capacity, reserved)) = self.options.capacity_by_share
            && let Some(share) = self.source.capacity_share()
        {
            // Nothing assigned: keep pulling at a trickle, since pulling is what joins
            // the group (and a worker with no partitions pulls nothing).
            let rate = capacity * share + reserved;
            self.target_rate
                .set(if share == 0.0 { rate.max(1.0) } else { rate });
        }
        let controls = self.health.controls().get();
        self.max_batch = controls.batch.unwrap_or(self.options.max_batch);
        let target = self.target_rate.get();
        let ceiling = [self.options.rate_ceiling, controls.rate]
            .into_iter()
            .flatten()
            .fold(target, f64::min);
        self.pressure.set_ceiling(ceiling);
        let plan = self.pressure.plan(
            self.cadence.tick(),
            self.max_batch,
            self.options.max_batch_bytes,
        );
        self.cadence.set_rate(plan.records_per_second);
        self.batch = plan.batch.max(1);
        // Unused grants never add up to more than a batch (or a tick's worth).
        *banked = (*banked).min(self.batch.max(self.cadence.quantum() as usize) as u64);
        self.stats.rate_limit.set(self.cadence.rate());
        if self.cadence.quantum() != quantum || self.batch != before {
            self.source.set_prefetch(self.prefetch()).await?;
        }
        Ok(())
    }

    /// The first tick comes once the cadence (which starts empty) holds a full batch for
    /// every slot, at the latest one tick from now: at a rate no batch slot can keep up
    /// with (limits off), waiting a whole tick would only delay the first row.
    fn first_tick(&self) -> Duration {
        let rate = self.cadence.rate();
        let all_slots = (self.max_batch * self.options.max_in_flight) as f64;
        let tick = self.cadence.tick();
        if rate > 0.0 {
            tick.min(Duration::from_secs_f64(all_slots / rate))
        } else {
            tick
        }
    }

    /// Closes the source and notes what it has left, for the summary and `/metrics`.
    async fn close(&mut self, drained: bool) -> Result<(), SourceError> {
        self.source.close(drained).await?;
        let _ = self.stats.remaining.set(self.source.remaining().await);
        Ok(())
    }

    /// Batches allowed in flight now: the concurrency limit, never above the configured max.
    fn max_in_flight(&self) -> usize {
        let limit = self.gate.limit().min(self.options.max_in_flight);
        self.stats.concurrency_limit.store(limit as u64, Relaxed);
        limit
    }

    /// Records the pipeline may hold at once: a batch per slot plus the one being pulled.
    fn prefetch(&self) -> usize {
        let batch = (self.cadence.quantum() as usize)
            .max(self.batch)
            .min(self.max_batch)
            .max(1);
        batch * (self.options.max_in_flight + 1)
    }

    /// Decodes records and starts their delivery (upsert: in its keys' turn): one batch, or
    /// several when their bytes exceed `sink.max_batch_bytes` (a larger record goes alone).
    /// Once `stop` fires, a batch only waiting to be retried is given up unacknowledged.
    fn dispatch(
        &self,
        records: Vec<crate::record::Record>,
        stop: Shutdown,
    ) -> Vec<JoinHandle<Result<Vec<Position>, FatalSinkError>>> {
        let max_bytes = self.options.max_batch_bytes.unwrap_or(u64::MAX);
        let mut batches = vec![Batch::default()];
        let mut bytes = 0u64;
        for record in records {
            let position = record.position;
            match self.decoder.decode(record) {
                Ok(row) => {
                    let size = row_bytes(std::slice::from_ref(&row));
                    let batch = batches.last_mut().expect("never empty");
                    if !batch.rows.is_empty() && bytes + size > max_bytes {
                        batches.push(Batch::default());
                        bytes = 0;
                    }
                    bytes += size;
                    let batch = batches.last_mut().expect("never empty");
                    batch.positions.push(position);
                    batch.rows.push(row);
                }
                Err(letter) => {
                    let batch = batches.last_mut().expect("never empty");
                    batch.positions.push(position);
                    batch.dead.push(letter);
                }
            }
        }
        batches
            .into_iter()
            .map(|batch| {
                let delivery = self.delivery.clone();
                let stop = stop.clone();
                let turn = KeyOrder::enter_batch(self.key_order.as_ref(), &batch.rows);
                tokio::spawn(key_order::in_turn(turn, async move {
                    delivery.deliver_until(batch, stop).await
                }))
            })
            .collect()
    }

    async fn report_backlog(&mut self) {
        match self.source.backlog().await {
            Ok(backlog) => self.stats.set_backlog(backlog),
            Err(e) => tracing::debug!("backlog unknown: {e}"),
        }
    }
}
