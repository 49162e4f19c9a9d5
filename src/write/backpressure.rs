//! The sink's push-back, shared by one worker's pipeline and all its deliveries. It holds
//! the throttle state (whole-worker pause, which signals are news), the sink's learned
//! limit, and the retry budget, and turns their pure decisions into waits on tokio's clock:
//!
//! - every write waits while the worker is paused ([`Backpressure::clear_to_send`]);
//! - a retry first waits for the budget to allow it ([`Backpressure::retry_permit`]);
//! - records sent again are owed to the cadence, which pulls that many fewer fresh ones,
//!   so that what reaches the sink per second stays within the rate, retries included;
//! - the pipeline takes its rate and batch size from [`Backpressure::plan`] once per tick.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use crate::config::{RateSettings, RetrySettings, ThrottleSettings};
use crate::control::backoff::Backoff;
use crate::control::item_refusals::{ItemRefusals, RefusalVerdict};
use crate::control::retry_budget::RetryBudget;
use crate::control::sink_limit::{BatchShape, LimitParams, Plan, Refused, SinkLimit, Unit};
use crate::control::throttle::{Signal, Throttle};
use crate::stats::Stats;

use super::limit_memory::LimitMemory;

/// The mean record size follows new batches with this weight.
const RECORD_BYTES_WEIGHT: f64 = 0.2;
/// A learned limit is kept for the next run at most this often.
const KEEP_EVERY: Duration = Duration::from_secs(1);
/// The longest one resend's turn lasts, whatever the plan: a worker held at a crawl
/// (nothing held, the floor) still resends a batch within this.
const RESEND_SPAN_MOST: Duration = Duration::from_secs(5);

pub struct Backpressure {
    epoch: Instant,
    state: Mutex<State>,
    /// Records sent again, not yet deducted from the cadence's allowance.
    owed: AtomicU64,
    /// Waits between attempts while the sink cannot be reached: capped by
    /// `throttle.max_pause`, so a sink that is back is noticed within that time.
    outage: Backoff,
    stats: Arc<Stats>,
    /// Where the learned limit is kept for the next run, if anywhere.
    memory: Mutex<Option<LimitMemory>>,
}

struct State {
    throttle: Throttle,
    limit: SinkLimit,
    budget: RetryBudget,
    rng: StdRng,
    /// The configured rate (static, or the sum of leases), records per second.
    ceiling: f64,
    /// Mean bytes per record written lately.
    record_bytes: Option<f64>,
    /// The record rate of the last plan: what resends of refused items are spaced at.
    planned: f64,
    /// When the next resend of refused items may go.
    resend_at: Duration,
    /// When a write the sink throttled last went again, until the pipeline hears of it.
    resent_at: Option<Duration>,
    /// What the share of items refused item by item says.
    refusals: ItemRefusals,
    /// The rate never falls below this share of the ceiling (`throttle.min_multiplier`).
    floor: f64,
    /// The limit last kept for the next run, and when.
    kept: Option<((Unit, f64), Duration)>,
    /// Keeping it failed once: not tried again.
    keep_failed: bool,
}

impl Backpressure {
    /// At most one fresh throttle signal per `rate.tick`; the configured rate is the
    /// ceiling until [`Backpressure::set_ceiling`] changes it.
    pub fn new(
        throttle: &ThrottleSettings,
        retry: &RetrySettings,
        rate: &RateSettings,
        outage: Backoff,
        stats: Arc<Stats>,
    ) -> Self {
        Backpressure {
            epoch: Instant::now(),
            state: Mutex::new(State {
                throttle: Throttle::new(throttle.throttle_params(rate.tick, outage.clone())),
                limit: SinkLimit::new(throttle.limit_params()),
                budget: retry.budget(),
                rng: rand::make_rng(),
                ceiling: rate.records_per_second.cadence_rate(),
                record_bytes: None,
                planned: rate.records_per_second.cadence_rate(),
                resend_at: Duration::ZERO,
                resent_at: None,
                refusals: ItemRefusals::default(),
                floor: throttle.min_multiplier,
                kept: None,
                keep_failed: false,
            }),
            owed: AtomicU64::new(0),
            outage,
            stats,
            memory: Mutex::new(None),
        }
    }

    /// Starts from the limit `memory` holds for this sink, if any, and keeps what is
    /// learned from here on there for the next run.
    pub fn remember(&self, memory: LimitMemory, params: LimitParams) {
        if let Some((unit, per_second)) = memory.recall(SystemTime::now()) {
            tracing::info!(
                unit = unit.name(),
                per_second,
                path = %memory.path().display(),
                "starting from the limit the last run learned of this sink (at throttle.beta of it, no slow start)"
            );
            let mut state = self.lock();
            state.limit = SinkLimit::remembered(params, unit, per_second);
            state.kept = Some(((unit, per_second), Duration::ZERO));
        }
        *crate::lock::lock(&self.memory) = Some(memory);
    }

    /// Keeps the limit learned now for the next run, when it moved by more than 1% since
    /// the last one kept, at most once per [`KEEP_EVERY`] (and at the end, on drop). A
    /// file that cannot be written is not tried again: a full disk would be asked every
    /// second for nothing.
    fn keep_learned(&self, state: &mut State, now: Duration, finally: bool) {
        let Some(learned) = state.limit.learned() else {
            return;
        };
        let moved = state.kept.is_none_or(|((unit, kept), at)| {
            (unit != learned.0 || (learned.1 - kept).abs() > 0.01 * kept)
                && (finally || now >= at.saturating_add(KEEP_EVERY))
        });
        if !moved || state.keep_failed {
            return;
        }
        let memory = crate::lock::lock(&self.memory);
        let Some(memory) = memory.as_ref() else {
            return;
        };
        state.kept = Some((learned, now));
        if let Err(e) = memory.keep(learned.0, learned.1, SystemTime::now()) {
            tracing::warn!(path = %memory.path().display(), "throttle.remember: cannot keep the learned limit for the next run ({e}); it will meet the sink afresh");
            state.keep_failed = true;
        }
    }

    /// The same pause jitter on every run, for scenarios that must replay exactly; a
    /// worker draws its seed at random so that many workers do not pause in step.
    pub fn reseed(&self, seed: u64) {
        self.lock().rng = StdRng::seed_from_u64(seed);
    }

    /// How long a write waits before attempt `attempt` (1 = first retry) of an outage.
    pub fn outage_wait(&self, attempt: u32) -> Duration {
        let mut state = self.lock();
        self.outage.delay(attempt, &mut state.rng)
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::lock::lock(&self.state)
    }

    /// Waits until the worker is not paused; returns the moment the write is sent.
    pub async fn clear_to_send(&self) -> Duration {
        loop {
            let until = self.lock().throttle.paused_until();
            let now = self.now();
            if now >= until {
                return now;
            }
            tokio::time::sleep_until(self.epoch + until).await;
        }
    }

    pub fn is_paused(&self) -> bool {
        let now = self.now();
        self.lock().throttle.is_paused(now)
    }

    /// A request goes out for the first time: it earns the budget a share of a retry.
    pub fn first_attempt(&self) {
        let now = self.now();
        self.lock().budget.first_attempt(now);
    }

    /// Waits until the retry budget allows one more retry of `records`, which are then
    /// owed to the cadence.
    pub async fn retry_permit(&self, records: usize) {
        loop {
            let now = self.now();
            let verdict = self.lock().budget.try_retry(now);
            match verdict {
                Ok(()) => break,
                Err(wait) => {
                    tracing::debug!(?wait, "retry budget spent; the retry waits");
                    tokio::time::sleep(wait).await;
                }
            }
        }
        self.owed.fetch_add(records as u64, Relaxed);
    }

    /// Waits for the turn of `records` the sink refused item by item, which are then owed to
    /// the cadence. Turns follow one another (none before the worker's pause ends), each
    /// as long as its records take at the rate planned when it begins, so resends reach
    /// the sink no faster than the plan however many writes came back part-refused at
    /// once, and a limit learned while they wait spaces them at once; the ticks that
    /// follow pull that many fewer fresh records.
    pub async fn resend_turn(&self, records: usize) {
        self.owed.fetch_add(records as u64, Relaxed);
        loop {
            let now = self.now();
            let at = {
                let mut state = self.lock();
                let at = state.resend_at.max(state.throttle.paused_until());
                if at <= now {
                    // The plan is up to a tick old: a limit learned since bounds it, never
                    // below the floor the plan keeps.
                    let floor = state.floor * state.ceiling;
                    let rate = state
                        .limit
                        .limit(Unit::Records)
                        .map_or(state.planned, |limit| limit.max(floor).min(state.planned))
                        .max(f64::MIN_POSITIVE);
                    let span = (records as f64 / rate).min(RESEND_SPAN_MOST.as_secs_f64());
                    state.resend_at = now + Duration::from_secs_f64(span);
                    return;
                }
                at
            };
            tokio::time::sleep_until(self.epoch + at).await;
        }
    }

    /// Deducts what is owed from a tick's allowance; returns the part deducted.
    pub fn settle_owed(&self, allowance: u64) -> u64 {
        let mut paid = 0;
        let _ = self.owed.fetch_update(Relaxed, Relaxed, |owed| {
            paid = owed.min(allowance);
            Some(owed - paid)
        });
        paid
    }

    /// A write sent at `sent_at` was taken: `records` inserted or already there, `bytes`
    /// of them.
    pub fn written(&self, records: u64, bytes: u64, sent_at: Duration) {
        let now = self.now();
        let mut state = self.lock();
        state.refusals.taken(now, sent_at, records);
        let before = (state.limit.binding(), state.limit.is_experimenting());
        state.limit.on_written(now, sent_at, records, bytes);
        log_phase_change(&state.limit, before);
        state.throttle.on_success();
        if records > 0 {
            let size = bytes as f64 / records as f64;
            state.record_bytes = Some(match state.record_bytes {
                Some(mean) => mean + RECORD_BYTES_WEIGHT * (size - mean),
                None => size,
            });
        }
    }

    /// `write` was throttled. True when this makes an outage (throttles without
    /// Retry-After, nothing written).
    pub fn throttled(&self, write: Refused) -> bool {
        self.throttle(write, None)
    }

    /// As [`Backpressure::throttled`], for a write of `sent` records of which the sink
    /// refused some item by item (a bulk answer) and took the rest, reported first through
    /// [`Backpressure::written`]: what the sink took is what the limit learns from, and the
    /// worker pushes back in proportion to the share refused lately
    /// ([`crate::control::item_refusals`]). A sink answering item by item is up: never an
    /// outage.
    pub fn throttled_items(&self, write: Refused, sent: usize) -> bool {
        let now = self.now();
        let verdict = {
            let mut state = self.lock();
            let planned = state.planned;
            let (sent_at, refused) = (write.sent_at, write.records);
            let verdict = state
                .refusals
                .refused(now, sent_at, refused, sent as u64, planned);
            if let RefusalVerdict::Misread { rate } = verdict {
                state.limit.restore(now, rate);
            }
            verdict
        };
        match verdict {
            RefusalVerdict::Noise => false,
            RefusalVerdict::PushBack(share) => self.throttle(write, Some(share)),
            RefusalVerdict::Misread { rate } => {
                tracing::info!(
                    rate,
                    "the sink refuses a share of items whatever the rate: rate restored, those resent"
                );
                false
            }
        }
    }

    fn throttle(&self, write: Refused, share: Option<f64>) -> bool {
        let now = self.now();
        let Refused {
            sent_at,
            retry_after,
            ..
        } = write;
        let mut state = self.lock();
        let before = state.throttle.paused_until();
        let signal = Signal {
            now,
            sent_at,
            retry_after,
            share,
        };
        let State {
            throttle,
            limit,
            rng,
            ..
        } = &mut *state;
        let reaction = throttle.on_throttle(signal, rng);
        if reaction.outage {
            limit.on_outage();
        } else {
            let before = (limit.binding(), limit.is_experimenting());
            limit.on_throttle(now, reaction.fresh, write);
            if reaction.fresh {
                tracing::debug!(
                    records = ?limit.limit(Unit::Records),
                    requests = ?limit.limit(Unit::Requests),
                    bytes = ?limit.limit(Unit::Bytes),
                    experimenting = limit.is_experimenting(),
                    "sink limit (per second)"
                );
            }
            log_phase_change(limit, before);
        }
        drop(state);
        if reaction.fresh {
            Stats::add(&self.stats.rate_cuts, 1);
        }
        if let Some(wait) = retry_after {
            Stats::add(&self.stats.retry_afters, 1);
            self.stats
                .last_retry_after_ms
                .store(wait.as_millis() as u64, Relaxed);
        }
        if reaction.paused_until > before && reaction.paused_until > now {
            Stats::add(&self.stats.pauses, 1);
            let pause = reaction.paused_until - now;
            if pause >= Duration::from_secs(1) {
                tracing::info!(?pause, "sink throttled: worker paused");
            } else {
                tracing::debug!(?pause, "sink throttled: worker paused");
            }
        }
        reaction.outage
    }

    /// The unit whose learned limit bounds the rate, if any.
    pub fn binding(&self) -> Option<Unit> {
        self.lock().limit.binding()
    }

    /// The sink has not pushed back yet and slow start holds the rate below the ceiling.
    pub fn is_slow_starting(&self) -> bool {
        self.lock().limit.is_slow_starting()
    }

    /// Slow start's round was answered: a plan now grows the rate (ticks `tick` apart)
    /// from now rather than from the next tick.
    pub fn slow_start_grows(&self, tick: Duration) -> bool {
        let now = self.now();
        self.lock().limit.slow_start_grows(now, tick)
    }

    /// A write the sink refused with a throttle goes again at `at`: the sink's room is
    /// spent by it.
    pub fn resent_after_throttle(&self, at: Duration) {
        self.lock().resent_at = Some(at);
    }

    /// How long ago a refused write last went again, once: the cadence restarts from it.
    pub fn take_resent(&self) -> Option<Duration> {
        let at = self.lock().resent_at.take()?;
        Some(self.now().saturating_sub(at))
    }

    /// How long fresh records wait for the quiet after the first push-back, at ticks
    /// `tick` apart (see [`SinkLimit::quiet_for`]).
    pub fn quiet_for(&self, tick: Duration) -> Option<Duration> {
        let now = self.now();
        self.lock().limit.quiet_for(now, tick)
    }

    /// How many push-backs the sink limit has learned from: a new one is planned from at
    /// once, not at the next tick.
    pub fn lessons(&self) -> u64 {
        self.lock().limit.lessons()
    }

    /// The sink could not be reached or did not answer: nothing about its capacity.
    pub fn unavailable(&self) {
        self.lock().limit.on_outage();
    }

    /// The rate and batch size for the next tick; also published in the stats.
    pub fn plan(&self, tick: Duration, max_batch: usize, max_batch_bytes: Option<u64>) -> Plan {
        let now = self.now();
        let mut state = self.lock();
        let shape = BatchShape {
            tick,
            max_batch,
            max_batch_bytes,
            record_bytes: state.record_bytes,
        };
        let ceiling = state.ceiling;
        let before = (state.limit.binding(), state.limit.is_experimenting());
        let plan = state.limit.plan(now, ceiling, shape);
        log_phase_change(&state.limit, before);
        state.planned = plan.records_per_second;
        // A worker holding no capacity (ceiling 0) is not throttled: its share stays whole.
        let share = if ceiling > 0.0 {
            plan.records_per_second / ceiling
        } else {
            1.0
        };
        self.stats.rate_multiplier.set(share);
        self.stats.batch_records.store(plan.batch as u64, Relaxed);
        for unit in Unit::ALL {
            self.stats
                .sink_limit(unit)
                .set(state.limit.limit(unit).unwrap_or(0.0));
        }
        self.stats
            .sink_limit_binding
            .store(state.limit.binding().map_or(0, |u| u as u64 + 1), Relaxed);
        self.keep_learned(&mut state, now, false);
        plan
    }

    /// The configured rate changed (a lease gained or lost).
    pub fn set_ceiling(&self, ceiling: f64) {
        self.lock().ceiling = ceiling;
    }
}

impl Drop for Backpressure {
    /// The limit learned last, kept for the next run.
    fn drop(&mut self) {
        let now = self.now();
        let mut state = self.lock();
        self.keep_learned(&mut state, now, true);
    }
}

/// What a change of the sink limit's phase tells an operator: an experiment begun or
/// ended (by a throttle, an answer or a plan), and the unit that binds now.
fn log_phase_change(limit: &SinkLimit, (binding, experimenting): (Option<Unit>, bool)) {
    if limit.is_experimenting() != experimenting {
        tracing::debug!(
            experimenting = limit.is_experimenting(),
            requests = ?limit.limit(Unit::Requests),
            "sink limit experiment"
        );
    }
    if limit.binding() != binding
        && let Some(unit) = limit.binding()
    {
        tracing::info!(
            unit = unit.name(),
            "the sink's limit binds in {}",
            unit.name()
        );
    }
}

#[cfg(test)]
mod tests;
