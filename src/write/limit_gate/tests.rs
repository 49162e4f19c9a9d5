use super::*;
use crate::control::limit::fixed::FixedLimit;
use crate::lock::lock;
use std::sync::Arc;

use crate::testing::ms;

/// `n` writes answered in `rtt`, just now.
fn lately(n: usize, rtt: Duration) -> Vec<(Duration, Duration)> {
    vec![(rtt, Duration::ZERO); n]
}

#[test]
fn cuts_only_far_over_the_limit_after_four_typical_round_trips() {
    let steady = [(ms(400), ms(0)), (ms(500), ms(0)), (ms(600), ms(0))];
    assert_eq!(cut_after(4, 2, &steady), None, "2× the limit is tolerated");
    assert_eq!(
        cut_after(5, 2, &steady),
        Some(ms(1600)),
        "4 × the lower quartile"
    );
    assert_eq!(
        cut_after(28, 2, &[]),
        None,
        "nothing answered yet to judge by"
    );
    assert_eq!(cut_after(3, 0, &steady), Some(ms(1600)), "limit at least 1");
    let overload = [
        (ms(50), ms(0)),
        (ms(50), ms(0)),
        (ms(3200), ms(0)),
        (ms(6400), ms(0)),
    ];
    assert_eq!(cut_after(32, 2, &overload), Some(Duration::from_secs(1)));
}

#[test]
fn a_fast_sink_is_given_a_second() {
    assert_eq!(
        cut_after(9, 4, &lately(10, ms(2))),
        Some(Duration::from_secs(1))
    );
}

#[test]
fn a_high_limit_is_judged_by_what_the_sink_answered_lately() {
    // Started at 32: six writes answered within the last second, the rest still out.
    // The limit has not fallen yet.
    let start = [
        (ms(50), ms(950)),
        (ms(50), ms(950)),
        (ms(100), ms(900)),
        (ms(200), ms(800)),
        (ms(400), ms(600)),
        (ms(800), ms(200)),
    ];
    assert_eq!(cut_after(26, 32, &start), Some(Duration::from_secs(1)));
    assert_eq!(cut_after(12, 32, &start), None, "within 2 × 6");
    // A sink answering plenty, as a busy one at its knee does: no cut.
    assert_eq!(cut_after(32, 32, &lately(64, ms(100))), None);
    // Answers older than the cut period no longer count.
    let old = vec![(ms(100), ms(1500)); 64];
    assert_eq!(cut_after(3, 32, &old), Some(Duration::from_secs(1)));
}

fn gate(limit: usize) -> Arc<LimitGate> {
    Arc::new(LimitGate::new(Box::new(FixedLimit(limit))))
}

/// One write answered in `rtt` with `inflight` in flight.
fn answered(gate: &LimitGate, rtt: Duration, inflight: usize) {
    gate.started();
    gate.finished(rtt, inflight, false);
}

#[tokio::test(start_paused = true)]
async fn a_write_far_over_the_limit_is_overdue_after_four_typical_rtts() {
    let gate = gate(2);
    answered(&gate, ms(500), 2);
    for _ in 0..5 {
        gate.started();
    }
    let began = Instant::now();
    gate.overdue(began).await;
    assert_eq!(began.elapsed(), ms(2000));
}

/// Another writer whose writes the sink answers every 100 ms, one at a time.
fn keep_answering(gate: &Arc<LimitGate>) -> tokio::task::JoinHandle<()> {
    let gate = gate.clone();
    tokio::spawn(async move {
        loop {
            let n = gate.started();
            tokio::time::sleep(ms(100)).await;
            gate.finished(ms(100), n, false);
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_write_within_twice_the_limit_runs_while_the_sink_answers() {
    let gate = gate(3);
    let answering = keep_answering(&gate);
    for _ in 0..5 {
        gate.started();
    }
    // 5 + the answering writer's 1 = 6 = 2 × 3.
    let began = Instant::now();
    let cut = tokio::time::timeout(Duration::from_secs(60), gate.overdue(began)).await;
    assert!(cut.is_err(), "not cut while 6 ≤ 2 × 3");
    answering.abort();
}

#[tokio::test(start_paused = true)]
async fn a_write_is_cut_once_more_start_than_twice_the_limit() {
    // Limit 3, six in flight: fine. Once one more starts (7 > 6) the old write, already
    // running 5 s, is overdue at once (4 × 100 ms is under the 1 s floor).
    let gate = gate(3);
    let answering = keep_answering(&gate);
    for _ in 0..5 {
        gate.started();
    }
    let began = Instant::now();
    let waiter = {
        let gate = gate.clone();
        tokio::spawn(async move { gate.overdue(began).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!waiter.is_finished());
    gate.started();
    waiter.await.unwrap();
    assert_eq!(began.elapsed(), Duration::from_secs(5));
    answering.abort();
}

#[tokio::test(start_paused = true)]
async fn a_sink_that_stops_answering_is_cut_down_to_two_in_flight() {
    let gate = gate(32);
    answered(&gate, ms(50), 1);
    for _ in 0..3 {
        gate.started();
    }
    let began = Instant::now();
    gate.overdue(began).await;
    assert_eq!(began.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn cuts_off_never_fire_and_resends_do_not_wait() {
    let gate = Arc::new(LimitGate::new(Box::new(FixedLimit(1))).with_cuts(false));
    answered(&gate, ms(50), 1);
    for _ in 0..10 {
        gate.started();
    }
    let cut = tokio::time::timeout(Duration::from_secs(60), gate.overdue(Instant::now())).await;
    assert!(cut.is_err());
    assert_eq!(gate.start_within_limit().await, 11);
}

#[tokio::test(start_paused = true)]
async fn a_resend_waits_for_a_place_under_the_limit() {
    let gate = gate(2);
    let a = gate.started();
    gate.started();
    let resend = {
        let gate = gate.clone();
        tokio::spawn(async move { gate.start_within_limit().await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!resend.is_finished(), "2 in flight, limit 2");
    gate.finished(ms(50), a, false);
    assert_eq!(resend.await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn resends_take_the_free_places_one_each() {
    let gate = gate(2);
    let a = gate.started();
    let b = gate.started();
    let resends: Vec<_> = (0..5)
        .map(|_| {
            let gate = gate.clone();
            tokio::spawn(async move { gate.start_within_limit().await })
        })
        .collect();
    tokio::time::sleep(ms(1)).await;
    gate.finished(ms(50), a, false);
    gate.finished(ms(50), b, false);
    tokio::time::sleep(ms(1)).await;
    let started = resends.iter().filter(|r| r.is_finished()).count();
    assert_eq!(started, 2, "two places freed, two resends went");
}

#[test]
fn a_write_unanswered_after_one_and_a_half_times_the_p90_is_stalled() {
    let now = Instant::now();
    let ago = |n: u64| now - ms(n);
    let mut rtts = vec![ms(100); 9];
    rtts.push(ms(400));
    let after = stall_after(&mut rtts);
    assert_eq!(
        after,
        Some(ms(150)),
        "1.5 × the p90 of ten, not their slowest"
    );
    assert_eq!(stall_after(&mut []), None, "nothing answered");
    let outstanding = VecDeque::from([(ago(900), 7), (ago(160), 6), (ago(140), 5), (ago(50), 3)]);
    assert_eq!(
        stalled(&outstanding, ms(150), now),
        Some(Stalled { level: 6, count: 2 })
    );
    assert_eq!(stalled(&outstanding, ms(1000), now), None);
}

#[test]
fn a_finished_write_is_found_by_its_count_nearest_to_when_it_began() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + ms(n);
    let writes = VecDeque::from([(at(10), 1), (at(20), 2), (at(30), 2), (at(40), 3)]);
    assert_eq!(nearest(&writes, at(31), Some(2)), Some(2));
    assert_eq!(nearest(&writes, at(24), Some(2)), Some(1));
    assert_eq!(nearest(&writes, at(12), Some(3)), Some(3), "however far");
    assert_eq!(nearest(&writes, at(36), None), Some(3));
    assert_eq!(nearest(&writes, at(0), None), Some(0));
    assert_eq!(nearest(&writes, at(20), Some(9)), None);
    assert_eq!(nearest(&VecDeque::new(), at(20), None), None);
}

/// What the gate told a limit last.
struct Told(Arc<Mutex<Option<Stalled>>>);

impl ConcurrencyLimit for Told {
    fn limit(&self) -> usize {
        10
    }
    fn on_sample(&mut self, _: Sample) {}
    fn stalled(&mut self, stalled: Option<Stalled>) {
        *self.0.lock().unwrap() = stalled;
    }
}

#[tokio::test(start_paused = true)]
async fn the_limit_is_told_of_a_write_stalled_while_others_are_answered() {
    let told = Arc::new(Mutex::new(None));
    let gate = LimitGate::new(Box::new(Told(told.clone())));
    let answer = |gate: &LimitGate| {
        let n = gate.started();
        gate.finished(ms(100), n, false);
    };
    // Answered writes of 100 ms, and one started with 6 in flight that is not.
    for _ in 0..4 {
        answered(&gate, ms(100), 1);
    }
    for _ in 0..5 {
        gate.started();
    }
    let hung = gate.started();
    assert_eq!(hung, 6);
    tokio::time::advance(ms(150)).await;
    answer(&gate);
    assert_eq!(*told.lock().unwrap(), None, "150 ms: not yet");
    tokio::time::advance(ms(1)).await;
    answer(&gate);
    assert_eq!(
        *told.lock().unwrap(),
        Some(Stalled { level: 1, count: 6 }),
        "all six started 151 ms ago"
    );
    // Its end (a timeout) removes it, and only it.
    tokio::time::advance(ms(849)).await;
    gate.finished(Duration::from_secs(1), hung, true);
    assert_eq!(*told.lock().unwrap(), Some(Stalled { level: 1, count: 5 }));
    for n in 1..=5 {
        gate.finished(Duration::from_secs(1), n, false);
    }
    answer(&gate);
    assert_eq!(*told.lock().unwrap(), None);
}

/// An adaptive limit: AIMD, which cuts at once on a push-back.
fn adaptive() -> LimitGate {
    use crate::control::limit::aimd::{AimdLimit, AimdParams};
    LimitGate::new(Box::new(AimdLimit::new(AimdParams {
        initial: 5,
        max: 64,
        target: ms(115),
        ..AimdParams::default()
    })))
}

#[tokio::test(start_paused = true)]
async fn a_push_back_above_every_level_taken_lately_is_explained_by_the_writes_in_flight() {
    let gate = adaptive();
    assert!(!gate.explains(6), "nothing taken yet to judge by");
    for inflight in 1..=5 {
        answered(&gate, ms(100), inflight);
    }
    assert!(gate.explains(6), "taken up to 5, pushed back at 6");
    assert!(
        !Arc::new(gate_fixed()).explains(6),
        "a fixed limit does not answer push-backs"
    );
}

fn gate_fixed() -> LimitGate {
    let gate = LimitGate::new(Box::new(FixedLimit(10)));
    for inflight in 1..=5 {
        answered(&gate, ms(100), inflight);
    }
    gate
}

/// A sink limiting its rate pushes back at levels it takes, too: from then on, for
/// 30 s, no push-back is explained by the writes in flight (the worker pauses).
#[tokio::test(start_paused = true)]
async fn a_push_back_at_a_level_the_sink_takes_is_a_rate_limit_for_a_while() {
    let gate = adaptive();
    for inflight in 1..=5 {
        answered(&gate, ms(100), inflight);
    }
    assert!(!gate.explains(4), "4 was taken lately");
    assert!(!gate.explains(6), "a rate limit, for now");
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(!gate.explains(6));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(gate.explains(6), "30 s later");
}

#[tokio::test(start_paused = true)]
async fn a_fixed_limit_keeps_no_record_of_the_writes_in_flight() {
    let gate = gate_fixed();
    for _ in 0..3 {
        gate.started();
    }
    assert!(lock(&gate.outstanding).writes.is_empty());
    let gate = adaptive();
    for _ in 0..3 {
        gate.started();
    }
    assert_eq!(lock(&gate.outstanding).writes.len(), 3);
}
