//! A sink served by several endpoints (an ingest API behind N hosts, several PostgreSQL
//! primaries): each write goes to the endpoint the balancer picks — by measured load,
//! the worker's zone first. An endpoint that throttles is paused alone and one that cannot
//! be reached is set aside and probed again within `throttle.max_pause`; the batch goes to
//! another, and the worker hears of it only when none is available. What it hears then
//! is a throttle only if every endpoint tried answered "slow down" — a throttling endpoint
//! alone does not cut the worker's rate while others are merely unreachable — and an outage
//! otherwise.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
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
    /// As metrics and messages show it: a configured name or host:port, never the URL.
    pub name: String,
    pub zone: Option<String>,
}

pub struct BalancedSink {
    endpoints: Vec<Endpoint>,
    balancer: Mutex<Balancer>,
}

impl BalancedSink {
    /// An endpoint that cannot be reached is probed again within `max_pause`.
    pub fn new(endpoints: Vec<Endpoint>, balance: &BalanceConfig, max_pause: Duration) -> Self {
        let balancer = Balancer::new(
            balance.strategy,
            balance.zone.clone(),
            endpoints.iter().map(|e| e.zone.clone()).collect(),
            Duration::from_millis(100),
            balance.decay,
            Backoff::new(Duration::from_millis(500).min(max_pause), max_pause, 2.0),
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
    }

    /// What the worker hears when no endpoint is available: an outage when every endpoint
    /// is down or one tried for this batch could not be reached (`unreachable`), else a
    /// throttle. Its wait is the time until an endpoint is available again only if every
    /// throttled endpoint named one; otherwise none, so that an endpoint answering 503
    /// forever counts as one streak (one cut), not a fresh throttle every tick.
    fn none_available(&self, unreachable: Option<String>) -> WriteOutcome {
        let balancer = self.balancer();
        let now = Instant::now();
        if let Some(reason) = unreachable {
            return WriteOutcome::Unavailable(format!(
                "no endpoint available; the last unreachable: {reason}"
            ));
        }
        if balancer.endpoints().iter().all(|e| e.is_down(now)) {
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
        for _ in 0..self.endpoints.len() * 2 {
            let Some(i) = self.balancer().pick(Instant::now()) else {
                break;
            };
            let began = Instant::now();
            let outcome = self.endpoints[i].sink.write(rows).await;
            self.observe(i, &outcome, began);
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
        let mut last = WriteOutcome::Unavailable("no endpoint".into());
        for e in &self.endpoints {
            last = e.sink.dead_letter(letters).await;
            if matches!(last, WriteOutcome::Written { .. }) {
                break;
            }
        }
        last
    }

    /// Ready while any endpoint could take a write now: not set aside as down, and its own
    /// probe passes. The endpoints are probed together: the first to pass answers.
    async fn probe(&self) -> Result<(), String> {
        let now = Instant::now();
        let down: Vec<bool> = {
            let balancer = self.balancer();
            balancer
                .endpoints()
                .iter()
                .map(|e| e.is_down(now))
                .collect()
        };
        let mut probes: FuturesUnordered<_> = self
            .endpoints
            .iter()
            .zip(down)
            .map(|(e, down)| async move {
                if down {
                    Err(format!("{}: down", e.name))
                } else {
                    e.sink
                        .probe()
                        .await
                        .map_err(|err| format!("{}: {err}", e.name))
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
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::balance::balancer::Strategy;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Answer {
        Write,
        Throttle(Option<Duration>),
        Refuse,
    }

    /// An endpoint answering as told, counting its requests and when they came.
    struct Fake {
        answer: Mutex<Answer>,
        requests: Mutex<Vec<Instant>>,
    }

    impl Fake {
        fn new(answer: Answer) -> Arc<Fake> {
            Arc::new(Fake {
                answer: Mutex::new(answer),
                requests: Mutex::default(),
            })
        }

        fn set(&self, answer: Answer) {
            *self.answer.lock().unwrap() = answer;
        }

        fn requests(&self) -> Vec<Instant> {
            self.requests.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl Sink for Fake {
        async fn write(&self, rows: &[Row]) -> WriteOutcome {
            self.requests.lock().unwrap().push(Instant::now());
            match *self.answer.lock().unwrap() {
                Answer::Write => WriteOutcome::Written {
                    inserted: rows.len() as u64,
                    duplicates: 0,
                },
                Answer::Throttle(retry_after) => WriteOutcome::Throttled {
                    retry_after,
                    unit: None,
                    reason: "HTTP 503".into(),
                },
                Answer::Refuse => WriteOutcome::Unavailable("connection refused".into()),
            }
        }

        async fn dead_letter(&self, _: &[DeadLetter]) -> WriteOutcome {
            WriteOutcome::Fatal("not here".into())
        }
    }

    fn sink(fakes: &[Arc<Fake>], max_pause: Duration) -> BalancedSink {
        let endpoints = fakes
            .iter()
            .enumerate()
            .map(|(i, f)| Endpoint {
                sink: f.clone(),
                name: format!("e{i}"),
                zone: None,
            })
            .collect();
        let balance = BalanceConfig {
            strategy: Strategy::P2cEwma,
            ..BalanceConfig::default()
        };
        BalancedSink::new(endpoints, &balance, max_pause)
    }

    fn rows() -> Vec<Row> {
        vec![Row {
            key: "k".into(),
            payload: "{}".into(),
            origin: "t:0".into(),
            ..Default::default()
        }]
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttling_endpoint_alone_does_not_hold_up_another() {
        let fakes = [Fake::new(Answer::Throttle(None)), Fake::new(Answer::Write)];
        let s = sink(&fakes, Duration::from_secs(5));
        for _ in 0..200 {
            assert!(matches!(
                s.write(&rows()).await,
                WriteOutcome::Written { .. }
            ));
            tokio::time::advance(Duration::from_millis(50)).await;
        }
        assert_eq!(fakes[1].requests().len(), 200);
        // Paused a second after each 503: about one request in twenty, never a batch lost.
        assert!(
            fakes[0].requests().len() <= 12,
            "{}",
            fakes[0].requests().len()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_makes_it_an_outage_and_only_named_waits_are_passed_on() {
        let fakes = [Fake::new(Answer::Refuse), Fake::new(Answer::Throttle(None))];
        let s = sink(&fakes, Duration::from_secs(5));
        let outcome = s.write(&rows()).await;
        assert_eq!(outcome.label(), "unavailable", "{outcome:?}");
        // Next: one endpoint down, the other throttled without a wait: nobody is tried, and
        // the worker hears a throttle with no wait (one streak, not a cut per tick).
        assert_eq!(
            s.write(&rows()).await,
            WriteOutcome::Throttled {
                retry_after: None,
                unit: None,
                reason: "every endpoint is throttled or down".into()
            }
        );

        let fakes = [
            Fake::new(Answer::Throttle(Some(Duration::from_secs(2)))),
            Fake::new(Answer::Throttle(Some(Duration::from_secs(3)))),
        ];
        let s = sink(&fakes, Duration::from_secs(5));
        assert_eq!(
            s.write(&rows()).await,
            WriteOutcome::Throttled {
                retry_after: Some(Duration::from_secs(2)),
                unit: None,
                reason: "every endpoint is throttled or down".into()
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_endpoint_back_from_refusing_is_used_within_max_pause() {
        let max_pause = Duration::from_secs(2);
        let fakes = [Fake::new(Answer::Refuse), Fake::new(Answer::Throttle(None))];
        let s = sink(&fakes, max_pause);
        let step = Duration::from_millis(100);
        // Five rounds of a minute of refusals each (long enough for an uncapped backoff to
        // grow past 30 s), so that a lucky draw of the jitter cannot pass for the cap.
        for round in 0..5 {
            fakes[0].set(Answer::Refuse);
            let back = Instant::now() + Duration::from_secs(60);
            while Instant::now() < back {
                let _ = s.write(&rows()).await;
                tokio::time::advance(step).await;
            }
            fakes[0].set(Answer::Write);
            let written_at = loop {
                if matches!(s.write(&rows()).await, WriteOutcome::Written { .. }) {
                    break Instant::now();
                }
                tokio::time::advance(step).await;
            };
            assert!(
                written_at - back <= max_pause + step,
                "round {round}: the endpoint was back for {:?} before it got a write",
                written_at - back
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ready_only_while_an_endpoint_could_take_a_write() {
        struct Probed(Result<(), String>);
        #[async_trait]
        impl Sink for Probed {
            async fn write(&self, _: &[Row]) -> WriteOutcome {
                WriteOutcome::Unavailable("refused".into())
            }
            async fn probe(&self) -> Result<(), String> {
                if self.0.is_err() {
                    std::future::pending::<()>().await;
                }
                self.0.clone()
            }
            async fn dead_letter(&self, _: &[DeadLetter]) -> WriteOutcome {
                WriteOutcome::Fatal("not here".into())
            }
        }
        let endpoints = |probes: Vec<Result<(), String>>| {
            probes
                .into_iter()
                .enumerate()
                .map(|(i, p)| Endpoint {
                    sink: Arc::new(Probed(p)) as Arc<dyn Sink>,
                    name: format!("e{i}"),
                    zone: None,
                })
                .collect::<Vec<_>>()
        };
        let balance = BalanceConfig::default();
        let max_pause = Duration::from_secs(5);
        // One hung endpoint does not keep the answering one from making the worker ready.
        let s = BalancedSink::new(
            endpoints(vec![Err("hung".into()), Ok(())]),
            &balance,
            max_pause,
        );
        let ready = tokio::time::timeout(Duration::from_secs(1), s.probe()).await;
        assert_eq!(ready, Ok(Ok(())));
        // Its probe passes, but every write to it was refused: it is down, so not ready.
        let _ = s.write(&rows()).await;
        let ready = tokio::time::timeout(Duration::from_secs(1), s.probe()).await;
        assert!(matches!(ready, Err(_) | Ok(Err(_))), "{ready:?}");
    }
}
