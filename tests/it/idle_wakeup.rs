//! A long-lived worker that drained its source and sat idle past `idle_grace` (giving its
//! leases back, where it has any) must notice new records and write them within
//! `ttl + 2 s`, losing none. Every source (a followed file, Kafka, RabbitMQ) against every
//! lease mode (none, PostgreSQL leases, `store = "kafka"`), on the real services, with a
//! PostgreSQL sink. `store = "kafka"` divides the capacity by the consumer group's
//! assignment, so it exists only for a Kafka source: the file and RabbitMQ rows of the
//! matrix skip it (the configuration refuses it there).

use crate::kafka_pg_support;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{amqp_url, free_port};
use kafka_pg_support::*;

/// Lease ttl and idle grace of the test pools: short, so that the test is.
const TTL: Duration = Duration::from_secs(4);
const IDLE_GRACE: Duration = Duration::from_secs(1);
/// A generous bound for what is not under test (joining a group, the first drain).
const SLOW: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Kind {
    File,
    Kafka,
    Amqp,
}

#[derive(Clone, Copy, Debug)]
enum Leases {
    None,
    Postgres { reserved: f64 },
    ByAssignment,
}

struct Case {
    kind: Kind,
    dir: tempfile::TempDir,
    config: PathBuf,
    /// Topic, queue or file name: unique to this test.
    name: String,
    table: String,
}

impl Case {
    fn new(kind: Kind, leases: Leases, partitions: u32) -> Case {
        let dir = tempfile::tempdir().unwrap();
        let name = unique("sluice_idle");
        let table = format!("{name}_rows");
        let source = match kind {
            Kind::File => {
                let path = dir.path().join("in.ndjson");
                std::fs::write(&path, "").unwrap();
                format!("kind = \"file\"\npath = {path:?}\n")
            }
            Kind::Kafka => {
                create_topic(&name, partitions);
                format!(
                    "kind = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{name}\"\ngroup = \"{name}-workers\"\n",
                    brokers()
                )
            }
            Kind::Amqp => format!(
                "kind = \"amqp\"\nurl = {:?}\nqueue = \"{name}\"\n",
                amqp_url()
            ),
        };
        let leases_section = match leases {
            Leases::None => String::new(),
            Leases::Postgres { reserved } => format!(
                "[leases]\nstore = {:?}\npool = \"{name}\"\ncapacity = {}\npartitions = {partitions}\nttl = \"{}s\"\nreserved = {reserved}\nidle_grace = \"{}s\"\n",
                pg_url(),
                1000 * partitions,
                TTL.as_secs(),
                IDLE_GRACE.as_secs()
            ),
            Leases::ByAssignment => format!(
                "[leases]\nstore = \"kafka\"\ncapacity = {}\n",
                1000 * partitions
            ),
        };
        let config = dir.path().join("sluice.toml");
        std::fs::write(
            &config,
            format!(
                "[source]\n{source}\n[sink]\nkind = \"postgres\"\nurl = {:?}\ntable = \"{table}\"\nkey = \"/id\"\nmax_batch = 500\n\n\
                 [rate]\nrecords_per_second = 4000\ntick = \"100ms\"\n\n{leases_section}",
                pg_url()
            ),
        )
        .unwrap();
        Case {
            kind,
            dir,
            config,
            name,
            table,
        }
    }

    /// Hands records `first..first + n` (`{"id": i}`) to the source.
    async fn feed(&self, first: usize, n: usize) {
        let mut lines = String::new();
        for i in first..first + n {
            lines.push_str(&format!("{{\"id\":{i},\"note\":\"record {i}\"}}\n"));
        }
        match self.kind {
            Kind::File => {
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .open(self.dir.path().join("in.ndjson"))
                    .unwrap();
                file.write_all(lines.as_bytes()).unwrap();
                file.sync_all().unwrap();
            }
            Kind::Kafka | Kind::Amqp => {
                let input = self.dir.path().join(format!("batch-{first}.ndjson"));
                std::fs::write(&input, lines).unwrap();
                assert_eq!(produce(&self.config, &input).await, n as u64);
            }
        }
    }

    /// A worker that follows the source, with /metrics on `port`.
    fn worker(&self, port: u16) -> tokio::process::Child {
        sluice()
            .args(["run", "--summary", "json", "--config"])
            .arg(&self.config)
            .env("SLUICE_TELEMETRY__LISTEN", format!("127.0.0.1:{port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    async fn rows(&self) -> i64 {
        pg_count(&format!("SELECT count(*) FROM {}", self.table)).await
    }

    async fn distinct_keys(&self) -> i64 {
        pg_count(&format!("SELECT count(DISTINCT key) FROM {}", self.table)).await
    }

    async fn wait_for_rows(&self, n: i64, limit: Duration) -> (i64, Duration) {
        let started = Instant::now();
        let sql = format!("SELECT count(*) FROM {}", self.table);
        let count = wait_for_count(&sql, n, limit).await;
        (count, started.elapsed())
    }

    async fn clean_up(&self) {
        pg_execute(&format!("DROP TABLE IF EXISTS {}", self.table)).await;
        if let Kind::Kafka = self.kind {
            delete_topic(&self.name);
        }
    }
}

/// One gauge of a worker's /metrics, if it answers.
async fn gauge(port: u16, name: &str) -> Option<f64> {
    let text = crate::common::http()
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

/// Waits until every worker reports no lease held: they have given their capacity back.
async fn wait_until_leases_are_given_back(ports: &[u16]) {
    let deadline = Instant::now() + TTL + IDLE_GRACE + Duration::from_secs(10);
    loop {
        let mut held = Vec::new();
        for &p in ports {
            held.push(gauge(p, "sluice_leases_held").await);
        }
        if held.iter().all(|h| *h == Some(0.0)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "idle workers kept their leases: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Drain 500, stay idle past `idle_grace`, produce 1,000 more: written within ttl + 2 s,
/// every key once, the worker still stops cleanly.
async fn idle_then_more(kind: Kind, leases: Leases) {
    let case = Case::new(kind, leases, 4);
    case.feed(1, 500).await;
    let port = free_port();
    let worker = case.worker(port);
    wait_for_table(&case.table, SLOW).await;
    let (drained, _) = case.wait_for_rows(500, SLOW).await;
    assert_eq!(drained, 500, "{kind:?} × {leases:?}: first drain");
    if let Leases::Postgres { .. } = leases {
        wait_until_leases_are_given_back(&[port]).await;
    }
    tokio::time::sleep(IDLE_GRACE + Duration::from_secs(2)).await;

    case.feed(501, 1_000).await;
    let (count, took) = case
        .wait_for_rows(1_500, TTL + Duration::from_secs(2))
        .await;
    eprintln!(
        "{kind:?} × {leases:?}: {} of 1,000 more written {took:?} after they were produced",
        count - 500
    );
    assert_eq!(
        count,
        1_500,
        "{kind:?} × {leases:?}: only {} of 1,000 new records written within ttl + 2 s",
        count - 500
    );

    terminate(&worker);
    let out = finish(worker, Duration::from_secs(20)).await;
    assert!(
        out.status.success(),
        "{kind:?} × {leases:?}: {}",
        stderr(&out)
    );
    assert_eq!(summary(&out)["written"], 1_500, "{}", stderr(&out));
    assert_eq!(case.rows().await, 1_500);
    assert_eq!(case.distinct_keys().await, 1_500);
    case.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_without_leases_wakes_up() {
    idle_then_more(Kind::File, Leases::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_with_postgres_leases_wakes_up() {
    idle_then_more(Kind::File, Leases::Postgres { reserved: 0.0 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_without_leases_wakes_up() {
    idle_then_more(Kind::Kafka, Leases::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_with_postgres_leases_wakes_up() {
    idle_then_more(Kind::Kafka, Leases::Postgres { reserved: 0.0 }).await;
}

/// The second shape: 1 rec/s reserved used to pull nothing for 18 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_with_postgres_leases_and_a_reserved_rate_wakes_up() {
    idle_then_more(Kind::Kafka, Leases::Postgres { reserved: 1.0 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_with_capacity_by_assignment_wakes_up() {
    idle_then_more(Kind::Kafka, Leases::ByAssignment).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_without_leases_wakes_up() {
    idle_then_more(Kind::Amqp, Leases::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_with_postgres_leases_wakes_up() {
    idle_then_more(Kind::Amqp, Leases::Postgres { reserved: 0.0 }).await;
}

/// The skipped cells of the matrix: `store = "kafka"` with another source is refused
/// before anything starts, naming the key.
#[test]
fn capacity_by_assignment_is_refused_for_other_sources() {
    for kind in [Kind::File, Kind::Amqp] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("sluice.toml");
        std::fs::write(dir.path().join("in.ndjson"), "").unwrap();
        let source = match kind {
            Kind::File => "kind = \"file\"\npath = \"in.ndjson\"\n".to_string(),
            _ => format!("kind = \"amqp\"\nurl = {:?}\nqueue = \"q\"\n", amqp_url()),
        };
        std::fs::write(
            &config,
            format!(
                "[source]\n{source}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\n\n[leases]\nstore = \"kafka\"\ncapacity = 100\n"
            ),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .current_dir(dir.path())
            .args(["run", "--until-empty", "--config", "sluice.toml"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{kind:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("leases.store"),
            "{kind:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Three Kafka workers on one lease pool drain, all give their leases back, then a burst
/// of 6,000 arrives: every record is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_kafka_workers_on_one_pool_wake_up_for_a_burst() {
    let case = Case::new(Kind::Kafka, Leases::Postgres { reserved: 0.0 }, 6);
    case.feed(1, 600).await;
    let ports = [free_port(), free_port(), free_port()];
    let workers: Vec<_> = ports.iter().map(|&p| case.worker(p)).collect();
    wait_for_table(&case.table, SLOW).await;
    let (drained, _) = case.wait_for_rows(600, SLOW).await;
    assert_eq!(drained, 600, "first drain");
    wait_until_leases_are_given_back(&ports).await;
    tokio::time::sleep(IDLE_GRACE + Duration::from_secs(2)).await;

    case.feed(601, 6_000).await;
    let (count, took) = case.wait_for_rows(6_600, SLOW).await;
    eprintln!(
        "3 workers: {} of a burst of 6,000 written {took:?} after it was produced",
        count - 600
    );
    assert_eq!(count, 6_600, "burst not written within {SLOW:?}");
    assert!(
        took <= TTL + Duration::from_secs(2) + Duration::from_secs(1),
        "the burst took {took:?}: more than ttl + 2 s + its drain time at the pool's rate"
    );

    let mut written = 0;
    for w in &workers {
        terminate(w);
    }
    for w in workers {
        let out = finish(w, Duration::from_secs(20)).await;
        assert!(out.status.success(), "{}", stderr(&out));
        written += summary(&out)["written"].as_i64().unwrap();
    }
    assert_eq!(case.rows().await, 6_600);
    assert_eq!(case.distinct_keys().await, 6_600);
    assert_eq!(written, 6_600, "no worker wrote a row another one wrote");
    case.clean_up().await;
}
