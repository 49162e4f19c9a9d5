//! `--until-empty --direct-assignment` ends at what the topic held at start, on every
//! partition, however slowly the worker drains: each partition's end is taken from the
//! first fetch of it, not when its first record reaches the worker (which, at a low rate
//! over many partitions, came seconds later and took the producer's later records in).
//! The real Kafka-protocol broker, data in it, and a producer writing all along.

use crate::kafka_pg_support;

use std::time::Instant;

use kafka_pg_support::live::*;
use kafka_pg_support::*;

const PARTITIONS: usize = 8;
const AT_START: usize = 8_000;
/// Records per second the producer writes while the worker runs, and the worker's rate.
const PRODUCED: u64 = 1_500;
const RATE: &str = "1000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_partition_ends_where_it_stood_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("direct_bounds");
    let table = topic.clone();
    create_topic(&topic, PARTITIONS as u32);
    let config = write_config(dir.path(), &topic, &table, "key = \"/id\"", "");
    load_topic(&config, dir.path(), AT_START, &[]).await;

    let started = Instant::now();
    let mut worker = run_worker(
        &config,
        &["--until-empty", "--direct-assignment", "--rate", RATE],
    );
    let (_, log) = watch_stderr(worker.stderr.take().unwrap(), "up to its end as of now");
    // From here on every record is one the topic did not hold at start.
    let flood = KafkaFlood::start(&topic, 1_000_000, PRODUCED);
    let (status, stdout) = exit_of(worker).await;
    let took = started.elapsed();
    let late = flood.stop();
    let log = log.join().unwrap();
    assert!(status.success(), "{log}");
    let s = json_summary(&stdout);

    let ends = logged_ends(&log, PARTITIONS);
    let bounded: u64 = ends.iter().sum();
    let early = pg_count(&format!(
        "SELECT count(*) FROM {table} WHERE (payload->>'id')::bigint <= {AT_START}"
    ))
    .await;
    let rows = pg_count(&format!("SELECT count(*) FROM {table}")).await;
    eprintln!(
        "direct bounds: {AT_START} at start, {late} produced during the {took:.1?} run, {} of them inside the bounds; {s}",
        bounded - AT_START as u64
    );
    assert_eq!(early, AT_START as i64, "every record there at start: {s}");
    assert_eq!(rows as u64, bounded, "exactly up to the bounds: {s}");
    assert_eq!(s["written"], rows, "{s}");
    let committed = committed_offsets(&topic, &format!("{topic}-workers"), 8).await;
    assert_eq!(
        committed.iter().map(|&c| c as u64).collect::<Vec<_>>(),
        ends,
        "committed exactly up to the bounds"
    );
    assert!(
        late > 4 * PRODUCED,
        "the producer wrote through the drain: {late}"
    );
    // A bound taken at the first fetch includes what the producer wrote in the worker's
    // first few hundred milliseconds at most; one taken when the partition's first record
    // reached the worker included seconds of it (7 s for the last partition at this rate).
    assert!(
        bounded - (AT_START as u64) < PRODUCED,
        "{} records produced after the start were loaded: {log}",
        bounded - AT_START as u64
    );
    clean_up(&table, &topic).await;
}

/// The fallback for a partition whose first fetch waits on a full queue: a reader of its
/// own finds every partition's end exactly (the records produced, counted per partition
/// by reading them), not the broker's offset answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_its_own_finds_each_partition_end() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("end_probe");
    create_topic(&topic, 3);
    let config = write_config(dir.path(), &topic, &topic, "key = \"/id\"", "");
    load_topic(&config, dir.path(), 3_001, &[]).await;
    let settings = sluice::source::kafka::settings::KafkaSettings {
        brokers: Some(brokers()),
        topic: Some(topic.clone()),
        group: Some(format!("{topic}-probe")),
        ..Default::default()
    };
    let ends = tokio::task::spawn_blocking(move || {
        sluice::source::kafka::end_probe::fetched_ends(
            &settings,
            &[0, 1, 2],
            std::time::Duration::from_secs(10),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(ends.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(ends.values().sum::<u64>(), 3_001, "{ends:?}");
    assert!(
        ends.values().all(|&e| e > 0),
        "records in every partition: {ends:?}"
    );
}
