//! The Grafana dashboard (`deploy/grafana/sluice.json`) queries only metrics and labels a
//! live worker exports: a worker is driven into every state a panel shows — throttled by a
//! sink until it learns the limit, holding leases, reading a health probe, dead-lettering,
//! losing bytes of a truncated file — and every metric name and label of every panel's
//! query must be in its `/metrics`. A renamed metric breaks this test, not the dashboard.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{free_port, get, pg_url, poll, unique};

/// One panel query: its expression, the sluice metrics it reads, the labels it names
/// (in a selector, a grouping or the legend).
struct Query {
    expr: String,
    metrics: BTreeSet<String>,
    labels: BTreeSet<String>,
}

fn queries() -> Vec<Query> {
    let text = std::fs::read_to_string("deploy/grafana/sluice.json").unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 9, "only {} panels", panels.len());
    let mut out = Vec::new();
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().to_string();
            let legend = target["legendFormat"].as_str().unwrap_or("");
            let mut labels = BTreeSet::new();
            for part in legend.split("{{").skip(1) {
                labels.insert(part.split("}}").next().unwrap().trim().to_string());
            }
            for part in expr.split("by (").skip(1) {
                for label in part.split(')').next().unwrap().split(',') {
                    labels.insert(label.trim().to_string());
                }
            }
            for selector in expr.split('{').skip(1) {
                for matcher in selector.split('}').next().unwrap().split(',') {
                    if let Some(name) = matcher.split(['=', '!', '~']).next() {
                        labels.insert(name.trim().to_string());
                    }
                }
            }
            // Prometheus adds job and instance to every series it scrapes; le is the
            // histogram's.
            labels.retain(|l| !["job", "instance", "", "le"].contains(&l.as_str()));
            let metrics: BTreeSet<String> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("sluice_"))
                .map(str::to_string)
                .collect();
            assert!(!metrics.is_empty(), "a query of no sluice metric: {expr}");
            out.push(Query {
                expr,
                metrics,
                labels,
            });
        }
    }
    out
}

/// metric name → label names seen on it, from the Prometheus text format.
fn exported(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => (&line[..i], &line[i..]),
            None => continue,
        };
        let labels = out.entry(name.to_string()).or_default();
        if let Some(inner) = rest.strip_prefix('{').and_then(|r| r.split('}').next()) {
            for pair in inner.split(',') {
                if let Some((label, _)) = pair.split_once('=') {
                    labels.insert(label.to_string());
                }
            }
        }
    }
    out
}

#[test]
fn every_metric_and_label_the_dashboard_queries_is_exported() {
    // 100 rec/s with one second of burst, asked for 400: the worker is throttled and
    // learns the limit; meanwhile the file is far from read, so a truncation loses bytes.
    let (_rt, sim) = common::sim_sink(sluice::sim_sink::SimSinkSettings::new(
        "127.0.0.1:0".parse().unwrap(),
        100.0,
    ));
    let dir = tempfile::tempdir().unwrap();
    common::write_records(&dir.path().join("in.ndjson"), 20_000, &[2, 3, 5]);
    let port = free_port();
    let pool = unique("dashboard");
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            r#"[source]
path = "in.ndjson"
[sink]
kind = "http"
url = "{ingest}"
key = "/id"
max_batch = 20
[sink.dead_letters]
path = "dead.ndjson"
[rate]
records_per_second = 400
[leases]
store = "{pg}"
pool = "{pool}"
capacity = 400
partitions = 4
ttl = "5s"
[[health.probe]]
name = "one"
query = "SELECT 1"
url = "{pg}"
max = 100
interval = "200ms"
[telemetry]
listen = "127.0.0.1:{port}"
"#,
            ingest = sim.ingest_url(),
            pg = pg_url(),
        ),
    )
    .unwrap();
    let worker = common::worker(dir.path(), false);
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    let has = |name: &str| {
        let text = get(&metrics_url);
        text.lines()
            .any(|l| l.starts_with(name) && !l.ends_with(" 0"))
    };
    poll(
        Duration::from_secs(60),
        "a learned limit, a lease, dead letters",
        || {
            has("sluice_sink_limit{")
                && has("sluice_leases_held")
                && has("sluice_records_dead_lettered_total")
        },
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("in.ndjson"))
        .unwrap()
        .set_len(0)
        .unwrap();
    poll(
        Duration::from_secs(30),
        "bytes lost to the truncation",
        || has("sluice_source_lost_bytes_total"),
    );
    let exported = exported(&get(&metrics_url));
    common::throttled::sigterm(&worker);
    let _ = common::finish(worker, Duration::from_secs(60));
    let mut problems = Vec::new();
    for query in queries() {
        let mut carried = BTreeSet::new();
        for metric in &query.metrics {
            let base = metric.strip_suffix("_bucket").unwrap_or(metric);
            match exported.get(metric.as_str()).or_else(|| exported.get(base)) {
                Some(labels) => carried.extend(labels.iter().cloned()),
                None => problems.push(format!("{metric} is not exported ({})", query.expr)),
            }
        }
        for label in query.labels.difference(&carried) {
            problems.push(format!(
                "no series of {:?} has the label {label}",
                query.metrics
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
