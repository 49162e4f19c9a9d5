//! The sink's push-back, shared by one worker's pipeline and all its deliveries. It holds
//! the throttle state (rate cut and recovery, whole-worker pause), the retry budget and the
//! measured goodput, and turns their pure decisions into waits on tokio's clock:
//!
//! - every write waits while the worker is paused ([`Backpressure::clear_to_send`]);
//! - a retry first waits for the budget to allow it ([`Backpressure::retry_permit`]);
//! - records sent again are owed to the cadence, which pulls that many fewer fresh ones,
//!   so that what reaches the sink per second stays within the rate, retries included;
//! - the pipeline applies [`Backpressure::rate`] to its cadence once per tick.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use tokio::time::Instant;

use crate::config::{RateConfig, RecoveryKind, RetryConfig, ThrottleConfig};
use crate::control::backoff::Backoff;
use crate::control::rate_meter::RateMeter;
use crate::control::recovery::Recovery;
use crate::control::retry_budget::RetryBudget;
use crate::control::throttle::{Signal, Throttle, ThrottleParams};
use crate::stats::Stats;

/// The goodput a throttle cuts is measured over this window.
const GOODPUT_WINDOW: Duration = Duration::from_secs(1);

pub struct Backpressure {
    epoch: Instant,
    state: Mutex<State>,
    /// Records sent again, not yet deducted from the cadence's allowance.
    owed: AtomicU64,
    /// Waits between attempts while the sink cannot be reached: capped by
    /// `throttle.max_pause`, so a sink that is back is noticed within that time.
    outage: Backoff,
    stats: Arc<Stats>,
}

struct State {
    throttle: Throttle,
    budget: RetryBudget,
    goodput: RateMeter,
    rng: StdRng,
    /// The configured rate (static, or the sum of leases), records per second.
    ceiling: f64,
}

impl Backpressure {
    /// One cut at most per `rate.tick`; the configured rate is the ceiling until
    /// [`Backpressure::set_ceiling`] changes it.
    pub fn new(
        throttle: &ThrottleConfig,
        retry: &RetryConfig,
        rate: &RateConfig,
        stats: Arc<Stats>,
    ) -> Self {
        let recovery = match throttle.recovery {
            RecoveryKind::Cubic => Recovery::Cubic {
                scale: throttle.cubic_scale,
            },
            RecoveryKind::Linear => Recovery::Linear {
                step: throttle.linear_step,
            },
        };
        let outage = Backoff::new(retry.min_delay, throttle.max_pause, retry.factor);
        let params = ThrottleParams {
            beta: throttle.beta,
            recovery,
            min_multiplier: throttle.min_multiplier,
            window: rate.tick,
            pause_jitter: throttle.pause_jitter,
            backoff: outage.clone(),
        };
        Backpressure {
            epoch: Instant::now(),
            state: Mutex::new(State {
                throttle: Throttle::new(params),
                budget: RetryBudget::new(
                    retry.budget_ratio,
                    retry.budget_min_per_second,
                    retry.budget_window,
                ),
                goodput: RateMeter::new(GOODPUT_WINDOW),
                rng: rand::make_rng(),
                ceiling: rate.records_per_second,
            }),
            owed: AtomicU64::new(0),
            outage,
            stats,
        }
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
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

    /// Deducts what is owed from a tick's allowance; returns the part deducted.
    pub fn settle_owed(&self, allowance: u64) -> u64 {
        let mut paid = 0;
        let _ = self.owed.fetch_update(Relaxed, Relaxed, |owed| {
            paid = owed.min(allowance);
            Some(owed - paid)
        });
        paid
    }

    /// A write was taken: `records` inserted or already there.
    pub fn written(&self, records: u64) {
        let now = self.now();
        let mut state = self.lock();
        state.goodput.record(now, records);
        state.throttle.on_success();
    }

    /// A write sent at `sent_at` was throttled.
    pub fn throttled(&self, sent_at: Duration, retry_after: Option<Duration>) {
        let now = self.now();
        let mut state = self.lock();
        let before = state.throttle.paused_until();
        let signal = Signal {
            now,
            sent_at,
            retry_after,
            ceiling: state.ceiling,
            measured: state.goodput.rate(now),
        };
        let State { throttle, rng, .. } = &mut *state;
        let reaction = throttle.on_throttle(signal, rng);
        let rate = throttle.rate(now, signal.ceiling);
        state.goodput.idle(before.max(now), reaction.paused_until);
        drop(state);
        if reaction.cut {
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
                tracing::info!(?pause, rate = rate.round(), "sink throttled: worker paused");
            } else {
                tracing::debug!(?pause, rate = rate.round(), "sink throttled: worker paused");
            }
        }
    }

    /// The rate allowed now, records per second; also published in the stats.
    pub fn rate(&self) -> f64 {
        let now = self.now();
        let state = self.lock();
        let rate = state.throttle.rate(now, state.ceiling);
        // A worker holding no capacity (ceiling 0) is not throttled: its share stays whole.
        let share = if state.ceiling > 0.0 {
            rate / state.ceiling
        } else {
            1.0
        };
        self.stats.rate_multiplier.set(share);
        rate
    }

    /// The configured rate changed (a lease gained or lost).
    pub fn set_ceiling(&self, ceiling: f64) {
        self.lock().ceiling = ceiling;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pressure() -> Backpressure {
        let rate = RateConfig {
            records_per_second: 1000.0,
            tick: Duration::from_millis(200),
        };
        Backpressure::new(
            &ThrottleConfig::default(),
            &RetryConfig::default(),
            &rate,
            Arc::new(Stats::default()),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_pauses_every_write_of_the_worker() {
        let p = pressure();
        assert_eq!(p.clear_to_send().await, Duration::ZERO);
        p.throttled(Duration::ZERO, Some(Duration::from_secs(2)));
        assert!(p.is_paused());
        let started = Instant::now();
        let sent_at = p.clear_to_send().await;
        let waited = started.elapsed();
        // Two seconds plus up to 20% jitter.
        assert!(
            waited >= Duration::from_secs(2) && waited <= Duration::from_millis(2400),
            "{waited:?}"
        );
        assert_eq!(sent_at, p.now());
        // Cut to 0.7; recovery starts as the pause ends (the timer fires within a ms of it).
        assert!((p.rate() - 700.0).abs() < 0.5, "{}", p.rate());
        assert_eq!(p.stats.rate_cuts.load(Relaxed), 1);
        assert_eq!(p.stats.pauses.load(Relaxed), 1);
        assert_eq!(p.stats.last_retry_after_ms.load(Relaxed), 2000);
        assert!((p.stats.rate_multiplier.get() - 0.7).abs() < 1e-3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_holds_retries_beyond_the_floor() {
        let p = pressure();
        // No first attempts: the floor alone, 1 per second over 10 s.
        let started = Instant::now();
        for _ in 0..10 {
            p.retry_permit(5).await;
        }
        assert_eq!(started.elapsed(), Duration::ZERO);
        p.retry_permit(5).await;
        assert!(started.elapsed() >= Duration::from_secs(10));
        assert_eq!(p.settle_owed(40), 40);
        assert_eq!(p.settle_owed(40), 15);
        assert_eq!(p.settle_owed(40), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_cuts_what_the_sink_actually_took() {
        let p = pressure();
        tokio::time::advance(Duration::from_millis(500)).await;
        p.written(200);
        p.throttled(p.now(), Some(Duration::ZERO));
        // 200 records in the first 0.5 s: 400 rec/s measured, cut to 280.
        assert!((p.rate() - 280.0).abs() < 1e-6, "{}", p.rate());
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_retried_within_the_longest_pause() {
        let throttle = ThrottleConfig {
            max_pause: Duration::from_secs(2),
            ..ThrottleConfig::default()
        };
        let p = Backpressure::new(
            &throttle,
            &RetryConfig::default(),
            &RateConfig::default(),
            Arc::new(Stats::default()),
        );
        // retry.max_delay is 30 s; the wait of an outage stops at throttle.max_pause.
        for attempt in 1..40 {
            let wait = p.outage_wait(attempt);
            assert!(
                wait >= Duration::from_millis(100) && wait <= Duration::from_secs(2),
                "attempt {attempt}: {wait:?}"
            );
        }
        assert!((30..40).any(|a| p.outage_wait(a) > Duration::from_secs(1)));
    }
}
