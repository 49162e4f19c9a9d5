//! A sink served by several endpoints (an ingest API behind N hosts, several PostgreSQL
//! primaries): each write goes to the endpoint the balancer picks — by measured load,
//! the worker's zone first, or within the worker's aperture. An endpoint that throttles is
//! paused alone and one that cannot be reached is set aside and probed again within
//! `throttle.max_pause`; the batch goes to another, and the worker hears of it only when
//! none is available. What it hears then is a throttle only if every endpoint tried
//! answered "slow down" — a throttling endpoint alone does not cut the worker's rate while
//! others are merely unreachable — and an outage otherwise. Endpoints join and leave while
//! it runs (`sink::discovery`): one that leaves takes no new batch and finishes those it has.

pub mod aperture;
pub(crate) mod metric_names;
pub mod schema;
pub mod settings;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::{Sink, WriteOutcome};
use crate::control::backoff::Backoff;
use crate::control::balance::balancer::Balancer;
use crate::control::balance::ring::Coordinate;
use crate::record::{DeadLetter, Row};
use metric_names::{APERTURE_SIZE, ENDPOINT_LATENCY, ENDPOINT_REQUESTS, ENDPOINT_UP};
use settings::BalanceSettings;

/// How long an endpoint that throttled without saying how long is paused.
const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

pub struct Endpoint {
    pub sink: Arc<dyn Sink>,
    /// What it is known by across workers and discovery rounds: its URL.
    pub key: String,
    /// As metrics and messages show it: a configured name or host:port, never the URL.
    pub name: String,
    pub zone: Option<String>,
}

pub struct BalancedSink {
    inner: Mutex<Inner>,
}

/// The balancer and the endpoints by its indexes (None: a slot freed by a removal).
struct Inner {
    balancer: Balancer,
    endpoints: Vec<Option<Endpoint>>,
}

impl Inner {
    fn live(&self) -> impl Iterator<Item = (usize, &Endpoint)> {
        self.balancer
            .live()
            .filter_map(|i| self.endpoints[i].as_ref().map(|e| (i, e)))
    }

    /// Drops the sink of a removed endpoint whose requests are all answered (its
    /// connections close with it).
    fn release_if_drained(&mut self, i: usize) {
        if self.balancer.is_free(&self.balancer.endpoints()[i]) {
            self.endpoints[i] = None;
        }
    }
}

impl BalancedSink {
    /// An endpoint that cannot be reached is probed again after `down`'s waits (the
    /// outage backoff); `coordinate` places the worker on the ring for a deterministic
    /// aperture.
    pub fn new(
        endpoints: Vec<Endpoint>,
        balance: &BalanceSettings,
        coordinate: Option<Coordinate>,
        down: Backoff,
    ) -> Self {
        let now = Instant::now();
        let balancer = Balancer::new(
            balance.strategy,
            balance.zone.clone(),
            Duration::from_millis(100),
            balance.decay,
            down,
            rand::random(),
        )
        .with_aperture(balance.aperture.settings(), coordinate, now);
        let s = BalancedSink {
            inner: Mutex::new(Inner {
                balancer,
                endpoints: Vec::new(),
            }),
        };
        for e in endpoints {
            s.add(e);
        }
        s
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        crate::lock::lock(&self.inner)
    }

    /// The keys of the endpoints in use (not removed).
    pub fn keys(&self) -> Vec<String> {
        self.inner().live().map(|(_, e)| e.key.clone()).collect()
    }

    /// A new endpoint joins: it is a candidate for the next batch. Two on one server
    /// (two databases) get a number to tell their labels apart.
    pub fn add(&self, mut endpoint: Endpoint) {
        let mut inner = self.inner();
        if inner.live().any(|(_, e)| e.name == endpoint.name) {
            endpoint.name = format!("{}#{}", endpoint.name, inner.balancer.live().count() + 1);
        }
        let i = inner
            .balancer
            .add(endpoint.key.clone(), endpoint.zone.clone(), Instant::now());
        if inner.endpoints.len() <= i {
            inner.endpoints.resize_with(i + 1, || None);
        }
        inner.endpoints[i] = Some(endpoint);
    }

    /// The endpoint `key` leaves: no new batch goes to it, those in flight finish.
    pub fn remove(&self, key: &str) {
        let mut inner = self.inner();
        let found = inner.live().find(|(_, e)| e.key == key).map(|(i, _)| i);
        if let Some(i) = found {
            inner.balancer.remove(i);
            inner.release_if_drained(i);
        }
    }

    /// Picks an endpoint for a batch, counted as in flight.
    fn pick(&self) -> Option<(usize, Arc<dyn Sink>, String)> {
        let mut inner = self.inner();
        let i = inner.balancer.pick(Instant::now())?;
        if let Some(members) = inner.balancer.aperture() {
            metrics::gauge!(APERTURE_SIZE).set(members.len() as f64);
        }
        let e = inner.endpoints[i]
            .as_ref()
            .expect("a picked endpoint has its sink");
        Some((i, e.sink.clone(), e.name.clone()))
    }

    /// Records the answer of endpoint `i` and publishes its state.
    fn observe(&self, i: usize, name: String, outcome: &WriteOutcome, began: Instant) {
        let done = Instant::now();
        let rtt = done - began;
        metrics::counter!(ENDPOINT_REQUESTS, "endpoint" => name.clone(), "outcome" => outcome.label()).increment(1);
        let mut inner = self.inner();
        let balancer = &mut inner.balancer;
        match outcome {
            WriteOutcome::Throttled { retry_after, .. } => balancer.throttled(
                i,
                rtt,
                done + retry_after.unwrap_or(DEFAULT_PAUSE),
                retry_after.is_some(),
                done,
            ),
            WriteOutcome::Unavailable(_) => balancer.failed(i, rtt, done),
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
        inner.release_if_drained(i);
    }

    /// What the worker hears when no endpoint is available: an outage when every endpoint
    /// is down or one tried for this batch could not be reached (`unreachable`), else a
    /// throttle. Its wait is the time until an endpoint is available again only if every
    /// throttled endpoint named one; otherwise none, so that an endpoint answering 503
    /// forever counts as one streak (one cut), not a fresh throttle every tick.
    fn none_available(&self, unreachable: Option<String>) -> WriteOutcome {
        let inner = self.inner();
        let balancer = &inner.balancer;
        let now = Instant::now();
        if let Some(reason) = unreachable {
            return WriteOutcome::Unavailable(format!(
                "no endpoint available; the last unreachable: {reason}"
            ));
        }
        if balancer.live().next().is_none() {
            return WriteOutcome::Unavailable("no endpoint is known (discovery found none)".into());
        }
        if balancer.all_down(now) {
            return WriteOutcome::Unavailable("every endpoint is down".into());
        }
        let retry_after = if balancer.throttles_named_their_waits(now) {
            balancer
                .next_available()
                .map(|t| t.saturating_duration_since(now))
        } else {
            None
        };
        WriteOutcome::Throttled {
            retry_after,
            unit: None,
            reason: "every endpoint is throttled or down".into(),
        }
    }
}

#[async_trait]
impl Sink for BalancedSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let mut unreachable = None;
        let tries = self.inner().balancer.live().count() * 2;
        for _ in 0..tries {
            let Some((i, sink, name)) = self.pick() else {
                break;
            };
            let began = Instant::now();
            let outcome = sink.write(rows).await;
            self.observe(i, name, &outcome, began);
            match outcome {
                WriteOutcome::Throttled { .. } => continue,
                WriteOutcome::Unavailable(reason) => {
                    unreachable = Some(reason);
                    continue;
                }
                other => return other,
            }
        }
        self.none_available(unreachable)
    }

    /// Dead letters go to the first endpoint that takes them.
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        let sinks: Vec<Arc<dyn Sink>> = self.inner().live().map(|(_, e)| e.sink.clone()).collect();
        let mut last = WriteOutcome::Unavailable("no endpoint".into());
        for sink in sinks {
            last = sink.dead_letter(letters).await;
            if matches!(last, WriteOutcome::Written { .. }) {
                break;
            }
        }
        last
    }

    /// Ready while any endpoint could take a write now: not set aside as down, and its own
    /// probe passes. The endpoints are probed together: the first to pass answers.
    async fn ping(&self) -> Result<(), String> {
        let now = Instant::now();
        let endpoints: Vec<(String, Arc<dyn Sink>, bool)> = {
            let inner = self.inner();
            inner
                .live()
                .map(|(i, e)| {
                    let down = inner.balancer.endpoints()[i].is_down(now);
                    (e.name.clone(), e.sink.clone(), down)
                })
                .collect()
        };
        let mut probes: FuturesUnordered<_> = endpoints
            .into_iter()
            .map(|(name, sink, down)| async move {
                if down {
                    Err(format!("{name}: down"))
                } else {
                    sink.ping().await.map_err(|err| format!("{name}: {err}"))
                }
            })
            .collect();
        let mut errors = Vec::new();
        while let Some(result) = probes.next().await {
            match result {
                Ok(()) => return Ok(()),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            return Err("no endpoint is known".into());
        }
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests;
