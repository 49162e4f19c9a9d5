//! The summary's `remaining` is what the next run will read: records pulled but never
//! acknowledged count as left, whatever the source. A SIGTERM during a Retry-After pause
//! (every record pulled so far unacknowledged) on the real Kafka-protocol broker and
//! RabbitMQ; the rerun against a sink that takes everything reads exactly that many. (The
//! file source's cases are in tests/it/shutdown_pause.rs and tests/it/dead_letters.rs.)

use crate::kafka_pg_support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::throttled::{AlwaysThrottled, accepting_sink, sigterm};
use crate::common::{amqp_publish, amqp_queue_counts, amqp_url, finish, unique};
use kafka_pg_support::{brokers, create_topic, delete_topic, produce, stderr, summary};

const RECORDS: usize = 300;

/// An HTTP sink at `url` (max 50 records a request), the source section given.
fn config(dir: &Path, source: &str, url: &str) -> std::path::PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!(
            "[source]\n{source}\n\n\
             [sink]\nkind = \"http\"\nurl = {url:?}\nkey = \"/id\"\nmax_batch = 50\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n\n\
             [retry]\nmax_delay = \"60s\"\n"
        ),
    )
    .unwrap();
    path
}

fn run(config: &Path, args: &[&str]) -> std::process::Child {
    let mut cmd = crate::common::sluice();
    cmd.current_dir(config.parent().unwrap())
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(["--until-empty", "--summary", "json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

/// Runs a worker against an endpoint that throttles everything, SIGTERMs it inside the
/// 30 s pause and returns its output.
fn stopped_in_a_pause(config_for: &dyn Fn(&str) -> std::path::PathBuf, args: &[&str]) -> Output {
    let throttled = AlwaysThrottled::start();
    let config = config_for(&throttled.url());
    let mut child = run(&config, args);
    throttled.wait_until_paused(&mut child);
    sigterm(&child);
    let out = finish(child, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

/// The rerun against a sink that takes everything: its summary.
fn rerun(config: &Path, args: &[&str]) -> serde_json::Value {
    let (_rt, sim) = accepting_sink();
    let url = sim.ingest_url();
    let mut all = args.to_vec();
    all.extend(["--sink-url", &url]);
    let out = finish(run(config, &all), Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    summary(&out)
}

#[test]
fn kafka_counts_what_was_pulled_and_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("remaining_kafka");
    create_topic(&topic, 2);
    let source = format!(
        "kind = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\ngroup = \"{topic}-workers\"",
        brokers()
    );
    let config_for = |url: &str| config(dir.path(), &source, url);
    let input = dir.path().join("in.ndjson");
    kafka_pg_support::write_records(&input, RECORDS, &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let produced = rt.block_on(produce(&config_for("http://127.0.0.1:9/"), &input));
    assert_eq!(produced, RECORDS as u64);

    let direct = ["--direct-assignment"];
    let first = summary(&stopped_in_a_pause(&config_for, &direct));
    assert_eq!(first["written"], 0, "{first}");
    assert!(first["pulled"].as_u64().unwrap() > 0, "{first}");
    assert_eq!(
        first["remaining"], RECORDS,
        "nothing was committed: {first}"
    );

    let second = rerun(&dir.path().join("sluice.toml"), &direct);
    assert_eq!(second["pulled"], first["remaining"], "{second}");
    assert_eq!(second["written"], RECORDS, "{second}");
    assert_eq!(second["remaining"], 0, "{second}");
    delete_topic(&topic);
}

#[test]
fn amqp_counts_the_messages_handed_back() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("remaining_amqp");
    amqp_publish(&queue, RECORDS);
    let source = format!("kind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}", amqp_url());
    let config_for = |url: &str| config(dir.path(), &source, url);

    let first = summary(&stopped_in_a_pause(&config_for, &[]));
    assert_eq!(first["written"], 0, "{first}");
    assert!(first["pulled"].as_u64().unwrap() > 0, "{first}");
    assert_eq!(
        first["remaining"], RECORDS,
        "every message returned: {first}"
    );
    assert_eq!(amqp_queue_counts(&queue), (RECORDS as u64, 0));

    let second = rerun(&dir.path().join("sluice.toml"), &[]);
    assert_eq!(second["pulled"], first["remaining"], "{second}");
    assert_eq!(second["written"], RECORDS, "{second}");
    assert_eq!(second["remaining"], 0, "{second}");
}
