use super::*;
use crate::config::Backoffs;

const TICK: Duration = Duration::from_millis(200);

fn pressure() -> Backpressure {
    let rate = RateSettings {
        records_per_second: 1000.0.into(),
        tick: TICK,
    };
    Backpressure::new(
        &ThrottleSettings::default(),
        &RetrySettings::default(),
        &rate,
        Backoffs::new(&RetrySettings::default(), &ThrottleSettings::default()).outage,
        Arc::new(Stats::default()),
    )
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_pauses_every_write_of_the_worker() {
    let p = pressure();
    assert_eq!(p.clear_to_send().await, Duration::ZERO);
    tokio::time::advance(Duration::from_millis(500)).await;
    p.written(200, 20_000, Duration::ZERO);
    p.throttled(Refused {
        sent_at: p.now(),
        retry_after: Some(Duration::from_secs(2)),
        hint: None,
        emptied: false,
        records: 100,
        bytes: 10_000,
    });
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
    // 200 records in the first 0.5 s: the sink took 400 rec/s, a first push-back
    // learns 70% of that (it may hold a spent burst), held at 97%.
    let plan = p.plan(TICK, 1000, None);
    assert!((plan.records_per_second - 271.6).abs() < 1e-6, "{plan:?}");
    assert_eq!(plan.batch, 55);
    assert_eq!(p.stats.rate_cuts.load(Relaxed), 1);
    assert_eq!(p.stats.pauses.load(Relaxed), 1);
    assert_eq!(p.stats.last_retry_after_ms.load(Relaxed), 2000);
    assert!((p.stats.rate_multiplier.get() - 0.2716).abs() < 1e-6);
    assert!((p.stats.sink_limit(Unit::Records).get() - 280.0).abs() < 1e-9);
    assert!((p.stats.sink_limit(Unit::Bytes).get() - 28_000.0).abs() < 1e-6);
}

#[tokio::test(start_paused = true)]
async fn a_named_request_limit_makes_batches_larger_at_the_same_rate() {
    let p = pressure();
    for _ in 0..10 {
        tokio::time::advance(Duration::from_millis(100)).await;
        p.written(100, 10_000, Duration::ZERO);
    }
    p.throttled(Refused {
        sent_at: p.now(),
        retry_after: Some(Duration::ZERO),
        hint: Some(Unit::Requests),
        emptied: false,
        records: 100,
        bytes: 10_000,
    });
    // Ten requests in a second, 70% of that learned (a first push-back): 6.79
    // requests/s held, 1,000 rec/s in batches of 148 rather than one of 20 every 20 ms,
    // once the wait for a push-back that can close a sample (100 ms) is over.
    tokio::time::advance(Duration::from_millis(100)).await;
    let fine = Duration::from_millis(20);
    let plan = p.plan(fine, 1000, None);
    assert_eq!(plan.records_per_second, 1000.0);
    assert_eq!(plan.batch, 148);
    assert_eq!(
        p.stats.sink_limit_binding.load(Relaxed),
        Unit::Requests as u64 + 1
    );
    // A byte cap on requests bounds the batch, and with it the rate.
    let plan = p.plan(fine, 1000, Some(5_000));
    assert_eq!(plan.batch, 50);
    assert!((plan.records_per_second - 339.5).abs() < 1e-6, "{plan:?}");
}

/// Three writes came back with 200 records each refused for room at once: they go
/// again one after another at the planned rate, not on the retry budget, and
/// the cadence is owed them.
#[tokio::test(start_paused = true)]
async fn items_refused_for_room_go_again_in_turn_at_the_planned_rate() {
    let p = Arc::new(pressure());
    // At first contact, an eighth of the 1,000 rec/s.
    let planned = p.plan(TICK, 1000, None).records_per_second;
    assert_eq!(planned, 125.0);
    let started = Instant::now();
    let turns = (0..3).map(|_| {
        let p = p.clone();
        tokio::spawn(async move {
            p.resend_turn(200).await;
            started.elapsed()
        })
    });
    let mut waited = Vec::new();
    for turn in turns {
        waited.push(turn.await.unwrap());
    }
    waited.sort();
    let ms = Duration::from_millis;
    assert_eq!(waited, [ms(0), ms(1600), ms(3200)]);
    assert_eq!(p.settle_owed(1000), 600);
    // More than the budget's floor (10 over 10 s) could have paid for.
    for _ in 0..20 {
        p.resend_turn(1).await;
    }
    // The third turn's span ends at 4.8 s; the budget would have held them 10 s more.
    assert!(started.elapsed() < Duration::from_secs(6));
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
async fn an_outage_is_retried_within_the_longest_pause() {
    let throttle = ThrottleSettings {
        max_pause: Duration::from_secs(2),
        ..ThrottleSettings::default()
    };
    let p = Backpressure::new(
        &throttle,
        &RetrySettings::default(),
        &RateSettings::default(),
        Backoffs::new(&RetrySettings::default(), &throttle).outage,
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
