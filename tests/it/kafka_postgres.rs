//! Kafka → PostgreSQL against the real broker (Tansu) and the real PostgreSQL: a group of
//! workers shares the partitions, a killed worker loses and duplicates nothing, rows the
//! table refuses become dead letters while their neighbours land, and configuration
//! cannot inject SQL. (PostgreSQL restarts are in `kafka_postgres_restart.rs`: they must
//! not overlap these.)

use crate::kafka_pg_support;

use std::time::Duration;

use kafka_pg_support::*;

const RECORDS: usize = 20_000;
const PARTITIONS: u32 = 4;
/// Generous: two cores are shared with other builds; counts are asserted, not speed.
const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_in_one_group_drain_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("kp_group");
    let table = topic.clone();
    create_topic(&topic, PARTITIONS);
    // Slow enough that one worker alone would take ~10 s: both get partitions.
    let config = write_config(dir.path(), &topic, &table, "key = \"/id\"", "");
    load_topic(&config, dir.path(), RECORDS, &[]).await;

    let workers: Vec<_> = (0..2)
        .map(|_| start_worker(&config, &["--until-empty", "--rate", "2000"]))
        .collect();
    let mut pulled = Vec::new();
    for worker in workers {
        let out = finish(worker, LIMIT).await;
        assert!(out.status.success(), "worker failed: {}", stderr(&out));
        let s = summary(&out);
        assert_eq!(s["dead_lettered"], 0, "{s}");
        pulled.push(s["pulled"].as_u64().unwrap());
    }
    assert!(
        pulled.iter().all(|&p| p > 0),
        "both workers should have drained partitions: pulled {pulled:?}"
    );
    assert!(pulled.iter().sum::<u64>() >= RECORDS as u64, "{pulled:?}");
    let rows = pg_count(&format!("SELECT count(*) FROM {table}")).await;
    let ids = pg_count(&format!(
        "SELECT count(DISTINCT (payload->>'id')::int) FROM {table} WHERE (payload->>'id')::int BETWEEN 1 AND {RECORDS}"
    ))
    .await;
    assert_eq!((rows, ids), (RECORDS as i64, RECORDS as i64));
    clean_up(&table, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_drain_resumes_without_loss_or_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("kp_kill");
    let table = topic.clone();
    create_topic(&topic, PARTITIONS);
    // Produced keyed by id (spread over the partitions) but written keyed by position
    // (topic/partition/offset): a record delivered twice is absorbed only at the same
    // position, and a skipped one is missing.
    let producer_dir = tempfile::tempdir().unwrap();
    let producer = write_config(producer_dir.path(), &topic, &table, "key = \"/id\"", "");
    // Many slots: the worker keeps pulling (and would commit) while writes hang.
    let config = write_config(
        dir.path(),
        &topic,
        &table,
        "max_batch = 250",
        "[concurrency]\nalgorithm = \"fixed\"\nmax = 16",
    );
    load_topic(&producer, dir.path(), RECORDS, &[]).await;

    let at_kill = kill_mid_drain(
        &config,
        &table,
        &["--until-empty", "--rate", "3000"],
        5_000,
        RECORDS as i64,
        LIMIT,
    )
    .await;
    rerun_after_kill(
        &config,
        &topic,
        PARTITIONS as i32,
        at_kill,
        RECORDS as i64,
        LIMIT,
    )
    .await;
    let rows = pg_count(&format!("SELECT count(*) FROM {table}")).await;
    let ids = pg_count(&format!(
        "SELECT count(DISTINCT (payload->>'id')::int) FROM {table}"
    ))
    .await;
    assert_eq!((rows, ids), (RECORDS as i64, RECORDS as i64));
    clean_up(&table, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_violating_a_check_are_dead_lettered_and_their_neighbours_written() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("kp_check");
    let table = topic.clone();
    create_topic(&topic, PARTITIONS);
    pg_execute(&format!(
        "CREATE TABLE {table} (
            order_id bigint PRIMARY KEY,
            amount numeric NOT NULL CONSTRAINT amount_positive CHECK (amount > 0),
            note text,
            doc jsonb)"
    ))
    .await;
    let config = write_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"\nkey_column = \"order_id\"\nmax_batch = 200\n\
         [sink.columns]\namount = \"/amount\"\nnote = \"/note\"\ndoc = \"\"",
        "",
    );
    let bad: Vec<usize> = (1..=10).map(|i| i * 97).collect();
    load_topic(&config, dir.path(), 1_000, &bad).await;

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert!(out.status.success(), "worker failed: {}", stderr(&out));
    let s = summary(&out);
    assert_eq!(
        (s["written"].as_u64(), s["dead_lettered"].as_u64()),
        (Some(990), Some(10)),
        "{s}"
    );

    assert_eq!(
        pg_count(&format!("SELECT count(*) FROM {table}")).await,
        990
    );
    assert_eq!(
        pg_count(&format!(
            "SELECT count(*) FROM {table} WHERE doc->>'note' = note AND amount = order_id"
        ))
        .await,
        990,
        "mapped columns hold the values at their pointers"
    );
    let letters = format!("FROM sluice_dead_letters WHERE position LIKE '{topic}/%'");
    assert_eq!(pg_count(&format!("SELECT count(*) {letters}")).await, 10);
    assert_eq!(
        pg_count(&format!(
            "SELECT count(*) {letters} AND reason LIKE 'SQLSTATE 23514:%amount_positive%'"
        ))
        .await,
        10,
        "each letter names the SQLSTATE and the constraint"
    );
    let bad_keys = bad
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        pg_count(&format!(
            "SELECT count(*) {letters} AND key IN ({bad_keys})"
        ))
        .await,
        10,
        "exactly the violating records are dead-lettered"
    );

    // Redelivering the same topic to a fresh group duplicates nothing, rows or letters.
    let again = write_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"\nkey_column = \"order_id\"\nmax_batch = 200\n\
         [sink.columns]\namount = \"/amount\"\nnote = \"/note\"\ndoc = \"\"",
        "",
    );
    let body = std::fs::read_to_string(&again)
        .unwrap()
        .replace(&format!("{topic}-workers"), &format!("{topic}-replay"));
    std::fs::write(&again, body).unwrap();
    let out = finish(start_worker(&again, &["--until-empty"]), LIMIT).await;
    assert!(out.status.success(), "replay failed: {}", stderr(&out));
    let s = summary(&out);
    assert_eq!(
        (s["written"].as_u64(), s["duplicates"].as_u64()),
        (Some(0), Some(990)),
        "{s}"
    );
    assert_eq!(pg_count(&format!("SELECT count(*) {letters}")).await, 10);
    clean_up(&table, &topic).await;
}

#[tokio::test]
async fn a_table_name_that_injects_sql_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (table, sink_extra, key) in [
        ("records; drop table x", "", "sink.table"),
        (
            "records",
            "key_column = \"id\"\n[sink.columns]\n\"amount; drop table x\" = \"/amount\"",
            "sink.columns",
        ),
    ] {
        let config = write_config(dir.path(), "orders", table, sink_extra, "");
        for command in ["run", "check"] {
            let out = sluice()
                .arg(command)
                .arg("--config")
                .arg(&config)
                .output()
                .await
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
            assert!(stderr(&out).contains(key), "{command}: {}", stderr(&out));
        }
    }
}

#[tokio::test]
async fn produce_refuses_a_source_that_is_not_a_queue() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ndjson");
    write_records(&input, 1, &[]);
    let config = dir.path().join("file.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = {input:?}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://x.db\"\n"
        ),
    )
    .unwrap();
    let out = sluice()
        .arg("produce")
        .arg("--config")
        .arg(&config)
        .arg(&input)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_throttling_sqlstate_slows_down_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("kp_throttle");
    let table = topic.clone();
    create_topic(&topic, PARTITIONS);
    // The first three INSERT statements are refused with SQLSTATE 53300, as a database
    // that sheds load would.
    pg_execute(&format!(
        "CREATE TABLE {table} (key text PRIMARY KEY, payload jsonb NOT NULL, source text,
            ingested_at timestamptz NOT NULL DEFAULT now());
         CREATE SEQUENCE {table}_calls;
         CREATE FUNCTION {table}_shed() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF nextval('{table}_calls') <= 3 THEN
             RAISE EXCEPTION 'too many requests' USING ERRCODE = '53300';
           END IF;
           RETURN NULL;
         END $$;
         CREATE TRIGGER shed BEFORE INSERT ON {table}
           FOR EACH STATEMENT EXECUTE FUNCTION {table}_shed();"
    ))
    .await;
    let config = write_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"\nthrottle_sqlstates = [\"53300\"]",
        "",
    );
    load_topic(&config, dir.path(), 1_000, &[]).await;

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert!(out.status.success(), "worker failed: {}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["throttled"].as_u64(), Some(3), "{s}");
    assert_eq!(
        (s["written"].as_u64(), s["dead_lettered"].as_u64()),
        (Some(1_000), Some(0)),
        "{s}"
    );
    assert_eq!(
        pg_count(&format!("SELECT count(*) FROM {table}")).await,
        1_000
    );
    pg_execute(&format!(
        "DROP TABLE {table}; DROP FUNCTION {table}_shed(); DROP SEQUENCE {table}_calls"
    ))
    .await;
    delete_topic(&topic);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_config_is_valid_and_the_environment_overrides_it() {
    let topic = unique("kp_example");
    create_topic(&topic, 1);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/kafka-postgres.toml");
    let out = sluice()
        .args(["check", "--config", example])
        .env("SLUICE_SOURCE__BROKERS", brokers())
        .env("SLUICE_SOURCE__TOPIC", &topic)
        .env("SLUICE_SINK__URL", pg_url())
        .env("SLUICE_SINK__TABLE", &topic)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // The overridden table reached the sink's probe, which creates nothing.
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(said.contains(&format!("run creates {topic}")), "{said}");
    assert_eq!(
        pg_count(&format!(
            "SELECT count(*) FROM pg_tables WHERE tablename = '{topic}'"
        ))
        .await,
        0,
        "check created the table"
    );
    delete_topic(&topic);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_topic_is_empty_only_once_the_group_assigned_it() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("kp_empty");
    create_topic(&topic, PARTITIONS);
    let config = write_config(dir.path(), &topic, &topic, "", "");
    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert!(out.status.success(), "worker failed: {}", stderr(&out));
    assert_eq!(summary(&out)["pulled"], 0);
    // Not "no partitions yet, so nothing to do": the run ended after the assignment.
    assert!(
        stderr(&out).contains("partitions assigned"),
        "{}",
        stderr(&out)
    );
    clean_up(&topic, &topic).await;
}
