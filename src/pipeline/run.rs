//! One run of the loop: its state between steps, and the steps [`Pipeline::run`] takes in
//! turn — fill the free slots, plan after the take, finish when done — and the events it
//! waits for: the bucket refilled, a tick, a batch settled, shutdown, the grace period
//! over.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::task::JoinError;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::{InFlight, Pipeline, PipelineError};
use crate::control::cadence::fresh_after_resends;
use crate::health::Verdict;
use crate::record::Position;
use crate::stats::{Stats, Summary};
use crate::write::delivery::FatalSinkError;
use tokio_util::sync::CancellationToken;

/// A free slot waiting for the bucket to refill looks again this soon at the earliest: a
/// high rate refills it in microseconds, and the loop must not spin.
const REFILL_AT_MOST_EVERY: Duration = Duration::from_millis(1);

/// How often the source's backlog is asked for, at most (once per tick when ticks are
/// slower).
const BACKLOG_EVERY: Duration = Duration::from_secs(1);

/// What a settled batch's task returns: the positions to acknowledge, a fatal sink error,
/// or the task's own failure.
pub(super) type DeliveryResult = Result<Result<Vec<Position>, FatalSinkError>, JoinError>;

/// The loop's state between its steps.
pub(super) struct Run {
    pipeline: Pipeline,
    started: Instant,
    pub(super) ticker: Interval,
    pub(super) in_flight: InFlight,
    /// What the last tick allows, not yet granted by the cadence (the bucket may be short
    /// at first and fill within the tick).
    allowance: u64,
    /// Granted by the cadence, not yet pulled: up to a batch.
    banked: u64,
    /// The source said at the last pull that it has no more for now.
    caught_up: bool,
    /// When the grace period after a shutdown request ends.
    pub(super) stop_deadline: Option<Instant>,
    /// What ends the run once the batches in flight are settled.
    failure: Option<PipelineError>,
    pulled_total: u64,
    /// When the backlog was last asked for.
    backlog_at: Instant,
    /// A tick came: the rate and batch are planned once its take is done.
    rate_due: bool,
    /// A tick came and nothing was pulled since: the source is watched after the take.
    watch_due: bool,
    /// New writes held by a health probe or the operator, as decided at the last tick.
    held: bool,
    /// When the last tick came, and its quantum: what bounded the time since is noted at
    /// the next.
    tick_at: Instant,
    tick_quantum: u64,
    /// The sink limit's lessons as of the last plan.
    lessons: u64,
}

impl Run {
    /// The first tick comes at once with its tick's worth, its rate planned as every
    /// tick's (a sink met for the first time is met at a share of it); the source is told
    /// how much to prefetch and the stats start from the configured limits.
    pub(super) async fn start(mut pipeline: Pipeline) -> Result<Run, PipelineError> {
        let started = Instant::now();
        pipeline.replan(&mut 0).await?;
        let all_slots = pipeline.max_batch * pipeline.options.max_in_flight;
        pipeline
            .cadence
            .fill(u32::try_from(all_slots).unwrap_or(u32::MAX));
        let mut ticker = tokio::time::interval(pipeline.cadence.tick());
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let backlog_at = Instant::now();
        pipeline.source.set_prefetch(pipeline.prefetch()).await?;
        let stats = &pipeline.stats;
        stats.source_up.store(pipeline.source.is_up(), Relaxed);
        stats.rate_limit.set(pipeline.cadence.rate());
        stats
            .concurrency_limit
            .store(pipeline.options.max_in_flight as u64, Relaxed);
        Ok(Run {
            pipeline,
            started,
            ticker,
            in_flight: InFlight::new(),
            allowance: 0,
            banked: 0,
            caught_up: false,
            stop_deadline: None,
            failure: None,
            pulled_total: 0,
            backlog_at,
            rate_due: false,
            watch_due: false,
            held: false,
            tick_at: Instant::now(),
            tick_quantum: 0,
            lessons: 0,
        })
    }

    /// Shutdown was requested or something failed: nothing new is pulled, the batches in
    /// flight are finished.
    pub(super) fn stopping(&self) -> bool {
        self.stop_deadline.is_some() || self.failure.is_some()
    }

    fn limit_reached(&self) -> bool {
        let max_records = self.pipeline.options.max_records;
        max_records.is_some_and(|m| self.pulled_total >= m)
    }

    /// Records still to pull before `max_records`.
    fn remaining(&self) -> u64 {
        let max_records = self.pipeline.options.max_records;
        max_records.map_or(u64::MAX, |m| m.saturating_sub(self.pulled_total))
    }

    /// Pulls and dispatches batches while a slot is free, something is allowed or banked,
    /// and the worker is neither paused nor held.
    pub(super) async fn fill_free_slots(&mut self, shutdown: &CancellationToken) {
        if let Some(since) = self.pipeline.pressure.take_resent() {
            // A refused write went again and spent the sink's room: what the cadence
            // granted before must not follow it at once (a tick's 47 left over went 50 ms
            // after a resend of 109, where the sink had refilled 40).
            self.pipeline.cadence.restart(since);
            self.banked = 0;
        }
        while !self.stopping()
            && (self.allowance > 0 || self.banked > 0)
            && self.in_flight.len() < self.pipeline.max_in_flight()
            && !self.pipeline.pressure.is_paused()
            && !self.held
            && self.quiet_for().is_none()
        {
            let Some(want) = self.take_a_batch() else {
                break;
            };
            if !self.pull(want, shutdown).await {
                break;
            }
        }
    }

    /// The quiet after the sink first pushed back, if it lasts: a push-back within it
    /// would be too near the first to measure the sink, and cost its records for nothing.
    fn quiet_for(&self) -> Option<Duration> {
        let p = &self.pipeline;
        p.pressure.quiet_for(p.cadence.tick())
    }

    /// Takes what has accrued of the tick's allowance; returns the records to pull once a
    /// batch's worth is banked, and `None` while it is not (or `max_records` is reached).
    fn take_a_batch(&mut self) -> Option<u64> {
        let remaining = self.remaining();
        if remaining == 0 {
            return None;
        }
        let p = &mut self.pipeline;
        let max_batch = p.max_batch as u64;
        if self.allowance > 0 {
            // The bucket may be short now and fill within the tick: what is left of the
            // tick's allowance is taken as it accrues, whenever a slot is free. A tick in
            // parts banks no more than a part, or two parts would go as one.
            let part = u64::from(p.cadence.part());
            let room = if part < u64::from(p.cadence.quantum()) {
                part.saturating_sub(self.banked)
            } else {
                u64::MAX
            };
            let granted = p
                .cadence
                .take(self.allowance.min(room).min(u64::from(u32::MAX)) as u32);
            self.allowance -= u64::from(granted);
            self.banked += u64::from(granted);
        }
        // A batch larger than a tick's grant (requests bind) waits until the grants make
        // it up. Otherwise the tick's batch goes once its allowance has accrued: at once
        // when the bucket holds it, or as it refills (split into whatever accrued between
        // wake-ups, one tick's batch became a dozen requests of a few records: 3.6 records
        // per request instead of 13 at 4,000 rec/s and 20 ms ticks, which a sink counting
        // requests throttles). What a tick granted goes at once when nothing more is to
        // come: a tick that grants one record less must not hold it over to double the
        // next.
        let target = if p.batch > p.cadence.quantum() as usize {
            (p.batch as u64).min(max_batch).min(remaining)
        } else {
            (self.banked + self.allowance)
                .min(u64::from(p.cadence.part()))
                .min(max_batch)
                .min(remaining)
                .max(1)
        };
        if self.banked == 0 || self.banked < target {
            return None;
        }
        let want = self.banked.min(max_batch).min(remaining);
        self.banked -= want;
        Some(want)
    }

    /// Pulls up to `want` records and starts their delivery; false when the source failed.
    async fn pull(&mut self, want: u64, shutdown: &CancellationToken) -> bool {
        self.watch_due = false;
        let p = &mut self.pipeline;
        let pulled = match p.source.pull(want as usize).await {
            Ok(pulled) => pulled,
            Err(e) => {
                self.failure = Some(e.into());
                return false;
            }
        };
        self.caught_up = pulled.caught_up;
        p.stats.source_caught_up.store(self.caught_up, Relaxed);
        p.stats.source_up.store(p.source.is_up(), Relaxed);
        let n = pulled.records.len() as u64;
        if n > 0 {
            self.pulled_total += n;
            Stats::add(&p.stats.pulled, n);
            self.in_flight
                .extend(p.dispatch(pulled.records, shutdown.clone()));
        }
        if self.caught_up || n < want {
            self.allowance = 0;
            self.banked = 0;
        }
        true
    }

    /// After a tick's take (or an answer that grew slow start's share): the rate and batch
    /// size for the ticks to come ([`Pipeline::replan`]); and if the tick pulled nothing,
    /// the source is watched.
    pub(super) async fn after_the_take(&mut self) {
        if std::mem::take(&mut self.rate_due) {
            let before = u64::from(self.pipeline.cadence.quantum());
            if let Err(e) = self.pipeline.replan(&mut self.banked).await {
                self.failure.get_or_insert(e.into());
            }
            // What is left of the tick's grant, to take or taken and not yet sent, shrinks
            // with the rate. Granted at the old rate and accruing at the new one, a record
            // of it went alone a few ms after the rest (25 + 1 where the rate fell from 26
            // records a tick to 25); taken and kept, it went with the next tick's worth
            // (35 + 47 in one request at 48 a tick, just after the sink pushed back).
            let cut = before.saturating_sub(u64::from(self.pipeline.cadence.quantum()));
            let from_allowance = cut.min(self.allowance);
            self.allowance -= from_allowance;
            self.banked = self.banked.saturating_sub(cut - from_allowance);
        }
        if std::mem::take(&mut self.watch_due) && !self.stopping() {
            // This tick pulled nothing: the source still hears of new records, which is
            // what earns a worker without capacity its next lease.
            match self.pipeline.source.watch().await {
                Ok(true) => self.pipeline.stats.source_caught_up.store(false, Relaxed),
                Ok(false) => {}
                Err(e) => {
                    self.failure.get_or_insert(e.into());
                }
            }
        }
    }

    /// Once nothing is in flight and the run is drained (`until_empty`), at `max_records`,
    /// or stopping: closes the source and returns the summary, or what failed.
    pub(super) async fn finish_when_done(&mut self) -> Result<Option<Summary>, PipelineError> {
        let stats = &self.pipeline.stats;
        stats
            .batches_in_flight
            .store(self.in_flight.len() as u64, Relaxed);
        let drained = self.pipeline.options.until_empty && self.caught_up;
        let limit_reached = self.limit_reached();
        if !self.in_flight.is_empty() || !(drained || limit_reached || self.stopping()) {
            return Ok(None);
        }
        let clean = self.failure.is_none() && drained && !limit_reached;
        self.close(clean).await?;
        match self.failure.take() {
            Some(e) => Err(e),
            None => Ok(Some(self.pipeline.stats.summary(self.started.elapsed()))),
        }
    }

    /// A slot is free and the tick's allowance is not spent, but the bucket was short (or
    /// the last second full): when it will hold a batch, rather than at the next tick.
    pub(super) fn refill_at(&mut self) -> Option<Instant> {
        let stopping = self.stopping();
        let limit_reached = self.limit_reached();
        let p = &mut self.pipeline;
        let refills = !stopping
            && !limit_reached
            && self.allowance > 0
            && self.in_flight.len() < p.max_in_flight()
            && p.cadence.rate() > 0.0
            && !p.pressure.is_paused()
            && !self.held;
        refills.then(|| {
            if let Some(wait) = p.pressure.quiet_for(p.cadence.tick()) {
                return Instant::now() + wait;
            }
            // A second that holds all the rate allows (workers sharing a pool) makes room
            // when its oldest records leave it: the tick's worth goes then, not a tick late.
            if let Some(wait) = p.cadence.second_full_for() {
                return Instant::now() + wait.max(REFILL_AT_MOST_EVERY);
            }
            let need = self
                .allowance
                .min(
                    (p.max_batch as u64)
                        .min(u64::from(p.cadence.part()))
                        .saturating_sub(self.banked),
                )
                .max(1) as f64;
            let wait = Duration::from_secs_f64(need / p.cadence.rate());
            Instant::now() + wait.max(REFILL_AT_MOST_EVERY)
        })
    }

    /// A tick: its allowance (less what resends owe), the health verdict, the plan due
    /// after its take, and now and then the backlog.
    pub(super) async fn on_tick(&mut self) {
        let p = &self.pipeline;
        // A paused tick sends nothing fresh: its allowance pays off what the retries owe,
        // so a long pause leaves no debt to starve the ticks after.
        let quantum = u64::from(p.cadence.quantum());
        let spent = std::mem::replace(&mut self.tick_at, Instant::now()).elapsed();
        if let Some(bound) = self.bound_since_the_last_tick() {
            crate::lock::lock(&p.stats.bounded_by).add(&bound, spent);
        }
        self.tick_quantum = quantum;
        let fresh = fresh_after_resends(quantum, p.pressure.settle_owed(quantum));
        match p.health.verdict() {
            Verdict::Go => self.held = false,
            Verdict::Hold { .. } => {
                // Writes come back as after an outage: from a share of the rate, climbing
                // to all of it.
                if !self.held {
                    p.pressure.unavailable();
                }
                self.held = true;
            }
            Verdict::Stop { probe, value } => {
                let critical = p.health.critical(&probe, value);
                tracing::error!("{critical}; finishing batches in flight, then stopping");
                self.failure.get_or_insert(critical.into());
            }
        }
        // What was banked before goes with it: a few records banked before the pause
        // went alone once it ended, a request of 3 that a gateway counting requests
        // refused (and paused the worker again).
        if p.pressure.is_paused() || self.held {
            self.allowance = 0;
            self.banked = 0;
        } else if p.batch > p.cadence.quantum() as usize {
            // Banking into whole batches: what was banked waits for the rest of a batch.
            self.allowance = fresh;
        } else {
            // Taken last tick and not yet sent (its worth accrued just before this tick),
            // it goes as part of this tick's worth, not beside it: with it, the tick's
            // worth went as 23 and the record left over alone 10 ms later.
            self.allowance = fresh.saturating_sub(self.banked);
        }
        self.rate_due = true;
        self.watch_due = true;
        p.stats.source_up.store(p.source.is_up(), Relaxed);
        if self.backlog_at.elapsed() >= BACKLOG_EVERY {
            self.backlog_at = Instant::now();
            self.report_backlog().await;
        }
    }

    /// What held the worker back over the last tick: a hold, the sink pausing it, or with
    /// the tick's grant (nearly) all taken whatever set the rate; else either nothing
    /// more to read or every slot busy writing. None before the first tick.
    fn bound_since_the_last_tick(&self) -> Option<String> {
        use crate::control::bounded_by::{SINK_PUSH_BACK, SOURCE, WRITE_LATENCY};
        let p = &self.pipeline;
        if self.held {
            let by = p.health.held_by().unwrap_or_else(|| "hold".into());
            return Some(format!("{by} (held)"));
        }
        if self.tick_quantum == 0 {
            return None;
        }
        Some(
            if p.pressure.is_paused() {
                SINK_PUSH_BACK
            } else if self.allowance * 5 <= self.tick_quantum && !p.rate_by.is_empty() {
                p.rate_by.as_str()
            } else if self.caught_up {
                SOURCE
            } else {
                WRITE_LATENCY
            }
            .to_string(),
        )
    }

    /// A batch settled: its positions are acknowledged; a fatal sink error or a failed
    /// task stops the run once the others are finished. An answer that closes slow
    /// start's round, or the sample of a push-back the sink limit learns from, has the
    /// rate planned at once: it changes from the answer, not a tick later (the rest of the
    /// tick went at the guess the sample corrected, and was refused).
    pub(super) async fn on_settled(&mut self, done: DeliveryResult) {
        match done {
            Ok(Ok(positions)) => {
                if let Err(e) = self.pipeline.source.ack(&positions).await {
                    self.failure.get_or_insert(e.into());
                }
                let p = &self.pipeline;
                let lessons = p.pressure.lessons();
                if p.pressure.slow_start_grows(p.cadence.tick()) || lessons != self.lessons {
                    self.lessons = lessons;
                    self.rate_due = true;
                }
            }
            Ok(Err(fatal)) => {
                tracing::error!("{fatal}; finishing batches in flight, then stopping");
                self.failure.get_or_insert(fatal.into());
            }
            Err(join) => {
                self.failure.get_or_insert(join.into());
            }
        }
    }

    /// Shutdown was requested: the batches in flight have the grace period to finish.
    pub(super) fn on_shutdown(&mut self) {
        self.stop_deadline = Some(Instant::now() + self.pipeline.options.grace);
        self.pipeline.stats.stopping.store(true, Relaxed);
    }

    /// The grace period ran out: the batches still in flight are aborted, unacknowledged.
    pub(super) async fn grace_expired(&mut self) -> PipelineError {
        let left = self.in_flight.len();
        for task in self.in_flight.iter() {
            task.abort();
        }
        match self.close(false).await {
            Ok(()) => PipelineError::GraceExpired(left),
            Err(e) => e,
        }
    }

    /// Closes the source and notes what it has left, for the summary and `/metrics`.
    async fn close(&mut self, drained: bool) -> Result<(), PipelineError> {
        let p = &mut self.pipeline;
        p.source.close(drained).await?;
        let _ = p.stats.remaining.set(p.source.remaining().await);
        Ok(())
    }

    async fn report_backlog(&mut self) {
        let p = &mut self.pipeline;
        match p.source.backlog().await {
            Ok(backlog) => p.stats.set_backlog(backlog),
            Err(e) => tracing::debug!("backlog unknown: {e}"),
        }
    }
}
