//! The figures of a run, from the emulator's ledger (what the sink saw, judged with
//! `sluice::sim_sink::measure`, as the integration tests judge theirs) and the client's
//! latency, and the markdown tables they are printed as.

use std::fmt::Write;
use std::time::Duration;

use sluice::sim_sink::BucketUnit;
use sluice::sim_sink::measure::{Tolerance, on_target, sigma, target, time_to_full};

use crate::scenario::{OutageSpan, Run};

/// A second at this share of the capacity counts as full goodput.
const FULL_GOODPUT: f64 = 0.9;

/// Records per window a sink taking the told record rate takes when fed evenly.
pub fn records_target(run: &Run) -> f64 {
    target(run.limit.records_per_second)
}

/// From the outage's end to the end of the first second, starting at or after it, in
/// which the sink took at least 90% of its capacity (in its own unit). None if that never
/// came before the backlog ran out.
pub fn time_to_full_goodput(run: &Run, outage: OutageSpan) -> Option<Duration> {
    let counts = run.sink.counts(run.limit.unit);
    time_to_full(&counts, outage.end, run.limit.capacity * FULL_GOODPUT)
}

/// From the first window the sink took anything in to the end of the first second in
/// which it took 90% of its capacity (in its own unit): what meeting the sink cost.
pub fn time_to_full_goodput_at_start(run: &Run) -> Option<Duration> {
    let counts = run.sink.counts(run.limit.unit);
    let first = counts.iter().position(|&c| c > 0)?;
    time_to_full(
        &counts[first..],
        Duration::ZERO,
        run.limit.capacity * FULL_GOODPUT,
    )
}

/// Windows after the first second: the share of the steady drain at its target once the
/// worker has met the sink.
const MET_AFTER: usize = 5;

fn per_delivered(n: u64, run: &Run) -> f64 {
    n as f64 / run.sink.inserted.max(1) as f64
}

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.0}"))
}

/// A run stopped at its time limit is marked in its elapsed time.
fn elapsed(run: &Run) -> String {
    let s = run.elapsed.as_secs_f64();
    if run.finished {
        format!("{s:.1}")
    } else {
        format!("{s:.0} (stopped, {} landed)", run.sink.inserted)
    }
}

/// The steady drain: one row per strategy. Goodput is counted in the sink's unit; the
/// windows in records against the record rate sluice was told.
pub fn drain_table(runs: &[Run]) -> String {
    let mut t = String::from(
        "| strategy | requests / delivered | records sent / delivered | goodput / capacity \
         | delivered rec/s | throttled requests | write p50 / p95 ms | window σ \
         | windows within ±1 / ±10% of target | ±10% after 1 s | 90% of capacity at s \
         | elapsed s | peak RSS MiB |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let seconds = run.elapsed.as_secs_f64();
        let unit = run.limit.unit;
        let goodput = run.sink.accepted_in(unit) as f64 / seconds / run.limit.capacity;
        let windows = run.sink.steady(BucketUnit::Records);
        let goal = records_target(run);
        let met = windows.get(MET_AFTER..).unwrap_or_default();
        let full = time_to_full_goodput_at_start(run)
            .map_or("never".into(), |d| format!("{:.1}", d.as_secs_f64()));
        writeln!(
            t,
            "| {} | {:.3} | {:.2} | {:.2} | {:.0} | {:.1}% | {} / {} | {:.1} | {:.0}% / {:.0}% | {:.0}% | {} | {} | {:.1} |",
            run.strategy.label(),
            per_delivered(run.sink.requests, run),
            run.sink.sent_per_delivered(),
            goodput,
            run.sink.inserted as f64 / seconds,
            run.sink.throttled_share() * 100.0,
            ms(run.write_p50_ms),
            ms(run.write_p95_ms),
            sigma(&windows),
            on_target(&windows, goal, Tolerance::Units(1.0)) * 100.0,
            on_target(&windows, goal, Tolerance::Share(0.1)) * 100.0,
            on_target(met, goal, Tolerance::Share(0.1)) * 100.0,
            full,
            elapsed(run),
            run.peak_rss_kib as f64 / 1024.0,
        )
        .unwrap();
    }
    t
}

/// The outage: requests while the sink was down, and how soon it was fed fully again.
pub fn outage_table(runs: &[Run]) -> String {
    let mut t = String::from(
        "| strategy | requests during the outage | time to full goodput after it | \
         requests / delivered | elapsed s |\n|---|---:|---:|---:|---:|\n",
    );
    for run in runs {
        let recovery = match run.outage {
            Some(outage) => time_to_full_goodput(run, outage)
                .map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64())),
            None => "no outage: too slow to get there".into(),
        };
        writeln!(
            t,
            "| {} | {} | {} | {:.3} | {} |",
            run.strategy.label(),
            run.sink.unavailable,
            recovery,
            per_delivered(run.sink.requests, run),
            elapsed(run),
        )
        .unwrap();
    }
    t
}
