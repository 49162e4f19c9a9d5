//! The write path, composed in one place from configuration: the worker's shared
//! [`Backpressure`] (throttle pauses, the learned sink limit, the retry budget, resends of
//! refused items), the [`LimitGate`] that admits writes by the concurrency limit, and the
//! [`Delivery`] that drives each batch through them with the retry backoff (in the order
//! [`crate::write`] lists). The worker and the tests build it the same way, so what the
//! tests exercise is what runs.

use std::sync::Arc;

use super::backpressure::Backpressure;
use super::delivery::Delivery;
use super::limit_gate::LimitGate;
use crate::config::{
    Backoffs, ConcurrencySettings, Config, RateSettings, RetrySettings, ThrottleSettings,
};
use crate::control::limit::ConcurrencyLimit;
use crate::sink::Sink;
use crate::stats::Stats;

/// What the write path reads of the configuration.
#[derive(Debug, Clone, Default)]
pub struct WriteSettings {
    pub retry: RetrySettings,
    pub throttle: ThrottleSettings,
    pub rate: RateSettings,
    pub concurrency: ConcurrencySettings,
}

impl WriteSettings {
    pub fn of(config: &Config) -> Self {
        WriteSettings {
            retry: config.retry.clone(),
            throttle: config.throttle.clone(),
            rate: config.rate.clone(),
            concurrency: config.concurrency.clone(),
        }
    }
}

pub struct WritePath {
    sink: Arc<dyn Sink>,
    delivery: Arc<Delivery>,
    pressure: Arc<Backpressure>,
    gate: Arc<LimitGate>,
}

impl WritePath {
    pub fn new(sink: Arc<dyn Sink>, settings: &WriteSettings, stats: Arc<Stats>) -> Self {
        Self::with_limit(sink, settings, settings.concurrency.build(), stats)
    }

    /// As [`WritePath::new`], admitting writes by `limit` instead of the one
    /// `[concurrency]` describes (a seeded one, for a run that must replay exactly).
    pub fn with_limit(
        sink: Arc<dyn Sink>,
        settings: &WriteSettings,
        limit: Box<dyn ConcurrencyLimit>,
        stats: Arc<Stats>,
    ) -> Self {
        let backoffs = Backoffs::new(&settings.retry, &settings.throttle);
        let pressure = Arc::new(Backpressure::new(
            &settings.throttle,
            &settings.retry,
            &settings.rate,
            backoffs.outage,
            stats.clone(),
        ));
        let gate = Arc::new(LimitGate::new(limit).with_cuts(settings.concurrency.cuts_overdue()));
        let delivery = Arc::new(Delivery::new(
            sink.clone(),
            backoffs.retry,
            settings.retry.max_attempts,
            pressure.clone(),
            gate.clone(),
            stats,
        ));
        WritePath {
            sink,
            delivery,
            pressure,
            gate,
        }
    }

    /// The same pause jitter on every run, for scenarios that must replay exactly; a
    /// worker draws its seed at random so that many workers do not pause in step.
    pub fn seeded(self, seed: u64) -> Self {
        self.pressure.reseed(seed);
        self
    }

    pub fn sink(&self) -> &Arc<dyn Sink> {
        &self.sink
    }

    pub fn delivery(&self) -> &Arc<Delivery> {
        &self.delivery
    }

    pub fn pressure(&self) -> &Arc<Backpressure> {
        &self.pressure
    }

    pub fn gate(&self) -> &Arc<LimitGate> {
        &self.gate
    }
}
