//! What the sink takes per second, learned in the unit the sink counts — records, requests
//! or body bytes — and the rate and batch size that hold just under it.
//!
//! A 429 does not say which unit ran out. A `RateLimit-Policy` header's `qu` does, when the
//! sink sends one; otherwise the worker assumes records (volume: records and bytes move
//! together) and learns what the sink delivered when it pushed back. If the sink throttles
//! again soon although the worker already sends no more records than it delivered, volume
//! cannot be the unit: the worker runs an experiment — the same record rate in fewer, larger
//! requests — and if the throttles stop, requests are the unit, otherwise volume was.
//!
//! Once learned, the worker holds `hold` × the limit, probes `probe_gain` × for
//! `probe_for` every `probe_every` of quiet (raising the estimate when the sink takes it),
//! and keeps the estimates across an outage, which says nothing about capacity: it resumes
//! at `beta` × and climbs exponentially back within `resume_within`.
//!
//! Before the sink first pushes back, the worker meets it as [`first_contact`] says: from a
//! small share of the ceiling, growing per round of answered writes, each tick's worth in
//! a few parts.
//!
//! Pure: the time comes in as an argument (time since the worker started).

use std::time::Duration;

use super::taken::{MARKED_SAMPLE_MAX, MARKED_SAMPLE_MIN, Pushback, Taken};
use crate::settings::bounds::MOST_RATE;

pub use first_contact::{FirstContact, FirstContactParams};
pub use params::LimitParams;
pub use unit::{PerUnit, Unit};

pub mod first_contact;
mod learn;
mod params;
mod phases;
mod remembered;
pub mod remembered_limit;
mod unit;
mod whole_batch;

/// Per-second rates the sink took lately, each `None` when too little was measured.
type Delivered = PerUnit<Option<f64>>;

/// An experiment that was not throttled shows requests to be the unit if the sink took
/// this multiple of the records it took before: a sink counting records would have
/// refused the excess, a batch's worth within the experiment's span.
const EXPERIMENT_SHOWS: f64 = 1.05;
/// Throttles of settled writes that end an experiment: volume is the unit.
const EXPERIMENT_FAILS_AFTER: u32 = 2;
/// How long after first contact ends ticks go in sample-sized parts, at most: as long as
/// the next push-back can close a sample, which comes the later the nearer the first guess
/// is to the capacity. A guess below it brings none, and requests go in twice as many
/// parts meanwhile.
const SAMPLING_FOR: Duration = MARKED_SAMPLE_MAX;

/// A write the sink refused with a throttle.
#[derive(Debug, Clone, Copy)]
pub struct Refused {
    pub sent_at: Duration,
    pub retry_after: Option<Duration>,
    /// The unit, when the answer named it.
    pub hint: Option<Unit>,
    /// The sink took the rest of the write (a bulk answer item by item): its reserve was
    /// empty at the answer.
    pub emptied: bool,
    pub records: u64,
    pub bytes: u64,
}

/// What bounds the size of one request.
#[derive(Debug, Clone, Copy)]
pub struct BatchShape {
    pub tick: Duration,
    /// `sink.max_batch`: most records per request.
    pub max_batch: usize,
    /// `sink.max_batch_bytes`: most body bytes per request.
    pub max_batch_bytes: Option<u64>,
    /// Mean bytes per record lately, when known.
    pub record_bytes: Option<f64>,
}

/// The rate to run at and the records per request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub records_per_second: f64,
    /// Records per request: a tick's worth, or more when requests are the binding unit.
    pub batch: usize,
    /// A tick's worth goes as this many parts spread across the tick (first contact), or
    /// at once (1).
    pub parts: u32,
}

impl Plan {
    pub fn requests_per_second(&self) -> f64 {
        self.records_per_second / self.batch.max(1) as f64
    }
}

/// Which estimate governs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    /// Records and bytes, learned together (a sink counting either takes the same share).
    Volume,
    /// Only the hinted one of records or bytes.
    Only(Unit),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Nothing learned yet: the configured rate.
    Free,
    Hold {
        /// When the last probe ended, a limit was learned, or the worker resumed.
        quiet_since: Duration,
    },
    Probe {
        until: Duration,
    },
    Experiment {
        /// Writes sent from here on count: the first requests after a throttle meet a sink
        /// with nothing in reserve.
        settled: Duration,
        until: Duration,
        records_per_second: f64,
        requests_per_second: f64,
        throttled: u32,
        /// Records per second taken across it that show requests to be the unit.
        shows: f64,
        /// Requests per second the sink took when the experiment began.
        took_requests: f64,
        /// When it began, and what was taken until then.
        started: (Duration, PerUnit<f64>),
    },
}

#[derive(Debug, Clone)]
pub struct SinkLimit {
    params: LimitParams,
    /// The learned limits, per second.
    limits: PerUnit<Option<f64>>,
    binding: Option<Binding>,
    phase: Phase,
    /// When the last volume limit was learned from a sampled throttle, the record rate it
    /// allows, and what had been taken by then.
    volume_learned: Option<(Duration, f64, PerUnit<f64>)>,
    /// No experiment before this (one that failed recently).
    experiment_after: Duration,
    /// Sustained push-backs in a row that re-learned the volume limit where it was.
    volume_repeats: u32,
    /// A limit learned from a throttle without Retry-After waits for a success: if an
    /// outage follows instead, it was the outage talking.
    pending: Option<Pending>,
    /// After the first push-back (with Retry-After) no new records are sent before this:
    /// a push-back sooner would be too close to it to close a capacity sample, and would
    /// cost its records for nothing (a tick's worth at the first guess, `beta` of a rate
    /// that held the sink's burst). The sink's reserve refills meanwhile and is drained
    /// after, so no capacity is lost.
    quiet_until: Option<Duration>,
    /// The sink failed to answer since the last success.
    in_outage: bool,
    /// When the worker resumed after an outage.
    resumed_at: Option<Duration>,
    last_plan: Plan,
    /// Mean bytes per record as the last plan saw it.
    record_bytes: Option<f64>,
    /// The most records one request may carry, as the last plan saw it.
    largest_batch: usize,
    taken: Taken,
    first: FirstContact,
    /// Records per second slow start's last whole round sent, all taken: the first guess
    /// at a limit is no lower.
    climbed: Option<f64>,
    /// The most records per second the sink was measured taking at a push-back.
    took_most: f64,
    /// After the push-back that ended first contact, until the sample that measures the
    /// sink closes (or this time passes): ticks go in parts of at least a sample's span,
    /// so the push-back that closes it refuses a part of the first guess's tick, not all.
    sampling_until: Option<Duration>,
    /// Push-backs learned from so far: the plan is due at each new one.
    lessons: u64,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    now: Duration,
    /// When the worker may send again: the sink's Retry-After, if it gave one.
    resume: Duration,
    sent_at: Duration,
    hint: Option<Unit>,
    delivered: Delivered,
    /// How `delivered` was measured.
    kind: Pushback,
    /// The push-back answered a probe above the limit.
    probing: bool,
    /// The sink took part of the write: a sample ending here spans a reserve emptied at
    /// its end, as measured, not estimated.
    emptied: bool,
}

impl SinkLimit {
    pub fn new(params: LimitParams) -> Self {
        SinkLimit {
            first: FirstContact::new(params.first_contact),
            climbed: None,
            took_most: 0.0,
            sampling_until: None,
            lessons: 0,
            params,
            limits: PerUnit::default(),
            binding: None,
            phase: Phase::Free,
            volume_learned: None,
            experiment_after: Duration::ZERO,
            volume_repeats: 0,
            pending: None,
            quiet_until: None,
            in_outage: false,
            resumed_at: None,
            last_plan: Plan {
                records_per_second: 0.0,
                batch: 1,
                parts: 1,
            },
            record_bytes: None,
            largest_batch: usize::MAX,
            taken: Taken::default(),
        }
    }

    /// The learned limit in `unit`, per second.
    pub fn limit(&self, unit: Unit) -> Option<f64> {
        self.limits.get(unit)
    }

    /// The unit whose limit bounds the rate now, if any.
    pub fn binding(&self) -> Option<Unit> {
        match self.binding? {
            Binding::Only(unit) => Some(unit),
            Binding::Volume => Some(Unit::Records),
        }
    }

    /// Slow start's round was answered: the share grows if planned at `now` (ticks `tick`
    /// apart), which is then due.
    pub fn slow_start_grows(&self, now: Duration, tick: Duration) -> bool {
        self.first.grows(now, tick)
    }

    /// Met for the first time, below the ceiling: slow start holds the rate.
    pub fn is_slow_starting(&self) -> bool {
        self.first.is_ramping()
    }

    /// How many push-backs have been learned from: at each new one the plan is due.
    pub fn lessons(&self) -> u64 {
        self.lessons
    }

    /// While the quiet after the first push-back lasts, at a tick too coarse for the plan
    /// to skip (it would skip most of a tick's sending): how long it has left. Fresh
    /// records wait for it; a part's worth goes at its end.
    pub fn quiet_for(&self, now: Duration, tick: Duration) -> Option<Duration> {
        let until = self.quiet_until?;
        (tick > MARKED_SAMPLE_MIN / 2 && now < until).then(|| until - now)
    }

    pub fn is_experimenting(&self) -> bool {
        matches!(self.phase, Phase::Experiment { .. })
    }

    /// The rate and batch for the next tick, never above `ceiling` records per second.
    pub fn plan(&mut self, now: Duration, ceiling: f64, shape: BatchShape) -> Plan {
        self.advance(now);
        self.record_bytes = shape.record_bytes;
        let p = &self.params;
        let probing = matches!(self.phase, Phase::Probe { .. });
        let gain = |unit: Unit| {
            let binding = match self.binding {
                Some(Binding::Volume) => unit != Unit::Requests,
                Some(Binding::Only(u)) => u == unit,
                None => false,
            };
            if probing && binding {
                p.probe_gain
            } else {
                p.hold
            }
        };
        let mut rate = ceiling;
        let mut request_cap = None;
        if let Phase::Experiment {
            records_per_second,
            requests_per_second,
            ..
        } = self.phase
        {
            rate = rate.min(records_per_second);
            request_cap = Some(requests_per_second);
        } else {
            if let Some(limit) = self.limits.get(Unit::Records) {
                rate = rate.min(limit * gain(Unit::Records));
            }
            if let (Some(limit), Some(size)) = (self.limits.get(Unit::Bytes), shape.record_bytes)
                && size > 0.0
            {
                rate = rate.min(limit * gain(Unit::Bytes) / size);
            }
            if let Some(limit) = self.limits.get(Unit::Requests) {
                request_cap = Some(limit * gain(Unit::Requests));
            }
        }
        if let Some(at) = self.resumed_at {
            let t = now.saturating_sub(at).as_secs_f64() / p.resume_within.as_secs_f64();
            rate *= (p.beta * (1.0 / p.beta).powf(t)).min(1.0);
        }
        let tick = shape.tick.as_secs_f64();
        // Only where a tick is coarse enough to part: a fine one is a part already.
        let (share, parts) = self
            .first
            .plan(now, shape.tick, (rate * tick).max(0.0) as u64);
        let parts = if shape.tick <= MARKED_SAMPLE_MIN {
            1
        } else if self.sampling_until.is_some_and(|until| now < until)
            && !self.is_experimenting()
            && self.binding != Some(Binding::Only(Unit::Requests))
        {
            self.sample_parts(shape.tick, (rate * share * tick).max(0.0) as u64)
        } else {
            parts
        };
        rate *= share;
        let floor = p.min_multiplier * self.floor_base(ceiling);
        rate = rate.max(floor).min(ceiling).max(0.0);
        let by_bytes = match (shape.max_batch_bytes, shape.record_bytes) {
            (Some(max), Some(size)) if size > 0.0 => ((max as f64 / size).floor() as usize).max(1),
            _ => usize::MAX,
        };
        let largest = shape.max_batch.min(by_bytes).max(1);
        self.largest_batch = largest;
        let natural = ((rate * tick - 1e-9).ceil().max(1.0) as usize).min(largest);
        let mut batch = self.whole_batch(natural, largest, parts);
        let largest = if self.is_experimenting() {
            largest.min(self.experiment_batch())
        } else {
            largest
        };
        if let Some(cap) = request_cap.filter(|c| *c > 0.0) {
            batch = batch
                .max((rate / cap - 1e-9).ceil().max(1.0) as usize)
                .min(largest);
            rate = rate.min(cap * batch as f64);
        }
        self.last_plan = Plan {
            records_per_second: rate,
            batch,
            parts,
        };
        // Only where ticks are fine enough to skip a few: at a coarser tick the quiet
        // skips most of a tick's sending, and the next push-back closes a sample anyway
        // (measured at 200 ms, 4x over: 1.031-1.095 sent per delivered, 1.027-1.077 without).
        // The batch stays, so the few records sent meanwhile do not go as many small
        // requests; and the plan remembered stays what was sent before, which later
        // push-backs (of writes in flight now) answer.
        if self.quiet_until.is_some_and(|until| now < until) && shape.tick <= MARKED_SAMPLE_MIN / 2
        {
            return Plan {
                records_per_second: floor.min(rate),
                batch,
                parts,
            };
        }
        self.last_plan
    }

    /// The parts a tick of `quantum` records goes as while a sample is open: each at least
    /// a sample's span of the tick, and first contact's least part.
    fn sample_parts(&self, tick: Duration, quantum: u64) -> u32 {
        let by_span = (tick.as_secs_f64() / MARKED_SAMPLE_MIN.as_secs_f64()).floor();
        self.params
            .first_contact
            .parts_of(quantum, by_span.min(f64::from(u32::MAX)) as u32)
    }

    /// What `throttle.min_multiplier` is a share of: the ceiling, or without one of ours
    /// (`rate = "auto"`, `"off"`: the fastest rate there is) the record limit learned.
    fn floor_base(&self, ceiling: f64) -> f64 {
        match self.limits.get(Unit::Records) {
            Some(limit) if ceiling >= MOST_RATE => limit,
            _ => ceiling,
        }
    }

    /// The sink throttled `write`; `fresh` when it is news (not an echo of a signal
    /// already acted on).
    pub fn on_throttle(&mut self, now: Duration, fresh: bool, write: Refused) {
        self.advance(now);
        if !self.first.is_over() {
            self.sampling_until = Some(now + SAMPLING_FOR);
        }
        if let Some(before) = self.first.pushed_back() {
            self.climbed = Some(self.last_plan.records_per_second * before);
        }
        let Refused {
            sent_at,
            retry_after,
            hint,
            emptied,
            records,
            bytes,
        } = write;
        let emptied = emptied.then(|| now.saturating_sub(sent_at));
        let (delivered, kind) = if fresh || self.is_experimenting() {
            self.taken
                .pushback(now, retry_after, emptied, records, bytes)
        } else {
            (PerUnit([None; 3]), Pushback::Repeated)
        };
        if let Phase::Experiment {
            settled,
            ref mut throttled,
            ..
        } = self.phase
        {
            if sent_at >= settled {
                *throttled += 1;
            }
            if *throttled >= EXPERIMENT_FAILS_AFTER {
                // The same records in fewer requests were throttled too: volume, as
                // assumed. What the sink took meanwhile came in a few large requests, too
                // coarse to measure by: the limit stays as it was.
                self.end_experiment(now);
            }
            return;
        }
        if !fresh {
            return;
        }
        let probing = matches!(self.phase, Phase::Probe { .. });
        if probing {
            self.phase = Phase::Hold { quiet_since: now };
        }
        if let Some(wait) = retry_after
            && kind == Pushback::Isolated
            && self.limits == PerUnit::default()
        {
            self.quiet_until = Some(now + wait + MARKED_SAMPLE_MIN);
        }
        let signal = Pending {
            now,
            // Where the mark is: the sample ending there is read then.
            resume: now + emptied.or(retry_after).unwrap_or_default(),
            sent_at,
            hint,
            delivered,
            kind,
            probing,
            emptied: emptied.is_some(),
        };
        if retry_after.is_none() || kind == Pushback::Sustained {
            self.pending = Some(signal);
            self.settle(now, false);
        } else {
            self.learn(signal);
        }
    }

    /// Learns from the pending push-back once it can be: one without Retry-After at the
    /// next success (`written`), a sample once its mark's time has come.
    fn settle(&mut self, now: Duration, written: bool) {
        let Some(mut s) = self.pending else {
            return;
        };
        let marked = s.resume > s.now;
        if !marked && !written || now < s.resume {
            return;
        }
        self.pending = None;
        if s.kind == Pushback::Sustained {
            match self.taken.sample(now, s.resume) {
                Some(sample) => s.delivered = sample,
                None => s.kind = Pushback::Repeated,
            }
        } else if s.emptied {
            // At the refusal, writes the sink took before it may not have answered yet (a
            // first guess of 12 rec/s from a 1,000 rec/s sink whose burst had not
            // answered): the last second as of the mark.
            s.delivered = self.taken.recent(now);
        }
        if marked {
            // Learned now, the pause over: later throttles are news from here on.
            s.now = now;
        }
        self.learn(s);
    }

    /// A write sent at `sent_at`, of `records` records and `bytes` bytes, was taken.
    pub fn on_written(&mut self, now: Duration, sent_at: Duration, records: u64, bytes: u64) {
        self.first.answered(sent_at);
        self.taken.written(now, records, bytes);
        self.settle(now, true);
        if std::mem::take(&mut self.in_outage) {
            self.resumed_at = Some(now);
            self.taken.restart(now);
            if let Phase::Hold { .. } = self.phase {
                self.phase = Phase::Hold { quiet_since: now };
            }
        }
    }

    /// The sink did not answer, or answered that it cannot work at all (a streak of 503s
    /// without Retry-After, refused connections, timeouts): nothing about capacity.
    pub fn on_outage(&mut self) {
        self.pending = None;
        self.quiet_until = None;
        self.sampling_until = None;
        self.in_outage = true;
        self.resumed_at = None;
        if let Phase::Experiment { .. } | Phase::Probe { .. } = self.phase {
            self.phase = Phase::Hold {
                quiet_since: Duration::ZERO,
            };
        }
    }
}

#[cfg(test)]
mod first_contact_tests;
#[cfg(test)]
mod push_back_tests;
#[cfg(test)]
mod requests_tests;
#[cfg(test)]
mod tests;
