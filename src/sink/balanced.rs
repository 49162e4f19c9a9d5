//! A sink served by several endpoints (an ingest API behind N hosts, several PostgreSQL
//! primaries): each write goes to the endpoint the balancer picks — by measured load,
//! the worker's zone first. An endpoint that throttles is paused alone and one that cannot
//! be reached is set aside and probed again later; the batch goes to another, and the
//! worker hears of it only when none is available.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Sink, WriteOutcome};
use crate::config::BalanceConfig;
use crate::control::backoff::Backoff;
use crate::control::balance::balancer::Balancer;
use crate::record::{DeadLetter, Row};
use crate::telemetry::metrics::{ENDPOINT_LATENCY, ENDPOINT_REQUESTS, ENDPOINT_UP};

/// How long an endpoint that throttled without saying how long is paused.
const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

pub struct Endpoint {
    pub sink: Arc<dyn Sink>,
    /// As metrics and messages show it: without a password.
    pub name: String,
    pub zone: Option<String>,
}

pub struct BalancedSink {
    endpoints: Vec<Endpoint>,
    balancer: Mutex<Balancer>,
}

impl BalancedSink {
    pub fn new(endpoints: Vec<Endpoint>, balance: &BalanceConfig) -> Self {
        let balancer = Balancer::new(
            balance.strategy,
            balance.zone.clone(),
            endpoints.iter().map(|e| e.zone.clone()).collect(),
            Duration::from_millis(100),
            balance.decay,
            Backoff::new(Duration::from_millis(500), Duration::from_secs(30), 2.0),
            rand::random(),
            Instant::now(),
        );
        BalancedSink {
            endpoints,
            balancer: Mutex::new(balancer),
        }
    }

    fn balancer(&self) -> MutexGuard<'_, Balancer> {
        self.balancer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the answer of endpoint `i` and publishes its state.
    fn observe(&self, i: usize, outcome: &WriteOutcome, began: Instant) {
        let done = Instant::now();
        let rtt = done - began;
        let name = self.endpoints[i].name.clone();
        metrics::counter!(ENDPOINT_REQUESTS, "endpoint" => name.clone(), "outcome" => outcome.label()).increment(1);
        let mut balancer = self.balancer();
        match outcome {
            WriteOutcome::Throttled { retry_after, .. } => {
                balancer.throttled(i, rtt, done + retry_after.unwrap_or(DEFAULT_PAUSE), done)
            }
            WriteOutcome::Unavailable(_) => balancer.failed(i, done),
            _ => balancer.answered(i, rtt, done),
        }
        let state = &balancer.endpoints()[i];
        metrics::gauge!(ENDPOINT_LATENCY, "endpoint" => name.clone())
            .set(state.latency.estimate().as_secs_f64());
        metrics::gauge!(ENDPOINT_UP, "endpoint" => name).set(if state.is_down(done) {
            0.0
        } else {
            1.0
        });
    }

    /// What the worker hears when no endpoint is available.
    fn none_available(&self) -> WriteOutcome {
        let balancer = self.balancer();
        let now = Instant::now();
        if balancer.endpoints().iter().all(|e| e.is_down(now)) {
            WriteOutcome::Unavailable("every endpoint is down".into())
        } else {
            WriteOutcome::Throttled {
                retry_after: balancer
                    .next_available()
                    .map(|t| t.saturating_duration_since(now)),
                reason: "every endpoint is throttled or down".into(),
            }
        }
    }
}

#[async_trait]
impl Sink for BalancedSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        for _ in 0..self.endpoints.len() * 2 {
            let Some(i) = self.balancer().pick(Instant::now()) else {
                break;
            };
            let began = Instant::now();
            let outcome = self.endpoints[i].sink.write(rows).await;
            self.observe(i, &outcome, began);
            match outcome {
                WriteOutcome::Throttled { .. } | WriteOutcome::Unavailable(_) => continue,
                other => return other,
            }
        }
        self.none_available()
    }

    /// Dead letters go to the first endpoint that takes them.
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        let mut last = WriteOutcome::Unavailable("no endpoint".into());
        for e in &self.endpoints {
            last = e.sink.dead_letter(letters).await;
            if matches!(last, WriteOutcome::Written { .. }) {
                break;
            }
        }
        last
    }

    /// Ready while any endpoint answers.
    async fn probe(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        for e in &self.endpoints {
            match e.sink.probe().await {
                Ok(()) => return Ok(()),
                Err(err) => errors.push(format!("{}: {err}", e.name)),
            }
        }
        Err(errors.join("; "))
    }
}
