//! How the sink limit learns from a push-back: the unit named, a sample across a
//! saturation, a first guess, or an experiment to tell requests from volume.

use std::time::Duration;

use super::{Binding, EXPERIMENT_SHOWS, Pending, PerUnit, Phase, Plan, SinkLimit, Unit};
use crate::control::taken::Pushback;

/// An experiment starts only while the worker sends this much more than the sink takes.
const EXPERIMENT_OVER: f64 = 1.1;
/// Below this many requests per second no experiment is run: a sink limiting requests
/// that low is rare, and the few large requests of such an experiment would cost a sink
/// counting records or bytes more than they could tell (it can name its unit instead).
/// Under the 5 requests/s a 200 ms tick sends, so a gateway taking 4 is found (at 5.5 it
/// was not, and the worker sank to 8% of what that gateway takes).
const EXPERIMENT_MIN_REQUESTS: f64 = 3.0;
/// An experiment sends at least this multiple of the records the sink took: the sink
/// taking them in fewer requests shows that records were not what it counted.
const EXPERIMENT_RECORDS: f64 = 1.25;
/// An experiment's requests per second, as a share of what the sink took: room for a
/// sink whose reserve is empty to refill…
const EXPERIMENT_REQUEST_SHARE: f64 = 0.8;
/// …or up to this share when the largest batch allowed cannot carry the experiment's
/// records in fewer requests (4 requests/s of at most 100 records, 334 rec/s taken: 3.2
/// requests/s carry 320, no evidence either way; 3.8 carry 380).
const EXPERIMENT_REQUEST_SHARE_MOST: f64 = 0.95;
/// An experiment runs long enough for this many requests, up to the longest: a sink
/// counting records, its reserve emptied by the push-back, refuses the experiment's
/// excess within a few.
const EXPERIMENT_REQUESTS: f64 = 16.0;
/// A first push-back at no more than this multiple of the records the sink took is
/// "near": an experiment costs less there than a cut (see `learn`).
const FIRST_NEAR: f64 = 1.5;
/// … and measured after this long: the last second's rate is what the sink takes, not a
/// burst being spent (a 20 requests/s sink read 44 at 0.36 s, and an experiment at 36
/// failed).
const FIRST_NEAR_AFTER: Duration = Duration::from_secs(2);
/// Such an experiment sends this share of the requests per second that were sent…
const FIRST_NEAR_REQUESTS: f64 = 0.75;
/// … and shows requests if the sink takes this share of its records.
const FIRST_NEAR_SHOWS: f64 = 0.8;
const EXPERIMENT_LONGEST: Duration = Duration::from_secs(5);
/// Throttles this soon after a volume limit was learned are its overload's last echoes.
const VOLUME_SETTLES: Duration = Duration::from_millis(250);
/// An isolated throttle while holding lowers the limit by this factor.
const ISOLATED_CUT: f64 = 0.95;
/// Sustained push-backs in a row, each soon after the last and measuring the sink taking
/// what it took before (within 5%), that contradict volume: a records limit held under
/// what the sink takes ends the throttles, and these go on. A gateway taking 4 requests/s
/// refused one request in five at every record rate, took each one a tick later, and a
/// worker that had learned records held 64 rec/s against its 400.
const VOLUME_REPEATS: u32 = 3;
/// "What it took before": the records taken within this share of the last learned limit.
const VOLUME_SAME: f64 = 0.05;

impl SinkLimit {
    pub(super) fn learn(&mut self, s: Pending) {
        let last = self.last_plan;
        self.lessons += 1;
        if s.hint.is_some() || s.kind == Pushback::Sustained {
            // Measured: no sample is open any more.
            self.sampling_until = None;
        }
        if let Some(unit) = s.hint {
            let limit = self.revised(unit, &s);
            self.limits = PerUnit::default();
            self.limits.set(unit, limit);
            self.binding = Some(Binding::Only(unit));
            self.phase = Phase::Hold { quiet_since: s.now };
            return;
        }
        if self.binding == Some(Binding::Only(Unit::Requests))
            && let Some(limit) = self.limits.get(Unit::Requests)
        {
            if last.requests_per_second() >= 0.8 * self.params.hold * limit {
                let limit = self.revised(Unit::Requests, &s).or(Some(limit));
                self.limits.set(Unit::Requests, limit);
                self.phase = Phase::Hold { quiet_since: s.now };
                return;
            }
            // Well under the request limit and throttled all the same: not requests.
            self.learn_volume(&s);
            return;
        }
        let took_requests = s.delivered.get(Unit::Requests).unwrap_or_default();
        let took_records = s.delivered.get(Unit::Records).unwrap_or_default();
        self.took_most = self.took_most.max(took_records);
        // The first push-back, 2 s or more into a run, at a record rate the sink nearly
        // took: cutting records (to `beta` of what it took) costs far more than an
        // experiment does if requests are the unit — a worker told 400 rec/s in ticks of 80
        // against a gateway taking 4 requests of 100 sank to 224 rec/s and took 5 s more to
        // find it — and little if they are not (a few requests of a tick's worth). The
        // last second may hold the end of a spent burst (that gateway's read 5 requests
        // taken of 5 sent), so the experiment sends fewer requests than were sent (75%),
        // with the same records, and shows requests if the sink takes 80% of those records
        // per second without throttling twice.
        let first_near = s.now >= FIRST_NEAR_AFTER
            && self.binding.is_none()
            && self.limits == PerUnit::default()
            && took_records > 0.0
            && last.records_per_second <= FIRST_NEAR * took_records
            && last.requests_per_second() > EXPERIMENT_MIN_REQUESTS
            && last.batch < self.largest_batch;
        if first_near && s.now >= self.experiment_after {
            let requests_per_second = FIRST_NEAR_REQUESTS * last.requests_per_second();
            let most = self.largest_batch.min(self.experiment_batch()) as f64;
            let records_per_second = last.records_per_second.min(requests_per_second * most);
            self.start_experiment(
                &s,
                records_per_second,
                requests_per_second,
                FIRST_NEAR_SHOWS * records_per_second,
                requests_per_second,
            );
            return;
        }
        // A request limit shows as a throttle while sending more requests than the sink
        // takes (and enough of them to tell).
        let requests_over = last.requests_per_second() > EXPERIMENT_MIN_REQUESTS
            && s.delivered
                .get(Unit::Requests)
                .is_some_and(|took| last.requests_per_second() > EXPERIMENT_OVER * took);
        // Just after a volume limit was learned the sink's reserve is empty: a throttle
        // then answers the last writes of the overload, not the new rate.
        if self
            .volume_learned
            .is_some_and(|(at, _, _)| s.now < at + VOLUME_SETTLES)
        {
            return;
        }
        // Throttled again soon at no more records than the sink took last time, and sending
        // clearly more requests than it takes now: cutting records did not help.
        let contradicted = self.volume_learned.is_some_and(|(at, rate, before)| {
            let since = self.taken.since(before, s.now.saturating_sub(at));
            s.now < at + self.params.contradiction_within
                && s.sent_at > at
                && last.records_per_second <= rate * 1.001
                && since
                    .get(Unit::Records)
                    .is_none_or(|took| took * EXPERIMENT_OVER < rate)
        }) && s.kind == Pushback::Sustained
            && requests_over;
        let repeated = self.volume_learned.is_some_and(|(at, rate, _)| {
            s.kind == Pushback::Sustained
                && s.now < at + self.params.contradiction_within
                && s.delivered.get(Unit::Records).is_some_and(|took| {
                    (took * self.params.hold - rate).abs() <= VOLUME_SAME * rate
                })
        });
        self.volume_repeats = if repeated { self.volume_repeats + 1 } else { 0 };
        let contradicted = contradicted || (self.volume_repeats >= VOLUME_REPEATS && requests_over);
        if contradicted && s.now >= self.experiment_after {
            // The records go at the most the sink has been seen to take in a second, not
            // at what it took while the worker was already cut (175 rec/s, for a gateway
            // that takes 400 in full requests), in requests that carry them.
            let records_per_second = last
                .records_per_second
                .max(EXPERIMENT_RECORDS * took_records)
                .max(self.took_most);
            let most = self.largest_batch.min(self.experiment_batch()) as f64;
            let carries = records_per_second / most;
            let requests_per_second = (took_requests * EXPERIMENT_REQUEST_SHARE)
                .max(carries.min(took_requests * EXPERIMENT_REQUEST_SHARE_MOST))
                .max(f64::MIN_POSITIVE);
            self.start_experiment(
                &s,
                records_per_second,
                requests_per_second,
                EXPERIMENT_SHOWS * took_records,
                took_requests,
            );
            return;
        }
        self.learn_volume(&s);
    }

    /// Sends `records_per_second` in `requests_per_second` for a while: if the sink takes
    /// `shows` records per second so, without throttling, requests are the unit, and their
    /// limit is no lower than `took_requests`.
    fn start_experiment(
        &mut self,
        s: &Pending,
        records_per_second: f64,
        requests_per_second: f64,
        shows: f64,
        took_requests: f64,
    ) {
        self.volume_repeats = 0;
        let span = self.params.experiment_for.max(
            Duration::from_secs_f64(EXPERIMENT_REQUESTS / requests_per_second)
                .min(EXPERIMENT_LONGEST),
        );
        self.phase = Phase::Experiment {
            settled: s.resume + Duration::from_secs_f64(3.0 / requests_per_second).min(span / 2),
            until: s.resume + span,
            records_per_second,
            requests_per_second,
            throttled: 0,
            shows,
            took_requests,
            started: (s.resume, self.taken.totals()),
        };
    }

    /// Records and bytes both take what the sink delivered; a request limit learned before
    /// was a misreading.
    pub(super) fn learn_volume(&mut self, s: &Pending) {
        let records = self.revised(Unit::Records, s);
        let bytes = self
            .limits
            .get(Unit::Bytes)
            .or(s.delivered.get(Unit::Bytes))
            .and_then(|_| self.revised(Unit::Bytes, s));
        self.limits = PerUnit::default();
        self.limits.set(Unit::Records, records);
        self.limits.set(Unit::Bytes, bytes);
        self.binding = Some(Binding::Volume);
        self.volume_learned = (s.kind == Pushback::Sustained)
            .then_some(())
            .and(records)
            .map(|r| (s.now, r * self.params.hold, self.taken.totals()));
        self.phase = Phase::Hold { quiet_since: s.now };
    }

    /// The limit in `unit` after the sink pushed back. Sustained push-back measures the
    /// capacity (what was taken across it); push-backs in quick succession before that can
    /// be measured answer writes sent into a reserve the first overshoot emptied: they
    /// say nothing new, and cutting on each would fall far below the capacity within a few
    /// ticks (2,635 → 825 rec/s in 220 ms against a 1,000 rec/s sink at a 20 ms tick), so the limit
    /// stays where it is (never above what was being sent) until the sample; an isolated one
    /// after a quiet spell says only that the worker was a little over, so the limit falls
    /// a little (or not at all after a probe: the probe went too far, not the hold); a
    /// first one has only the last second to go by, which may hold a spent burst: `beta`
    /// of it. Never above what was being sent; `None` when nothing tells.
    pub(super) fn revised(&self, unit: Unit, s: &Pending) -> Option<f64> {
        let sent = match self.planned(unit, self.last_plan) {
            // Nothing planned yet: nothing to bound it by.
            planned if planned <= 0.0 => f64::INFINITY,
            planned => planned,
        };
        let measured = || {
            s.delivered
                .get(unit)
                .unwrap_or(sent * self.params.beta)
                .min(sent)
        };
        let limit = match (s.kind, self.limits.get(unit)) {
            // Taken between two answers that each took part of a write and refused the
            // rest: the capacity, whatever the plan said. The plan does not count records
            // sent again, and a cap at it held a bulk sink at the first guess (a worker
            // sending 525 rec/s of fresh records and its resends measured 1,116 and kept 525).
            (Pushback::Sustained, _) if s.emptied => {
                s.delivered.get(unit).unwrap_or(sent * self.params.beta)
            }
            (Pushback::Sustained, _) => measured(),
            // The first push-back: the last second's rate may hold a spent burst. After
            // slow start's climb it understates what the sink takes, most of that second
            // climbing: a sink that took part of the write and refused the rest (a bulk
            // answer, whose refused items alone go again) is guessed at no less than slow
            // start's round before, which it took whole, so that the next refusal comes
            // soon and measures it (a queue taking 1,000 documents/s read 532 and was held
            // there: 11.7 s for a 6-second drain). A refused request costs all its
            // records: there the guess stays low.
            (_, None) if s.emptied => {
                (measured() * self.params.beta).max(self.climbed_in(unit).min(sent))
            }
            (_, None) => measured() * self.params.beta,
            (Pushback::Repeated, Some(old)) => old.min(sent),
            (Pushback::Isolated, Some(old)) if s.probing => old,
            (Pushback::Isolated, Some(old)) => old * ISOLATED_CUT,
        };
        limit.is_finite().then_some(limit)
    }

    /// An experiment's requests stay within twice what the sink has taken in one: a sink
    /// whose burst is smaller would never take them.
    pub(super) fn experiment_batch(&self) -> usize {
        (2 * self.taken.largest()).max(1) as usize
    }

    /// The push-backs since the worker sent `records_per_second` were not about capacity
    /// (a share of items the sink refuses whatever the rate): the limit allows that rate
    /// again, or, where such a push-back ended slow start, the climb resumes.
    pub fn restore(&mut self, now: Duration, records_per_second: f64) {
        self.pending = None;
        self.quiet_until = None;
        self.sampling_until = None;
        self.volume_learned = None;
        if self.first.resume() {
            // The push-back that ended slow start was none: what was learned from it and
            // since is forgotten, and the climb to the ceiling goes on.
            self.limits = PerUnit::default();
            self.binding = None;
            self.phase = Phase::Free;
            self.climbed = None;
            return;
        }
        let allowed = records_per_second / self.params.hold;
        if let Some(limit) = self.limits.get(Unit::Records) {
            self.limits.set(Unit::Records, Some(limit.max(allowed)));
        }
        if let (Some(limit), Some(size)) = (self.limits.get(Unit::Bytes), self.record_bytes) {
            self.limits
                .set(Unit::Bytes, Some(limit.max(allowed * size)));
        }
        if self.binding.is_some() {
            self.phase = Phase::Hold { quiet_since: now };
        }
    }

    /// What slow start's last whole round sent in `unit` per second, all of it taken; 0
    /// when not known.
    fn climbed_in(&self, unit: Unit) -> f64 {
        let records = self.climbed.unwrap_or_default();
        match unit {
            Unit::Records => records,
            Unit::Bytes => records * self.record_bytes.unwrap_or_default(),
            Unit::Requests => 0.0,
        }
    }

    /// Back to holding the volume limit, with no new experiment for a while.
    pub(super) fn end_experiment(&mut self, now: Duration) {
        self.experiment_after = now + 10 * self.params.experiment_for;
        self.volume_learned = None;
        self.phase = Phase::Hold { quiet_since: now };
    }

    pub(super) fn planned(&self, unit: Unit, plan: Plan) -> f64 {
        match unit {
            Unit::Records => plan.records_per_second,
            // Record sizes unknown yet: nothing to bound a bytes limit by.
            Unit::Bytes => self
                .record_bytes
                .map_or(f64::INFINITY, |size| plan.records_per_second * size),
            Unit::Requests => plan.requests_per_second(),
        }
    }
}
