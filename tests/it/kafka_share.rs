//! `[leases] store = "kafka"`: the capacity follows the consumer group's assignment, so a
//! rebalance re-divides it with no lease store. Real Tansu broker and PostgreSQL.

use crate::kafka_pg_support;

use std::time::{Duration, Instant};

use crate::common::free_port;
use kafka_pg_support::*;

/// The worker's current rate from its /metrics, if it answers.
async fn rate(port: u16) -> Option<f64> {
    let text = crate::common::http()
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with("sluice_rate_limit_records_per_second "))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

async fn wait_for_rates(ports: &[u16], want: f64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let mut rates = Vec::new();
        for p in ports {
            rates.push(rate(*p).await);
        }
        if rates.iter().all(|r| *r == Some(want)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: rates {rates:?}, want {want} each"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_follows_the_group_assignment() {
    let topic = unique("sluice_share");
    create_topic(&topic, 4);
    let dir = tempfile::tempdir().unwrap();
    let table = topic.replace('-', "_");
    let config = write_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "\n[leases]\nstore = \"kafka\"\ncapacity = 400\n",
    );
    load_topic(&config, dir.path(), 100_000, &[]).await;

    let ports = [free_port(), free_port()];
    let mut workers: Vec<_> = ports
        .iter()
        .map(|port| {
            let mut cmd = sluice();
            cmd.arg("run")
                .arg("--config")
                .arg(&config)
                .env("SLUICE_TELEMETRY__LISTEN", format!("127.0.0.1:{port}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            cmd.spawn().unwrap()
        })
        .collect();
    // Four partitions, two workers: two each, 200 rec/s each.
    wait_for_rates(&ports, 200.0, "two workers").await;
    let mut gone = workers.remove(0);
    gone.start_kill().unwrap();
    gone.wait().await.unwrap();
    // The survivor is given all four: the whole 400 rec/s.
    wait_for_rates(&ports[1..], 400.0, "after one worker died").await;
    let mut last = workers.remove(0);
    last.start_kill().unwrap();
    last.wait().await.unwrap();
    delete_topic(&topic);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_counts_a_topic_backlog_exactly() {
    let topic = unique("sluice_plan");
    create_topic(&topic, 3);
    let dir = tempfile::tempdir().unwrap();
    let table = topic.replace('-', "_");
    let config = write_config(dir.path(), &topic, &table, "key = \"/id\"", "");
    load_topic(&config, dir.path(), 4_321, &[]).await;
    let plan = |config: std::path::PathBuf| async move {
        let out = sluice()
            .args(["plan", "--json", "--config"])
            .arg(&config)
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_eq!(plan(config.clone()).await["backlog"], 4_321);
    // Drain part of it; the plan counts from the group's committed offsets.
    let out = sluice()
        .args([
            "run",
            "--max-records",
            "1000",
            "--summary",
            "json",
            "--config",
        ])
        .arg(&config)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(plan(config.clone()).await["backlog"], 4_321 - 1_000);
    delete_topic(&topic);
}
