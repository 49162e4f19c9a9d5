//! Concurrency limits: how many batches may be in flight, following the sink's latency
//! rather than a fixed number. Each algorithm is a pure state machine fed one sample per
//! finished write; the pipeline admits a write only while in-flight < limit.

pub mod aimd;
pub mod fixed;
pub mod gradient2;
mod pushed_back;
pub mod settings;
pub mod vegas;

use std::time::Duration;

/// One finished write, as a limit sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// How long the write took.
    pub rtt: Duration,
    /// Writes in flight when it started (itself included).
    pub inflight: usize,
    /// The sink pushed back (throttled, timed out): a congestion signal.
    pub dropped: bool,
}

/// A window of samples judged as one, as Netflix's `WindowedLimit` feeds Vegas and
/// Gradient2 the mean latency, the most writes in flight and any drop of a window: one
/// write's latency is noise, the mean of a round of writes is the sink's. A window is one
/// round of writes at the limit (TCP Vegas judges once per round trip, too), so a drop
/// cuts once per round, not once per write that round sent. (A mean needs no minimum
/// count; a p95 does, which is why AIMD's window holds at least 40. Longer windows start
/// slower: at least 10 samples, Vegas made 83.8 requests/s on Vector's shallow knee
/// against 88.8; at least 4, Gradient2 89.8 against 93.2.)
#[derive(Debug, Clone, Default)]
pub struct Window {
    count: usize,
    sum: f64,
    min: Option<Duration>,
    max_inflight: usize,
    min_inflight: Option<usize>,
    dropped: bool,
    drops: usize,
}

/// What a closed window tells.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    /// Mean latency of its samples.
    pub rtt: Duration,
    /// The fastest of them (the candidate no-load latency).
    pub min_rtt: Duration,
    /// Most writes in flight any of them started with.
    pub inflight: usize,
    /// Fewest writes in flight any of them started with.
    pub min_inflight: usize,
    pub dropped: bool,
    /// How many of its samples were drops.
    pub drops: usize,
    /// Samples it held.
    pub count: usize,
}

impl Judged {
    /// The share of a new estimate to take for this window, given the share `smoothing`
    /// one sample would take: as much as its samples taken one by one would have, so a
    /// window moves the limit as fast as per-sample updates did, on their mean.
    pub fn weight(&self, smoothing: f64) -> f64 {
        1.0 - (1.0 - smoothing).powi(self.count as i32)
    }
}

impl Window {
    /// Adds `s`; returns the window's verdict once it has `round` samples (at least one),
    /// and starts the next.
    pub fn add(&mut self, s: Sample, round: usize) -> Option<Judged> {
        self.count += 1;
        self.sum += s.rtt.as_secs_f64();
        self.min = Some(self.min.map_or(s.rtt, |m| m.min(s.rtt)));
        self.max_inflight = self.max_inflight.max(s.inflight);
        self.min_inflight = Some(self.min_inflight.map_or(s.inflight, |m| m.min(s.inflight)));
        self.dropped |= s.dropped;
        self.drops += usize::from(s.dropped);
        if self.count < round {
            return None;
        }
        let judged = Judged {
            rtt: Duration::from_secs_f64(self.sum / self.count as f64),
            min_rtt: self.min.unwrap_or_default(),
            inflight: self.max_inflight,
            min_inflight: self.min_inflight.unwrap_or_default(),
            dropped: self.dropped,
            drops: self.drops,
            count: self.count,
        };
        *self = Window::default();
        Some(judged)
    }

    pub fn clear(&mut self) {
        *self = Window::default();
    }
}

/// Writes still unanswered long after the sink's typical round trip, as the gate sees them
/// when a write finishes. A drop is known only at its timeout, ten round trips later on a
/// 100 ms sink; meanwhile its slot is held, the writes around it are answered in good time,
/// and a round of them reads as a probe that held: the limit grew on into the drop, 5 to
/// 11 in flight before the first timeout came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalled {
    /// The fewest writes in flight any of them started with.
    pub level: usize,
    /// How many there are.
    pub count: usize,
}

impl Stalled {
    /// `new`, held to what the writes still answering ran at below the stalled level: each
    /// stalled write holds a slot, so the limit may reach `level − 1 + count` and no more
    /// (not a cut: a limit already past that stays where it is).
    pub fn cap(stalled: Option<Stalled>, limit: f64, new: f64) -> f64 {
        match stalled {
            Some(s) if new > limit => {
                let most = (s.level + s.count).saturating_sub(1) as f64;
                new.min(limit.max(most))
            }
            _ => new,
        }
    }
}

pub trait ConcurrencyLimit: Send {
    /// Writes allowed in flight now.
    fn limit(&self) -> usize;

    fn on_sample(&mut self, sample: Sample);

    /// The writes stalled as the next sample arrives (`None`: none). While some are, the
    /// limit does not grow past them, and a round at a level pushed back before does not
    /// count as a probe that held: its stalled write may be the drop.
    fn stalled(&mut self, _stalled: Option<Stalled>) {}

    /// Whether a push-back lowers the limit: then a push-back the writes in flight explain
    /// is the limit's to answer (see [`crate::write::limit_gate::LimitGate::explains`]).
    fn adapts(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalled_writes_hold_growth_to_the_level_below_them_and_never_cut() {
        let one_at_6 = Some(Stalled { level: 6, count: 1 });
        assert_eq!(Stalled::cap(None, 6.0, 7.0), 7.0, "nothing stalled");
        assert_eq!(
            Stalled::cap(one_at_6, 5.4, 6.4),
            6.0,
            "up to 6: 5 answering"
        );
        assert_eq!(Stalled::cap(one_at_6, 6.0, 7.0), 6.0, "no growth past it");
        assert_eq!(Stalled::cap(one_at_6, 9.0, 10.0), 9.0, "not a cut either");
        assert_eq!(Stalled::cap(one_at_6, 9.0, 8.0), 8.0, "a cut passes");
        let three = Some(Stalled { level: 6, count: 3 });
        assert_eq!(
            Stalled::cap(three, 7.0, 9.0),
            8.0,
            "three slots held: 5 + 3"
        );
    }
}

/// Each algorithm against a simulated sink whose latency is flat up to a knee of
/// concurrent requests and grows exponentially past it (the exponential-backoff seed's
/// test server): it must settle near the knee, not swing between min and max.
#[cfg(test)]
mod scenarios {
    use super::*;

    const BASE_MS: f64 = 50.0;
    const KNEE: usize = 8;

    /// base up to the knee, then doubling every 2 more.
    fn latency(concurrency: usize) -> Duration {
        let over = concurrency.saturating_sub(KNEE) as f64;
        Duration::from_secs_f64(BASE_MS / 1000.0 * 2f64.powf(over / 2.0))
    }

    /// A closed loop with endless work for `secs` simulated seconds, stepped by 1 ms.
    /// The sink shares itself among what is in flight: each request advances at
    /// 1 / latency(current concurrency) per second, so everyone slows down when the
    /// concurrency passes the knee. Returns the limit after every sample and the
    /// (finish time, rtt) of every request.
    fn run(limit: &mut dyn ConcurrencyLimit, secs: f64) -> (Vec<usize>, Vec<(f64, f64)>) {
        const DT: f64 = 0.001;
        // (progress 0..1, started at, inflight at start)
        let mut in_flight: Vec<(f64, f64, usize)> = Vec::new();
        let mut limits = Vec::new();
        let mut done = Vec::new();
        let mut now = 0.0;
        while now < secs {
            while in_flight.len() < limit.limit() {
                in_flight.push((0.0, now, in_flight.len() + 1));
            }
            let speed = DT / latency(in_flight.len()).as_secs_f64();
            now += DT;
            let mut i = 0;
            while i < in_flight.len() {
                in_flight[i].0 += speed;
                if in_flight[i].0 >= 1.0 {
                    let (_, started, inflight) = in_flight.swap_remove(i);
                    let rtt = now - started;
                    limit.on_sample(Sample {
                        rtt: Duration::from_secs_f64(rtt),
                        inflight,
                        dropped: false,
                    });
                    limits.push(limit.limit());
                    done.push((now, rtt));
                } else {
                    i += 1;
                }
            }
        }
        (limits, done)
    }

    /// Judged on the second half: the 10th..90th percentile band of the limit (a Vegas
    /// probe dips to the minimum on purpose, for one round), and the p95 latency.
    fn settles_near_the_knee(name: &str, limit: &mut dyn ConcurrencyLimit, min: usize, max: usize) {
        let (limits, done) = run(limit, 120.0);
        let mut tail = limits[limits.len() / 2..].to_vec();
        tail.sort_unstable();
        let (lo, hi) = (tail[tail.len() / 10], tail[tail.len() * 9 / 10]);
        let late: Vec<&(f64, f64)> = done.iter().filter(|(t, _)| *t >= 60.0).collect();
        let throughput = late.len() as f64 / 60.0;
        let knee_throughput = KNEE as f64 / (BASE_MS / 1000.0);
        let mut rtts: Vec<f64> = late.iter().map(|(_, r)| *r).collect();
        rtts.sort_by(f64::total_cmp);
        let p95 = rtts[rtts.len() * 95 / 100] * 1000.0;
        eprintln!(
            "{name}: limit p10..p90 {lo}..{hi} in the second half, {throughput:.0} req/s (knee {knee_throughput:.0}), p95 {p95:.0} ms"
        );
        assert!(
            lo > min && hi < max,
            "{name} swings between min and max: {lo}..{hi}"
        );
        assert!(
            lo >= KNEE / 2 && hi <= KNEE * 2,
            "{name} settles near the knee of {KNEE}: {lo}..{hi}"
        );
        assert!(hi - lo <= KNEE / 2, "{name} oscillates: {lo}..{hi}");
        assert!(
            p95 < 1000.0,
            "{name} keeps latency bounded: p95 {p95:.0} ms"
        );
        assert!(
            throughput >= knee_throughput / 4.0,
            "{name} keeps the sink busy: {throughput:.0} req/s"
        );
    }

    #[test]
    fn aimd_settles_near_the_knee() {
        let mut l = aimd::AimdLimit::new(aimd::AimdParams {
            initial: 1,
            max: 64,
            target: Duration::from_millis(75),
            ..aimd::AimdParams::default()
        });
        settles_near_the_knee("aimd", &mut l, 1, 64);
    }

    #[test]
    fn vegas_settles_near_the_knee() {
        let mut l = vegas::VegasLimit::new(1, 1, 64, 0.3, 3);
        settles_near_the_knee("vegas", &mut l, 1, 64);
    }

    #[test]
    fn gradient2_settles_near_the_knee() {
        let mut l = gradient2::Gradient2Limit::new(1, 1, 64, 0.2, 1.5, 1.0);
        settles_near_the_knee("gradient2", &mut l, 1, 64);
    }
}
