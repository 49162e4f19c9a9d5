//! The figures of a run, from the emulator's ledger (what the sink saw) and the client's
//! latency, and the markdown tables they are printed as.

use std::fmt::Write;
use std::time::Duration;

use crate::scenario::{OutageSpan, Run};

/// The emulator's accounting window (`sluice sim-sink` counts per 200 ms).
pub const WINDOW: Duration = Duration::from_millis(200);

/// A second at this share of the capacity counts as full goodput.
const FULL_GOODPUT: f64 = 0.9;

/// Records per window a sink at `capacity` records per second takes when fed evenly.
pub fn target(capacity: f64) -> f64 {
    capacity * WINDOW.as_secs_f64()
}

/// Records accepted per window, from the first window that took any to the last one
/// before the final window (which holds only the backlog's remainder).
pub fn steady_windows(run: &Run) -> Vec<u64> {
    let counts: Vec<u64> = run.sink.windows.iter().map(|w| w.accepted).collect();
    let Some(first) = counts.iter().position(|&c| c > 0) else {
        return Vec::new();
    };
    let last = counts.iter().rposition(|&c| c > 0).unwrap();
    counts[first..last].to_vec()
}

/// Population standard deviation, and the share of windows within ±1 of `target`.
pub fn evenness(windows: &[u64], target: f64) -> (f64, f64) {
    if windows.is_empty() {
        return (0.0, 0.0);
    }
    let n = windows.len() as f64;
    let mean = windows.iter().sum::<u64>() as f64 / n;
    let variance = windows
        .iter()
        .map(|&c| (c as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let near = windows
        .iter()
        .filter(|&&c| (c as f64 - target).abs() <= 1.0)
        .count();
    (variance.sqrt(), near as f64 / n)
}

/// From the outage's end to the end of the first second, starting at or after it, in
/// which the sink took at least 90% of its capacity: sustained goodput, not one window's
/// burst of retries. None if that never came before the backlog ran out.
pub fn time_to_full_goodput(run: &Run, outage: OutageSpan, capacity: f64) -> Option<Duration> {
    let first = outage.end.as_nanos().div_ceil(WINDOW.as_nanos()) as usize;
    let counts: Vec<u64> = run.sink.windows.iter().map(|w| w.accepted).collect();
    let end = full_second_ends(&counts, first, capacity * FULL_GOODPUT)?;
    Some(WINDOW * end as u32 - outage.end)
}

/// The window index just past the first second (from window `first` on) whose counts
/// sum to at least `full`.
fn full_second_ends(counts: &[u64], first: usize, full: f64) -> Option<usize> {
    let span = (Duration::from_secs(1).as_nanos() / WINDOW.as_nanos()) as usize;
    (first..=counts.len().saturating_sub(span))
        .find(|&i| counts[i..i + span].iter().sum::<u64>() as f64 >= full)
        .map(|i| i + span)
}

fn per_delivered(n: u64, run: &Run) -> f64 {
    n as f64 / run.sink.inserted.max(1) as f64
}

fn throttled_share(run: &Run) -> f64 {
    run.sink.rejected as f64 / run.sink.requests.max(1) as f64
}

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.0}"))
}

/// The steady drain: one row per strategy.
pub fn drain_table(runs: &[Run], capacity: f64) -> String {
    let mut t = String::from(
        "| strategy | requests / delivered | records sent / delivered | goodput / capacity \
         | throttled requests | write p50 / p95 ms | window σ | windows within ±1 of target \
         | elapsed s | peak RSS MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let goodput = run.sink.inserted as f64 / run.elapsed.as_secs_f64() / capacity;
        let (sigma, near) = evenness(&steady_windows(run), target(capacity));
        writeln!(
            t,
            "| {} | {:.3} | {:.2} | {:.2} | {:.1}% | {} / {} | {:.1} | {:.0}% | {:.1} | {:.1} |",
            run.strategy.label(),
            per_delivered(run.sink.requests, run),
            per_delivered(run.sink.records_received, run),
            goodput,
            throttled_share(run) * 100.0,
            ms(run.write_p50_ms),
            ms(run.write_p95_ms),
            sigma,
            near * 100.0,
            run.elapsed.as_secs_f64(),
            run.peak_rss_kib as f64 / 1024.0,
        )
        .unwrap();
    }
    t
}

/// The outage: requests while the sink was down, and how soon it was fed fully again.
pub fn outage_table(runs: &[Run], capacity: f64) -> String {
    let mut t = String::from(
        "| strategy | requests during the outage | time to full goodput after it | \
         requests / delivered | elapsed s |\n|---|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let outage = run.outage.expect("an outage run");
        let recovery = time_to_full_goodput(run, outage, capacity)
            .map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64()));
        writeln!(
            t,
            "| {} | {} | {} | {:.3} | {:.1} |",
            run.strategy.label(),
            run.sink.unavailable,
            recovery,
            per_delivered(run.sink.requests, run),
            run.elapsed.as_secs_f64(),
        )
        .unwrap();
    }
    t
}

/// The figures' arithmetic on known inputs; the smoke run calls it, as this bench has no
/// test harness of its own.
pub fn self_check() {
    assert_eq!(evenness(&[160, 160, 160], 160.0), (0.0, 1.0));
    let (sigma, near) = evenness(&[320, 0, 161, 159], 160.0);
    assert!((sigma - 113.137).abs() < 0.01, "{sigma}");
    assert_eq!(near, 0.5);
    // A lone burst of retries is not recovery; five windows at 150 of 160 are.
    let after = [0, 0, 400, 0, 0, 0, 0, 100, 150, 150, 150, 150, 150, 10];
    assert_eq!(full_second_ends(&after, 1, 720.0), Some(13));
    assert_eq!(full_second_ends(&after, 3, 720.0), Some(13));
    assert_eq!(full_second_ends(&after[..12], 1, 720.0), None);
}
