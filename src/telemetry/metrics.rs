//! Prometheus metrics. Counters that the run already keeps in `Stats` are published from
//! there at scrape time (so `/metrics` and the summary can never disagree); latencies and
//! per-outcome request counts are recorded where they happen.

use std::sync::OnceLock;
use std::sync::atomic::Ordering::Relaxed;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::control::sink_limit::Unit as SinkUnit;
use crate::stats::Stats;

pub const WRITE_SECONDS: &str = "sluice_sink_write_duration_seconds";
pub const REQUESTS: &str = "sluice_sink_requests_total";
pub use crate::sink::balanced::metric_names::{
    APERTURE_SIZE, ENDPOINT_LATENCY, ENDPOINT_REQUESTS, ENDPOINT_UP,
};
pub use crate::source::file::LOST_BYTES as SOURCE_LOST_BYTES;
pub use crate::stats::ITEMS;

/// The process-wide recorder; installed once, on first use.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(WRITE_SECONDS.into()),
                &[
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
                ],
            )
            .expect("static buckets are valid")
            .install_recorder()
            .expect("one recorder per process");
        describe();
        handle
    })
}

fn describe() {
    describe_counter!(
        "sluice_records_pulled_total",
        "Records pulled from the source."
    );
    describe_counter!(
        "sluice_records_written_total",
        "Rows newly inserted into the sink."
    );
    describe_counter!(
        "sluice_records_dead_lettered_total",
        "Records stored as dead letters."
    );
    describe_counter!(
        "sluice_records_duplicates_total",
        "Records whose key was already in the sink."
    );
    describe_counter!(
        "sluice_records_deleted_total",
        "Upsert mode: keys deleted (a tombstone version stored)."
    );
    describe_counter!(
        "sluice_records_stale_total",
        "Upsert mode: records the version guard refused, their key held a version at least as new."
    );
    describe_counter!(
        "sluice_records_superseded_total",
        "Upsert mode: records left out for a newer version of their key in the same batch."
    );
    describe_counter!(
        "sluice_records_skipped_by_sink_total",
        "Records the sink's own code chose not to store (a PostgreSQL trigger returning NULL, a rule)."
    );
    describe_counter!(
        ITEMS,
        "Records the sink answered for, by outcome: written, duplicate, skipped_by_sink, deleted, stale, superseded (upsert), throttled (refused for now, sent again), failed (retried), rejected (dead-lettered)."
    );
    describe_counter!(
        "sluice_throttle_events_total",
        "Writes the sink answered with slow down."
    );
    describe_counter!(
        "sluice_retries_total",
        "Writes repeated after a failure or a throttle."
    );
    describe_counter!(REQUESTS, "Sink writes by outcome.");
    describe_counter!(
        SOURCE_LOST_BYTES,
        "Bytes written to a followed file and never read: it was truncated before they were, and no copy of them was found."
    );
    describe_histogram!(WRITE_SECONDS, metrics::Unit::Seconds, "Sink write latency.");
    describe_counter!(ENDPOINT_REQUESTS, "Requests per sink endpoint, by outcome.");
    describe_gauge!(
        ENDPOINT_LATENCY,
        "Peak-EWMA latency estimate per sink endpoint."
    );
    describe_gauge!(ENDPOINT_UP, "1 while a sink endpoint is not marked down.");
    describe_gauge!(
        APERTURE_SIZE,
        "Sink endpoints in this worker's aperture (strategy = \"aperture\")."
    );
    describe_gauge!(
        "sluice_rate_limit_records_per_second",
        "The cadence's current rate."
    );
    describe_gauge!(
        "sluice_sink_limit",
        "What the sink takes per second as learned from its push-back, per unit (records, requests, bytes)."
    );
    describe_gauge!(
        "sluice_sink_limit_binding",
        "1 for the unit whose learned limit bounds the rate now."
    );
    describe_gauge!(
        "sluice_batch_records",
        "Records per request in the current plan."
    );
    describe_gauge!("sluice_concurrency_limit", "Batches allowed in flight.");
    describe_gauge!("sluice_batches_in_flight", "Batches being written now.");
    describe_gauge!("sluice_leases_held", "Capacity leases this worker holds.");
    describe_gauge!(
        "sluice_records_remaining",
        "Records left in the source when the run ended (set at exit)."
    );
    describe_gauge!(
        "sluice_source_backlog",
        "Records (or bytes, for a file) left in the source."
    );
    describe_gauge!(
        "sluice_health_probe",
        "The last value each database-health probe read (absent while it fails)."
    );
    describe_gauge!(
        "sluice_health_probe_target",
        "The value a probe's target steers the rate under (a canary's resolved against its baseline)."
    );
    describe_gauge!(
        "sluice_health_probe_steered_rate",
        "The records per second a probe's target allows now."
    );
    describe_gauge!(
        "sluice_health_probe_baseline_seconds",
        "A canary's baseline latency, measured with nothing written: before the first write, and again with the writes held when its steering is stuck at the least rate."
    );
    describe_gauge!(
        "sluice_health_probe_baseline_age_seconds",
        "How long ago a canary's baseline was measured."
    );
    describe_gauge!(
        "sluice_rate_bounded_seconds",
        "Seconds of the run so far the rate was bounded by each thing: rate.records_per_second, a probe's target (its name), sink push-back, write latency, source, a hold."
    );
    describe_gauge!(
        "sluice_throttled",
        "1 while new writes are held for this reason: a health probe's name, or operator."
    );
}

/// The probes' last values and why writes are held, for the next render.
pub fn publish_health(health: &crate::health::Health) {
    handle();
    let held_by = health.held_by();
    for probe in health.probes() {
        if let Some(v) = probe.value {
            gauge!("sluice_health_probe", "name" => probe.name.clone()).set(v);
        }
        let name = || probe.name.clone();
        for (metric, value) in [
            ("sluice_health_probe_target", probe.target),
            ("sluice_health_probe_steered_rate", probe.steered_rate),
            ("sluice_health_probe_baseline_seconds", probe.baseline),
            (
                "sluice_health_probe_baseline_age_seconds",
                probe.baseline_age_s,
            ),
        ] {
            if let Some(v) = value {
                gauge!(metric, "name" => name()).set(v);
            }
        }
        let on = held_by.as_deref() == Some(probe.name.as_str());
        gauge!("sluice_throttled", "reason" => probe.name).set(if on { 1.0 } else { 0.0 });
    }
    let operator = held_by.as_deref() == Some("operator");
    gauge!("sluice_throttled", "reason" => "operator").set(if operator { 1.0 } else { 0.0 });
}

/// Publishes the run's counters and gauges, then renders the text format.
pub fn render(stats: &Stats) -> String {
    let h = handle();
    counter!("sluice_records_pulled_total").absolute(stats.pulled.load(Relaxed));
    counter!("sluice_records_written_total").absolute(stats.written.load(Relaxed));
    counter!("sluice_records_dead_lettered_total").absolute(stats.dead_lettered.load(Relaxed));
    counter!("sluice_records_duplicates_total").absolute(stats.duplicates.load(Relaxed));
    counter!("sluice_records_deleted_total").absolute(stats.deleted.load(Relaxed));
    counter!("sluice_records_stale_total").absolute(stats.stale.load(Relaxed));
    counter!("sluice_records_superseded_total").absolute(stats.superseded.load(Relaxed));
    counter!("sluice_records_skipped_by_sink_total").absolute(stats.skipped_by_sink.load(Relaxed));
    counter!("sluice_throttle_events_total").absolute(stats.throttled.load(Relaxed));
    counter!("sluice_retries_total").absolute(stats.retries.load(Relaxed));
    gauge!("sluice_rate_limit_records_per_second").set(stats.rate_limit.get());
    counter!("sluice_rate_cuts_total").absolute(stats.rate_cuts.load(Relaxed));
    gauge!("sluice_rate_multiplier").set(stats.rate_multiplier.get());
    counter!("sluice_throttle_pauses_total").absolute(stats.pauses.load(Relaxed));
    counter!("sluice_retry_after_total").absolute(stats.retry_afters.load(Relaxed));
    gauge!("sluice_retry_after_last_seconds")
        .set(stats.last_retry_after_ms.load(Relaxed) as f64 / 1000.0);
    let binding = stats.binding_unit();
    for unit in SinkUnit::ALL {
        let limit = stats.sink_limit(unit).get();
        if limit > 0.0 {
            gauge!("sluice_sink_limit", "unit" => unit.name()).set(limit);
        }
        gauge!("sluice_sink_limit_binding", "unit" => unit.name()).set(if binding == Some(unit) {
            1.0
        } else {
            0.0
        });
    }
    for bound in crate::lock::lock(&stats.bounded_by).bounds() {
        gauge!("sluice_rate_bounded_seconds", "by" => bound.by).set(bound.seconds);
    }
    gauge!("sluice_batch_records").set(stats.batch_records.load(Relaxed) as f64);
    gauge!("sluice_concurrency_limit").set(stats.concurrency_limit.load(Relaxed) as f64);
    gauge!("sluice_batches_in_flight").set(stats.batches_in_flight.load(Relaxed) as f64);
    gauge!("sluice_leases_held").set(stats.leases_held.load(Relaxed) as f64);
    if let Some(Some(left)) = stats.remaining.get() {
        gauge!("sluice_records_remaining").set(*left as f64);
    }
    let total = stats.source_total.load(Relaxed);
    if total > 0 {
        let left = total.saturating_sub(stats.source_done.load(Relaxed));
        let unit = if stats.source_in_bytes.load(Relaxed) {
            "bytes"
        } else {
            "records"
        };
        gauge!("sluice_source_backlog", "unit" => unit).set(left as f64);
    }
    h.render()
}
