//! `sluice plan` against the real RabbitMQ and Kafka (Tansu): read-only, exact, quiet;
//! and dead letters that keep their context (Kafka key, headers, tombstones, the table
//! they were bound for).

use crate::kafka_pg_support;

use std::path::Path;
use std::time::Duration;

use crate::common::{amqp_publish, amqp_queue_counts, amqp_url, sqlite_count};
use kafka_pg_support::*;

fn plan(dir: &Path) -> (String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(dir)
        .env("SLUICE_LOG", "info")
        .args(["plan", "-c", "sluice.toml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}{stderr}");
    (stdout, stderr)
}

fn amqp_config(dir: &Path, queue: &str) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 100\n",
            amqp_url()
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_plan_reads_the_queue_without_consuming_it() {
    use futures::StreamExt;
    use lapin::options::{BasicConsumeOptions, BasicQosOptions};
    use lapin::types::FieldTable;
    use lapin::{Connection, ConnectionProperties};

    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_plan");
    let q = queue.clone();
    tokio::task::spawn_blocking(move || amqp_publish(&q, 120))
        .await
        .unwrap();
    amqp_config(dir.path(), &queue);
    for _ in 0..2 {
        let (out, _) = plan(dir.path());
        assert!(out.starts_with("120 records queued"), "{out}");
        assert!(
            out.contains("not yet acknowledged are not included"),
            "{out}"
        );
    }
    assert_eq!(amqp_queue_counts(&queue), (120, 0));

    // A consumer holding 20 unacknowledged: the plan counts the 100 ready, says so.
    let conn = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.basic_qos(20, BasicQosOptions::default()).await.unwrap();
    let mut consumer = ch
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..20 {
        let d = consumer.next().await.unwrap().unwrap();
        assert!(!d.redelivered, "plan handed a message back redelivered");
        held.push(d);
    }
    let (out, _) = plan(dir.path());
    assert!(out.starts_with("100 records queued"), "{out}");
    assert!(out.contains("(1 attached)"), "{out}");
    // The rest were never delivered by the plans either.
    let other = conn.create_channel().await.unwrap();
    for _ in 0..100 {
        let got = other
            .basic_get(
                queue.as_str().into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .unwrap()
            .expect("a ready message");
        assert!(
            !got.delivery.redelivered,
            "plan handed a message back redelivered"
        );
    }
    let _ = conn.close(200, "done".into()).await;
    let _ = held;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_plan_names_a_missing_queue_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_plan_missing");
    amqp_config(dir.path(), &queue);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(dir.path())
        .args(["plan", "-c", "sluice.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&queue) && err.contains("NOT_FOUND"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_plan_counts_exactly_and_logs_no_partition_eof_errors() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("sluice_plan_kafka");
    create_topic(&topic, 3);
    let config = write_config(dir.path(), &topic, "unused", "", "");
    load_topic(&config, dir.path(), 30, &[]).await;
    let (out, err) = plan(dir.path());
    delete_topic(&topic);
    assert!(out.starts_with("30 records queued"), "{out}");
    assert!(!err.contains("PartitionEOF"), "{err}");
    assert!(!err.contains("ERROR"), "{err}");
}

/// Produces `(key, headers, value)` messages to partition 0 of `topic`.
/// A message to produce: its key, headers and value (None: a tombstone).
type Message<'a> = (Option<&'a str>, &'a [(&'a str, &'a [u8])], Option<&'a str>);

async fn produce_raw(topic: &str, messages: &[Message<'_>]) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    for (key, headers, value) in messages {
        let mut h = OwnedHeaders::new();
        for (name, v) in *headers {
            h = h.insert(Header {
                key: name,
                value: Some(*v),
            });
        }
        let mut record: FutureRecord<'_, str, str> =
            FutureRecord::to(topic).partition(0).headers(h);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(v) = value {
            record = record.payload(v);
        }
        producer
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_dead_letters_keep_the_key_the_headers_and_a_reason_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("sluice_dl_context");
    create_topic(&topic, 1);
    produce_raw(
        &topic,
        &[
            (Some("order-1"), &[], Some(r#"{"id":1}"#)),
            (
                Some("order-2"),
                &[("trace", b"t-2"), ("bin", b"\xff\x00")],
                None,
            ),
            (Some("order-3"), &[], Some("")),
            (None, &[("trace", b"t-4")], Some("{\"id\":")),
        ],
    )
    .await;
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\ngroup = \"{topic}-g\"\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\ntable = \"orders\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 1000\n",
            brokers()
        ),
    )
    .unwrap();
    let out = sluice()
        .current_dir(dir.path())
        .args(common_drain())
        .output()
        .await
        .unwrap();
    delete_topic(&topic);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], 1, "{s}");
    assert_eq!(s["dead_lettered"], 3, "{s}");
    let db = dir.path().join("out.db");
    let one = |sql: &str| {
        let (db, sql) = (db.clone(), sql.to_string());
        std::thread::spawn(move || sqlite_count(&db, &sql))
            .join()
            .unwrap()
    };
    assert_eq!(
        one("select count(*) from sluice_dead_letters where target = 'orders'"),
        3
    );
    assert_eq!(
        one(
            "select count(*) from sluice_dead_letters where source_key = cast('order-2' as blob) and reason like 'tombstone:%' \
             and headers = '[{\"name\":\"trace\",\"value\":\"t-2\"},{\"name\":\"bin\",\"value_hex\":\"ff00\"}]'"
        ),
        1
    );
    assert_eq!(
        one(
            "select count(*) from sluice_dead_letters where source_key = cast('order-3' as blob) and reason like 'empty record%'"
        ),
        1
    );
    assert_eq!(
        one(
            "select count(*) from sluice_dead_letters where source_key is null and reason like 'malformed JSON%' \
             and headers = '[{\"name\":\"trace\",\"value\":\"t-4\"}]'"
        ),
        1
    );
}

fn common_drain() -> [&'static str; 6] {
    [
        "run",
        "-c",
        "sluice.toml",
        "--until-empty",
        "--summary",
        "json",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pipelines_sharing_a_database_keep_their_dead_letters_apart() {
    let dir = tempfile::tempdir().unwrap();
    let first = unique("sluice_dl_a");
    let second = unique("sluice_dl_b");
    // The same bad record (same file, same line) bound for two tables.
    std::fs::write(dir.path().join("in.ndjson"), "{\"id\":1}\n{\"id\":\n").unwrap();
    for table in [&first, &second] {
        std::fs::write(
            dir.path().join("sluice.toml"),
            format!(
                "[source]\nkind = \"file\"\npath = \"in.ndjson\"\ncheckpoint = \"{table}.checkpoint\"\n\n[sink]\nkind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"\nkey = \"/id\"\n\n[rate]\nrecords_per_second = 1000\n",
                pg_url()
            ),
        )
        .unwrap();
        let out = sluice()
            .current_dir(dir.path())
            .args(common_drain())
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(summary(&out)["dead_lettered"], 1);
    }
    let count = |table: &str| {
        format!(
            "select count(*) from sluice_dead_letters where target = '{table}' and reason like 'malformed JSON%'"
        )
    };
    let (a, b) = (
        pg_count(&count(&first)).await,
        pg_count(&count(&second)).await,
    );
    for table in [&first, &second] {
        pg_execute(&format!(
            "delete from sluice_dead_letters where target = '{table}'"
        ))
        .await;
        pg_execute(&format!("drop table if exists \"{table}\"")).await;
    }
    assert_eq!((a, b), (1, 1));
}
