//! The concurrency limit as the pipeline and its deliveries share it: deliveries report
//! every sink write (latency, writes in flight when it started, whether the sink pushed
//! back); the pipeline admits a new batch only while batches in flight < the limit.
//!
//! When far more writes are in flight than the limit allows, or than the sink has lately
//! answered in good time (a limit starting high against an unknown sink), those writes
//! would otherwise each wait for their timeout, and their resends would go out together and
//! overload the sink again. So the gate also says when a write is overdue ([`cut_after`]),
//! and a write sent again after no answer waits for a place under the limit
//! ([`LimitGate::start_within_limit`]).
//!
//! A sink that drops a write says so only at its timeout. The gate keeps the writes not
//! yet answered and tells the limit, with every sample, which of them have run far longer
//! than the sink's recent answers ([`stalled`]): the limit then holds still instead of
//! growing on into the drops while their slots are held.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::control::limit::{ConcurrencyLimit, Sample, Stalled};

/// A write is cut only while the writes in flight exceed this many times the limit (or
/// the writes the sink answered in the last cut period, if fewer).
const CUT_OVER: usize = 2;
/// ... and once it has run this many typical round trips (the lower quartile of the
/// recent answered writes: the slow answers of an overload must not stretch it),
const CUT_AFTER_RTTS: u32 = 4;
/// ... and never sooner than this: a database's ordinary slow write is not cut.
const CUT_AFTER_AT_LEAST: Duration = Duration::from_secs(1);
/// Recent answered writes kept: (round trip, how long ago it was answered).
const ANSWERED: usize = 64;
/// A push-back is explained by the writes in flight only once this many writes were
/// taken lately, all at fewer in flight.
const EXPLAINED_AFTER: usize = 4;
/// After a push-back at no more in flight than the sink took lately (a sink limiting its
/// rate, not its concurrency), none is explained by the writes in flight for this long.
const CONTRADICTED_FOR: Duration = Duration::from_secs(30);
/// A write unanswered after this many times the recent answered writes' p90 is stalled
/// (see [`Stalled`]): a drop on a 100 ms sink is known after 150 ms instead of at its
/// 1 s timeout. (At 2 × and 3 ×, Vegas's start grew on into the drops for another round or
/// two: 42.4 and 43.0 requests/s where the sink drops above 5 in flight, against 48.0.)
/// The p90, not a lower percentile: a sink whose latency merely varies is not stalled.
const STALLED_AFTER: f64 = 1.5;
/// Unanswered writes tracked at most (a write whose end is never reported must not grow
/// the list without bound).
const OUTSTANDING: usize = 1024;
/// [`stall_after`] is worked out again once the recent answered writes have all been
/// replaced (and on each of the first few), not on every one: a selection per write
/// doubled the control loop's cost of a tick.
const STALL_AFTER_EVERY: u32 = ANSWERED as u32;
/// While fewer writes than this were answered, [`stall_after`] follows each one.
const STALL_AFTER_WARMUP: usize = 16;

/// The writes not yet answered, and how long one may run before it is stalled.
#[derive(Default)]
struct Outstanding {
    /// (started at, writes in flight then), oldest first.
    writes: VecDeque<(Instant, usize)>,
    stall_after: Option<Duration>,
    /// Answered writes since `stall_after` was worked out.
    answers: u32,
}

/// How long a write may run unanswered before it is stalled, given recent answered round
/// trips (reordered here); `None` while nothing was answered to judge by.
pub fn stall_after(answered: &mut [Duration]) -> Option<Duration> {
    if answered.is_empty() {
        return None;
    }
    let p90 = (answered.len() - 1) * 9 / 10;
    Some(answered.select_nth_unstable(p90).1.mul_f64(STALLED_AFTER))
}

/// Which of `writes` (started at, writes in flight then; oldest first) started nearest to
/// `began`, among those started with `inflight` in flight if given: the first such at or
/// after `began`, and the last before it no farther away, so a tick neither scans every
/// write in flight nor measures each one's distance.
fn nearest(
    writes: &VecDeque<(Instant, usize)>,
    began: Instant,
    inflight: Option<usize>,
) -> Option<usize> {
    let matches = |i: &usize| inflight.is_none_or(|inflight| writes[*i].1 == inflight);
    let split = writes.partition_point(|(at, _)| *at < began);
    let after = (split..writes.len()).find(matches);
    // Writes that began before `stop` are farther than `after`.
    let stop = after.and_then(|i| began.checked_sub(writes[i].0 - began));
    let before = (0..split)
        .rev()
        .take_while(|i| stop.is_none_or(|stop| writes[*i].0 >= stop))
        .find(matches);
    match (before, after) {
        (Some(b), Some(a)) if began - writes[b].0 <= writes[a].0 - began => Some(b),
        (_, Some(a)) => Some(a),
        (b, None) => b,
    }
}

/// The writes stalled at `now` among `outstanding` (started at, writes in flight then;
/// oldest first): those unanswered for longer than `after`.
pub fn stalled(
    outstanding: &VecDeque<(Instant, usize)>,
    after: Duration,
    now: Instant,
) -> Option<Stalled> {
    let cutoff = now.checked_sub(after)?;
    let mut found: Option<Stalled> = None;
    for (_, level) in outstanding.iter().take_while(|(at, _)| *at < cutoff) {
        let s = found.get_or_insert(Stalled {
            level: *level,
            count: 0,
        });
        s.level = s.level.min(*level);
        s.count += 1;
    }
    found
}

/// How long a write may run before it is cut, given the writes in flight now, the limit
/// and recent answered writes (round trip, how long ago it was answered); `None` while it
/// may run until its own timeout: nothing answered yet to judge by, or the writes in flight
/// are within twice both the limit and the writes answered in the last cut period. (A
/// limit that starts high against an unknown sink has not fallen yet when the sink shows
/// it can take far less: what it answered says so.)
pub fn cut_after(
    inflight: usize,
    limit: usize,
    answered: &[(Duration, Duration)],
) -> Option<Duration> {
    let mut rtts: Vec<Duration> = answered.iter().map(|(rtt, _)| *rtt).collect();
    rtts.sort_unstable();
    let typical = *rtts.get(rtts.len() / 4)?;
    let after = (typical * CUT_AFTER_RTTS).max(CUT_AFTER_AT_LEAST);
    let lately = answered.iter().filter(|(_, ago)| *ago <= after).count();
    (inflight > CUT_OVER * limit.min(lately).max(1)).then_some(after)
}

pub struct LimitGate {
    limit: Mutex<Box<dyn ConcurrencyLimit>>,
    writes_in_flight: AtomicUsize,
    /// Recent answered writes (round trip, when answered, writes in flight when it
    /// started), newest last.
    answered: Mutex<VecDeque<(Duration, Instant, usize)>>,
    /// Tracked only for a limit that adapts: a fixed one has no use for stalled writes,
    /// and the default `fixed` worker pays nothing for them.
    outstanding: Mutex<Outstanding>,
    adapts: bool,
    /// Whether overdue writes are cut and resends wait under the limit
    /// (`[concurrency] cut_overdue`).
    cuts: bool,
    /// A write started or finished: the limit or the writes in flight changed.
    changed: Notify,
    /// When the sink last pushed back a write the writes in flight did not explain.
    contradicted: Mutex<Option<Instant>>,
}

impl LimitGate {
    pub fn new(limit: Box<dyn ConcurrencyLimit>) -> Self {
        LimitGate {
            adapts: limit.adapts(),
            limit: Mutex::new(limit),
            writes_in_flight: AtomicUsize::new(0),
            answered: Mutex::new(VecDeque::with_capacity(ANSWERED)),
            outstanding: Mutex::new(Outstanding::default()),
            cuts: true,
            changed: Notify::new(),
            contradicted: Mutex::new(None),
        }
    }

    /// Whether overdue writes are cut and resends wait under the limit (on by default).
    pub fn with_cuts(self, cuts: bool) -> Self {
        LimitGate { cuts, ..self }
    }

    pub fn limit(&self) -> usize {
        self.lock().limit().max(1)
    }

    /// A write starts; returns the writes in flight, itself included.
    pub fn started(&self) -> usize {
        let inflight = self.writes_in_flight.fetch_add(1, SeqCst) + 1;
        self.track(inflight);
        self.changed.notify_waiters();
        inflight
    }

    /// As [`LimitGate::started`], but first waits until the writes in flight are under the
    /// limit. For writes sent again after no answer: sent at once, they would all land on
    /// the sink together, as far over the limit as before.
    pub async fn start_within_limit(&self) -> usize {
        if !self.cuts {
            return self.started();
        }
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let limit = self.limit();
            let taken = self.writes_in_flight.fetch_update(SeqCst, SeqCst, |n| {
                if n < limit { Some(n + 1) } else { None }
            });
            if let Ok(before) = taken {
                self.track(before + 1);
                self.changed.notify_waiters();
                return before + 1;
            }
            changed.await;
        }
    }

    /// A write started with `inflight` in flight, now.
    fn track(&self, inflight: usize) {
        if !self.adapts {
            return;
        }
        let mut outstanding = crate::lock::lock(&self.outstanding);
        if outstanding.writes.len() == OUTSTANDING {
            outstanding.writes.pop_front();
        }
        outstanding.writes.push_back((Instant::now(), inflight));
    }

    /// The write that `started` returned `inflight` for has ended.
    pub fn finished(&self, rtt: Duration, inflight: usize, dropped: bool) {
        self.writes_in_flight.fetch_sub(1, SeqCst);
        let now = Instant::now();
        let stalled = self.answer(rtt, inflight, dropped, now);
        let mut limit = self.lock();
        limit.stalled(stalled);
        limit.on_sample(Sample {
            rtt,
            inflight,
            dropped,
        });
        drop(limit);
        self.changed.notify_waiters();
    }

    /// Notes a write answered (or dropped) at `now`; returns the writes stalled now.
    fn answer(
        &self,
        rtt: Duration,
        inflight: usize,
        dropped: bool,
        now: Instant,
    ) -> Option<Stalled> {
        let mut answered = crate::lock::lock(&self.answered);
        if !dropped {
            if answered.len() == ANSWERED {
                answered.pop_front();
            }
            answered.push_back((rtt, now, inflight));
        }
        if !self.adapts {
            return None;
        }
        let mut outstanding = crate::lock::lock(&self.outstanding);
        // Its own entry: started with `inflight` in flight, nearest to `now − rtt` (if
        // reported with another count than it started with, the nearest in time).
        let began = now.checked_sub(rtt).unwrap_or(now);
        let mine = nearest(&outstanding.writes, began, Some(inflight))
            .or_else(|| nearest(&outstanding.writes, began, None));
        if let Some(i) = mine {
            outstanding.writes.remove(i);
        }
        outstanding.answers += u32::from(!dropped);
        if outstanding.stall_after.is_none()
            || outstanding.answers >= STALL_AFTER_EVERY
            || answered.len() < STALL_AFTER_WARMUP
        {
            let mut rtts = [Duration::ZERO; ANSWERED];
            for (slot, (rtt, _, _)) in rtts.iter_mut().zip(answered.iter()) {
                *slot = *rtt;
            }
            outstanding.stall_after = stall_after(&mut rtts[..answered.len()]);
            outstanding.answers = 0;
        }
        outstanding
            .stall_after
            .and_then(|after| stalled(&outstanding.writes, after, now))
    }

    fn answered(&self) -> Vec<(Duration, Duration)> {
        let answered = crate::lock::lock(&self.answered);
        let now = Instant::now();
        answered
            .iter()
            .map(|(rtt, at, _)| (*rtt, now - *at))
            .collect()
    }

    /// The sink pushed back (429 without Retry-After) a write that started with `inflight`
    /// in flight; returns whether the writes in flight explain it: the limit adapts, the
    /// write started with more in flight than any the sink took lately, and since
    /// [`CONTRADICTED_FOR`] no push-back came at a level the sink was taking (as a sink
    /// limiting its rate pushes back at any level). Such a push-back is the limit's to
    /// answer; the worker need not pause every write, as it must for a rate limit. (A sink
    /// deferring above 5 in flight paused the worker at every probe of 6: Vegas stood
    /// still a tenth of the time.)
    pub fn explains(&self, inflight: usize) -> bool {
        if !self.lock().adapts() {
            return false;
        }
        let above_taken = {
            let answered = crate::lock::lock(&self.answered);
            if answered.len() < EXPLAINED_AFTER {
                return false; // too little taken to judge by
            }
            answered.iter().all(|(_, _, at)| *at < inflight)
        };
        let now = Instant::now();
        let mut contradicted = crate::lock::lock(&self.contradicted);
        if !above_taken {
            *contradicted = Some(now);
            return false;
        }
        contradicted.is_none_or(|at| now - at >= CONTRADICTED_FOR)
    }

    /// Completes once a write that began at `began` is overdue by [`cut_after`]; never
    /// when cuts are off.
    pub async fn overdue(&self, began: Instant) {
        if !self.cuts {
            return std::future::pending().await;
        }
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let inflight = self.writes_in_flight.load(SeqCst);
            match cut_after(inflight, self.limit(), &self.answered()) {
                Some(after) if began.elapsed() >= after => return,
                Some(after) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(began + after) => {}
                        _ = changed => {}
                    }
                }
                // Answers age out of the judgement with time alone: look again.
                None => {
                    tokio::select! {
                        _ = tokio::time::sleep(CUT_AFTER_AT_LEAST) => {}
                        _ = changed => {}
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn ConcurrencyLimit>> {
        crate::lock::lock(&self.limit)
    }
}

#[cfg(test)]
mod tests;
