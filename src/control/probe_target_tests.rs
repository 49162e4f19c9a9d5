use super::*;
use crate::control::health::{ProbeGate, ProbeLimits, ProbeState, Reading, Why};

fn s(n: f64) -> Duration {
    Duration::from_secs_f64(n)
}

/// Readings every 200 ms with the worker writing at the allowed rate.
struct Run {
    steer: ProbeTarget,
    now: f64,
    written: f64,
}

impl Run {
    /// The first reading, at 0 (nothing to pace from yet).
    fn new(target: f64) -> Run {
        Run::with_floor(target, 0.0)
    }

    /// … of a probe that reads `floor` with nothing written (a canary's baseline).
    fn with_floor(target: f64, floor: f64) -> Run {
        let mut steer = ProbeTarget::new(target, TargetParams::default());
        steer.set_floor(floor);
        steer.observe(Duration::ZERO, floor, 0);
        Run {
            steer,
            now: 0.0,
            written: 0.0,
        }
    }

    /// One reading of `value`; the worker wrote `share` of the rate since the last.
    fn read(&mut self, value: f64, share: f64) -> f64 {
        self.now += 0.2;
        self.written += self.steer.rate() * 0.2 * share;
        self.steer
            .observe(s(self.now), value, self.written.round() as u64);
        self.steer.rate()
    }

    /// `n` readings of `value`, the worker writing `share` of the rate; the rate after.
    fn read_n(&mut self, n: usize, value: f64, share: f64) -> f64 {
        for _ in 0..n {
            self.read(value, share);
        }
        self.steer.rate()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b
}

#[test]
fn under_the_setpoint_it_grows_faster_the_further_below_paced_per_memory() {
    let mut far = Run::new(2.0);
    let mut near = Run::new(2.0);
    // Ten readings 200 ms apart: one memory (2 s): ×2 at a value of 0, 1 + (1 − 1.5 / 1.6)
    // at 1.5.
    for _ in 0..10 {
        far.read(0.0, 1.0);
        near.read(1.5, 1.0);
    }
    assert!(close(far.steer.rate(), 2000.0), "{}", far.steer.rate());
    assert!(close(near.steer.rate(), 1062.5), "{}", near.steer.rate());
    // The same growth however often the probe reads: 4 readings 500 ms apart.
    let mut sparse = ProbeTarget::new(2.0, TargetParams::default());
    for i in 0u32..=4 {
        sparse.observe(s(0.5 * f64::from(i)), 0.0, 500 * u64::from(i) * 2);
    }
    assert!(close(sparse.rate(), 2000.0), "{}", sparse.rate());
    // In the dead band between the setpoint and the target nothing moves.
    let before = far.steer.rate();
    far.read_n(20, 1.8, 1.0);
    assert_eq!(far.steer.rate(), before);
}

/// A canary cannot read under its baseline: room is measured down to it, so a canary at
/// its baseline doubles the rate per memory as a value of 0 does without a floor.
#[test]
fn room_is_measured_down_to_the_floor() {
    // "2x" of a baseline of 1: target 2, setpoint 1.6.
    let mut at_baseline = Run::with_floor(2.0, 1.0);
    let mut halfway = Run::with_floor(2.0, 1.0);
    let mut from_zero = Run::new(2.0);
    for _ in 0..10 {
        at_baseline.read(1.0, 1.0);
        halfway.read(1.3, 1.0);
        from_zero.read(1.0, 1.0);
    }
    assert!(
        close(at_baseline.steer.rate(), 2000.0),
        "{}",
        at_baseline.steer.rate()
    );
    assert!(
        close(halfway.steer.rate(), 1500.0),
        "{}",
        halfway.steer.rate()
    );
    assert!(
        close(from_zero.steer.rate(), 1375.0),
        "{}",
        from_zero.steer.rate()
    );
    // Over the setpoint the floor changes nothing; a floor close under the setpoint (an
    // absolute target near the baseline) is not one: room from 0.
    assert_eq!(at_baseline.read_n(10, 1.8, 1.0), at_baseline.steer.rate());
    let mut near = Run::with_floor(2.0, 1.5);
    near.read_n(10, 1.0, 1.0);
    assert!(close(near.steer.rate(), 1375.0), "{}", near.steer.rate());
}

/// `target = 0` (a replica kept without lag): a reading of 0 is within it, and far under
/// nothing, so the rate grows as fast as it can; anything above it is cut.
#[test]
fn a_target_of_zero_grows_at_zero_and_cuts_above_it() {
    let mut run = Run::new(0.0);
    assert!(
        close(run.read_n(10, 0.0, 1.0), 2000.0),
        "{}",
        run.steer.rate()
    );
    assert!(run.read(0.5, 1.0) < 2000.0);
}

/// Near the rate last cut from, +10% per memory; past 1.2 × it without a new cut, by room
/// again: a cut for one noisy reading does not slow the climb for good.
#[test]
fn near_the_rate_it_was_last_cut_from_it_grows_slowly_and_past_it_by_room_again() {
    let mut run = Run::new(2.0);
    run.read_n(20, 0.0, 1.0);
    // Cut from 4,000 (far over: half off), then the value falls far under the target.
    let peak = run.steer.rate();
    assert!(close(peak, 4000.0), "{peak}");
    assert!(close(run.read(4.0, 1.0), 2000.0));
    run.read_n(9, 0.0, 1.0);
    // Up to 0.9 × the peak at the full pace (×2 per memory: 0.85 of one, 9 readings), then
    // +10% per memory.
    let mut readings = 0;
    while run.steer.rate() < 0.9 * peak {
        run.read(0.0, 1.0);
        readings += 1;
    }
    assert!(
        (9..=10).contains(&readings),
        "{readings} readings from the cut back to 0.9 × the peak"
    );
    let near = run.steer.rate();
    run.read_n(10, 0.0, 1.0);
    assert!(
        close(run.steer.rate(), near * 1.1),
        "{near} → {}",
        run.steer.rate()
    );
    // Until past 1.2 × the peak: 4 memories from 0.9 × it (1.1⁴ × 0.9 ≈ 1.32), give or take
    // the reading that crossed 0.9.
    let mut memories = 1;
    while run.steer.rate() <= 1.2 * peak {
        run.read_n(10, 0.0, 1.0);
        memories += 1;
    }
    assert!(
        (3..=4).contains(&memories),
        "{memories} memories past 0.9 × the peak"
    );
    // Then ×2 per memory, as before the cut (the reading that forgot the peak grew by room
    // already).
    let past = run.steer.rate();
    let doubled = run.read_n(10, 0.0, 1.0);
    assert!(close(doubled, past * 2.0), "{past} → {doubled}");
}

#[test]
fn a_step_over_the_target_cuts_in_proportion_once_per_memory() {
    let mut run = Run::new(2.0);
    run.read_n(10, 1.0, 1.0);
    let before = run.steer.rate();
    // 20% over: a tenth off.
    let after = run.read(2.4, 1.0);
    assert!((after - before * 0.9).abs() < 1e-6, "{before} → {after}");
    // The same excess again within one memory: the window still holds the old readings.
    for _ in 0..9 {
        assert_eq!(run.read(2.4, 1.0), after);
    }
    // Higher than what was cut for: cut again, at once.
    let again = run.read(3.0, 1.0);
    assert!((again - after * 0.75).abs() < 1e-6, "{after} → {again}");
    // Far over: at most half off per cut, at once however recent the last.
    run.read(3.0, 1.0);
    let halved = run.read(10.0, 1.0);
    assert!((halved - again * 0.5).abs() < 1e-6);
    // Back under: no growth while settling (one memory, 2 s), growth after.
    assert_eq!(run.read(0.0, 1.0), halved);
    for _ in 0..8 {
        assert_eq!(run.read(0.0, 1.0), halved);
    }
    assert!(run.read(0.0, 1.0) > halved);
}

#[test]
fn it_does_not_wind_up_while_the_rate_does_not_bind() {
    let mut run = Run::new(2.0);
    run.read_n(10, 0.0, 1.0);
    // The sink (or the source) gives only a third of the rate: once the last second
    // shows it, no growth however low the value.
    run.read_n(6, 0.0, 0.3);
    let bound = run.steer.rate();
    for _ in 0..50 {
        assert_eq!(run.read(0.0, 0.3), bound);
    }
    // A cut then starts from what was written (× headroom), not the idle allowance.
    let cut = run.read(2.4, 0.3);
    assert!(cut < bound * 0.3 * 1.5, "{bound} → {cut}");
    // Nothing written at all (held): a cut starts from the rate itself.
    let mut held = Run::new(2.0);
    held.read(2.4, 0.0);
    assert!((held.steer.rate() - 900.0).abs() < 1e-6);
    // And the rate never falls under `least`.
    held.read_n(200, 100.0, 0.0);
    assert_eq!(held.steer.rate(), TargetParams::default().least);
}

#[test]
fn a_probe_that_stops_answering_holds_and_the_rate_resumes_where_it_was() {
    // A target-only probe: no `max` of its own, but a failure or silence still holds.
    let mut gate = ProbeGate::new(ProbeLimits {
        max: f64::INFINITY,
        resume_ratio: 0.8,
        critical: None,
        stale_after: s(1.4),
    });
    let mut run = Run::new(2.0);
    for _ in 0..5 {
        run.read(1.0, 1.0);
        gate.observe(s(run.now), Reading::Value(1.0));
    }
    assert_eq!(gate.state(s(run.now)), ProbeState::Clear);
    let rate = run.steer.rate();
    gate.observe(s(run.now + 0.2), Reading::Failed("timeout".into()));
    assert_eq!(
        gate.state(s(run.now + 0.2)),
        ProbeState::Held(Why::Failed("timeout".into()))
    );
    // Silence: stale after 1.4 s.
    gate.observe(s(run.now + 0.4), Reading::Value(1.0));
    assert_eq!(gate.state(s(run.now + 1.8)), ProbeState::Clear);
    assert!(matches!(
        gate.state(s(run.now + 1.9)),
        ProbeState::Held(Why::Stale(_))
    ));
    // No reading, no change: the worker resumes at the rate it had.
    assert_eq!(run.steer.rate(), rate);
}

/// A database whose latency is `1 × (1 + (rate / capacity)²)` ±10% (deterministic
/// noise), read as a canary reads it: the 90th percentile of the last 2 s of runs, one
/// run every 200 ms; target 2: the value meets the target at the capacity.
fn noisy_plant(seed: u64, floor: f64) -> (Vec<f64>, usize, usize) {
    const CAPACITY: f64 = 20_000.0;
    let mut rng = seed;
    let mut noise = || {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((rng >> 11) as f64 / (1u64 << 53) as f64) * 0.2 - 0.1
    };
    let mut run = Run::with_floor(2.0, floor);
    let (mut rates, mut over, mut readings) = (Vec::new(), 0, 0);
    let mut window = VecDeque::new();
    for i in 0..1000 {
        let rate = run.steer.rate();
        window.push_back((1.0 + (rate / CAPACITY).powi(2)) * (1.0 + noise()));
        if window.len() > 10 {
            window.pop_front();
        }
        let mut sorted: Vec<f64> = window.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let value = sorted[(sorted.len() * 9).div_ceil(10) - 1];
        run.read(value, 1.0);
        // Settled: after the first 30 s.
        if i >= 150 {
            rates.push(run.steer.rate() / CAPACITY);
            readings += 1;
            over += usize::from(value > 2.0);
        }
    }
    (rates, over, readings)
}

#[test]
fn a_noisy_probe_does_not_oscillate_beyond_the_stated_bound() {
    // Without a floor, and with the plant's own (1 at rate 0) as a canary's baseline.
    for (seed, floor) in [1, 7, 42, 1234]
        .into_iter()
        .flat_map(|s| [(s, 0.0), (s, 1.0)])
    {
        let (rates, over, readings) = noisy_plant(seed, floor);
        let (low, high) = rates
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
        assert!(
            low >= 0.6 && high <= 1.25,
            "seed {seed}, floor {floor}: rate {low:.2}..{high:.2} of capacity"
        );
        assert!(
            over * 10 < readings,
            "seed {seed}, floor {floor}: {over} of {readings} readings over the target"
        );
    }
}

/// Documented limit: a relative target is relative to the baseline as measured. Measured
/// while the database was already busy (say at 3× its idle latency), "2x" lets the value
/// climb to 6× idle before anything is cut: the controller holds the baseline it was
/// given, it cannot know the idle one. An absolute target ("20ms") avoids this.
#[test]
fn a_baseline_measured_while_busy_raises_the_target_with_it() {
    let idle = 1.0;
    let busy_baseline = 3.0 * idle;
    let mut run = Run::new(2.0 * busy_baseline);
    run.read_n(10, 4.0 * idle, 1.0);
    let rate = run.steer.rate();
    assert!(
        rate > 1000.0,
        "4× idle is under the setpoint of 2 × a busy baseline"
    );
    assert_eq!(run.read(5.9 * idle, 1.0), rate, "still within the target");
    assert!(
        run.read(6.5 * idle, 1.0) < rate,
        "only past 2 × the busy baseline"
    );
}

/// A value over the target whatever the rate (a baseline read in a quiet spell): the rate
/// falls to `least`, and five memories later the steering says it is stuck; a value
/// under the target at any point starts the count again.
#[test]
fn over_the_target_at_the_least_rate_is_stuck_after_five_memories() {
    let least = TargetParams::default().least;
    let mut run = Run::new(1.0);
    let mut at_least = None;
    let mut stuck = None;
    for i in 1..=200 {
        run.read(2.0, 1.0);
        if at_least.is_none() && run.steer.rate() <= least {
            at_least = Some(run.now);
        }
        if stuck.is_none() && run.steer.stuck(s(run.now)) {
            stuck = Some(run.now);
        }
        assert!(i < 200 || stuck.is_some(), "never stuck");
    }
    let (at_least, stuck) = (at_least.unwrap(), stuck.unwrap());
    // Five memories of 2 s from the reading that reached the least rate.
    assert!(
        (10.0 - 1e-6..10.2 + 1e-6).contains(&(stuck - at_least)),
        "least at {at_least} s, stuck at {stuck} s"
    );
    // One reading under the target: the count starts again.
    run.read(0.9, 1.0);
    assert!(!run.steer.stuck(s(run.now)));
    run.read_n(50, 2.0, 1.0);
    assert!(!run.steer.stuck(s(run.now)), "9.8 s over: not yet");
    run.read_n(2, 2.0, 1.0);
    assert!(run.steer.stuck(s(run.now)));
    // Over the target but above the least rate is no sign of it: the cuts still work.
    let mut cutting = Run::new(1.0);
    cutting.read_n(20, 1.2, 1.0);
    assert!(cutting.steer.rate() > least);
    assert!(!cutting.steer.stuck(s(cutting.now)));
}
