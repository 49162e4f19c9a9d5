use super::*;
use crate::config::{Backoffs, RetrySettings, ThrottleSettings};
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

/// The outage backoff a worker with this `throttle.max_pause` builds.
fn outage(max_pause: Duration) -> Backoff {
    let throttle = ThrottleSettings {
        max_pause,
        ..ThrottleSettings::default()
    };
    Backoffs::new(&RetrySettings::default(), &throttle).outage
}

fn sink(fakes: &[Arc<Fake>], max_pause: Duration) -> BalancedSink {
    let endpoints = fakes
        .iter()
        .enumerate()
        .map(|(i, f)| Endpoint {
            sink: f.clone(),
            key: format!("e{i}"),
            name: format!("e{i}"),
            zone: None,
        })
        .collect();
    let balance = BalanceSettings {
        strategy: Strategy::P2cEwma,
        ..BalanceSettings::default()
    };
    BalancedSink::new(endpoints, &balance, None, outage(max_pause))
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
        async fn ping(&self) -> Result<(), String> {
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
                key: format!("e{i}"),
                name: format!("e{i}"),
                zone: None,
            })
            .collect::<Vec<_>>()
    };
    let balance = BalanceSettings::default();
    let max_pause = Duration::from_secs(5);
    // One hung endpoint does not keep the answering one from making the worker ready.
    let s = BalancedSink::new(
        endpoints(vec![Err("hung".into()), Ok(())]),
        &balance,
        None,
        outage(max_pause),
    );
    let ready = tokio::time::timeout(Duration::from_secs(1), s.ping()).await;
    assert_eq!(ready, Ok(Ok(())));
    // Its probe passes, but every write to it was refused: it is down, so not ready.
    let _ = s.write(&rows()).await;
    let ready = tokio::time::timeout(Duration::from_secs(1), s.ping()).await;
    assert!(matches!(ready, Err(_) | Ok(Err(_))), "{ready:?}");
}
