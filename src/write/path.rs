//! The write path, composed in one place from configuration: the worker's shared
//! [`Backpressure`] (throttle pauses, the learned sink limit, the retry budget, resends of
//! refused items), the [`LimitGate`] that admits writes by the concurrency limit, and the
//! [`Delivery`] that drives each batch through them with the retry backoff (in the order
//! [`crate::write`] lists). The worker and the tests build it the same way, so what the
//! tests exercise is what runs.

use std::path::PathBuf;
use std::sync::Arc;

use super::backpressure::Backpressure;
use super::delivery::Delivery;
use super::limit_gate::LimitGate;
use super::limit_memory::{LimitMemory, sink_identity};
use crate::config::{
    Backoffs, ConcurrencySettings, Config, RateSettings, RetrySettings, ThrottleSettings,
};
use crate::control::limit::ConcurrencyLimit;
use crate::sink::Sink;
use crate::source::settings::SourceSettings;
use crate::stats::Stats;

/// What the write path reads of the configuration.
#[derive(Debug, Clone, Default)]
pub struct WriteSettings {
    pub retry: RetrySettings,
    pub throttle: ThrottleSettings,
    pub rate: RateSettings,
    pub concurrency: ConcurrencySettings,
    /// Where the sink's learned limit is kept across runs (`throttle.remember`).
    pub memory: Option<LimitMemory>,
}

impl WriteSettings {
    pub fn of(config: &Config) -> Self {
        let sink = &config.sink;
        let memory = remember_at(config).map(|path| {
            let mut urls: Vec<&str> = sink.urls.iter().map(|e| e.url()).collect();
            if !sink.url.is_empty() {
                urls.insert(0, &sink.url);
            }
            let kind = serde_json::to_value(sink.kind())
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            LimitMemory::new(path, sink_identity(&kind, &urls, &sink.table))
        });
        WriteSettings {
            retry: config.retry.clone(),
            throttle: config.throttle.clone(),
            rate: config.rate.clone(),
            concurrency: config.concurrency.clone(),
            memory,
        }
    }
}

/// Where the learned limit is kept (`throttle.remember`): the path set; unset, beside a
/// file source's checkpoint (kept with it, as the checkpoint is one worker's alone);
/// `""`, nowhere. Other sources keep it only where told: workers sharing a configuration
/// would share the file.
fn remember_at(config: &Config) -> Option<PathBuf> {
    match &config.throttle.remember {
        Some(path) if path.as_os_str().is_empty() => None,
        Some(path) => Some(path.clone()),
        None => match &config.source {
            SourceSettings::File(file) => file.checkpoint_path().map(|checkpoint| {
                let mut name = checkpoint.into_os_string();
                name.push(".limit");
                PathBuf::from(name)
            }),
            _ => None,
        },
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
        if let Some(memory) = &settings.memory {
            pressure.remember(memory.clone(), settings.throttle.limit_params());
        }
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
