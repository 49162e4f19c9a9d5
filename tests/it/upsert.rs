//! `sink.mode = "upsert"` against the real PostgreSQL and broker: the newest version of
//! every key lands, deletes stick, whatever order batches finish in, across a kill -9.

use crate::kafka_pg_support;

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_pg_support::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const EVENTS: usize = 200_000;
const KEYS: usize = 5_000;
const PARTITIONS: i32 = 6;

/// One change event: a new state of `key`, or its deletion.
struct Event {
    key: usize,
    seq: usize,
    delete: bool,
}

/// What the table must hold: for each key its last event, if that was not a delete.
fn last_states(events: &[Event]) -> HashMap<String, Option<usize>> {
    let mut last = HashMap::new();
    for e in events {
        last.insert(format!("k{}", e.key), (!e.delete).then_some(e.seq));
    }
    last
}

/// Produces the events keyed `k<key>`, each key to one partition (as a keyed producer
/// does), a delete as a tombstone (no value).
fn produce_events(topic: &str, events: &[Event]) {
    let messages: Vec<(String, i32, Option<String>)> = events
        .iter()
        .map(|e| {
            let key = format!("k{}", e.key);
            let payload = format!(r#"{{"id":"{key}","seq":{},"qty":{}}}"#, e.seq, e.seq % 97);
            let partition = (e.key % PARTITIONS as usize) as i32;
            (key, partition, (!e.delete).then_some(payload))
        })
        .collect();
    produce_keyed(topic, &messages);
}

/// The table's live keys with their `seq`, and its deleted keys.
async fn table_state(table: &str) -> HashMap<String, Option<usize>> {
    let mut conn = pg().await;
    let rows: Vec<(String, bool, Option<i64>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT key, deleted, (payload->>'seq')::bigint FROM {table}"
    )))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(key, deleted, seq)| {
            assert_eq!(deleted, seq.is_none(), "{key}: a delete keeps no payload");
            (key, seq.map(|s| s as usize))
        })
        .collect()
}

/// Compares the table with what the input says, key by key; names the first few wrong.
fn assert_final(table: &HashMap<String, Option<usize>>, want: &HashMap<String, Option<usize>>) {
    let mut wrong: Vec<String> = want
        .iter()
        .filter(|(k, v)| table.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: want {v:?}, table {:?}", table.get(k)))
        .collect();
    wrong.extend(
        table
            .keys()
            .filter(|k| !want.contains_key(*k))
            .map(|k| format!("{k}: not in the input")),
    );
    wrong.sort();
    assert!(
        wrong.is_empty(),
        "{} keys wrong, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

fn counts(out: &Output) -> (u64, u64, u64, u64, u64, u64) {
    assert!(out.status.success(), "worker failed: {}", stderr(out));
    let s = summary(out);
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
    assert_eq!(n("dead_lettered"), 0, "{s}");
    (
        n("pulled"),
        n("written"),
        n("deleted"),
        n("stale"),
        n("superseded"),
        n("duplicates"),
    )
}

/// Every attempt is checked whole (the newest version of every key, every record
/// accounted for); the scenario is run again when its kill forced no redelivery the guard
/// had to refuse (killed just after a commit, or with the victim's last batches superseded
/// in the redelivered ones: 0 stale in about one run in four), so that the guard is seen
/// at work at least once in three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_change_events_two_workers_one_killed_newest_version_wins() {
    let mut stale = Vec::new();
    for _ in 0..3 {
        stale.push(killed_mid_drain().await);
        if stale.last() > Some(&0) {
            return;
        }
    }
    panic!(
        "the guard refused versions older than the stored ones (batches finished out of order, redelivery): {stale:?} stale in three runs"
    );
}

/// Two daemons drain the change events, one is killed mid-run and started again; returns
/// how many redelivered versions the guard refused as stale.
async fn killed_mid_drain() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("sluice_upsert");
    let table = topic.replace('-', "_");
    create_topic(&topic, PARTITIONS as u32);
    let mut rng = StdRng::seed_from_u64(20);
    let events: Vec<Event> = (0..EVENTS)
        .map(|seq| Event {
            key: rng.random_range(0..KEYS),
            seq,
            delete: rng.random_bool(0.2),
        })
        .collect();
    let want = last_states(&events);
    // Each key's events go to partition key % 6 in order: their offsets follow.
    let mut ends = vec![0i64; PARTITIONS as usize];
    let mut last_offsets = HashMap::new();
    for e in &events {
        let p = e.key % PARTITIONS as usize;
        last_offsets.insert(format!("k{}", e.key), ends[p]);
        ends[p] += 1;
    }
    let started = Instant::now();
    {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce_events(&topic, &events))
            .await
            .unwrap();
    }
    let produced = started.elapsed();

    let config = write_config(
        dir.path(),
        &topic,
        &table,
        "key = \"@key\"\nmode = \"upsert\"\ndelete_on_tombstone = true\nmax_batch = 1000",
        "[concurrency]\nalgorithm = \"fixed\"\nmax = 8\n",
    );
    let body = std::fs::read_to_string(&config).unwrap().replace(
        "records_per_second = 100000",
        "records_per_second = 10000000",
    );
    std::fs::write(&config, body).unwrap();

    // Daemons, stopped once the group committed every offset: a worker leaving the group
    // at the end of its own --until-empty run would rebalance the other mid-run.
    let mut victim = start_worker(&config, &[]);
    let mut survivor = start_worker(&config, &[]);
    let victim_log = tee_stderr(&mut victim);
    let survivor_log = tee_stderr(&mut survivor);
    // Killed once both hold partitions: the victim's batches are in flight.
    for log in [&victim_log, &survivor_log] {
        wait_for_log(log, "partitions assigned", Duration::from_secs(60)).await;
    }
    wait_for_table(&table, Duration::from_secs(60)).await;
    wait_for_count(
        &format!("SELECT count(*) FROM {table}"),
        300,
        Duration::from_secs(60),
    )
    .await;
    kill_9(victim);
    let group = format!("{topic}-workers");
    let committed: i64 = committed_offsets(&topic, &group, PARTITIONS)
        .await
        .iter()
        .map(|o| o.max(&0))
        .sum();
    assert!(
        committed < EVENTS as i64,
        "killed mid-run: {committed} of {EVENTS} committed"
    );
    let mut restarted = start_worker(&config, &[]);
    let restarted_log = tee_stderr(&mut restarted);
    let deadline = Instant::now() + Duration::from_secs(180);
    while committed_offsets(&topic, &group, PARTITIONS).await != ends {
        assert!(
            Instant::now() < deadline,
            "not drained: committed {:?} of {ends:?}\nsurvivor:\n{}\nrestarted:\n{}",
            committed_offsets(&topic, &group, PARTITIONS).await,
            survivor_log.lock().unwrap(),
            restarted_log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drained = started.elapsed() - produced;
    let mut outs = Vec::new();
    for (worker, log) in [(survivor, &survivor_log), (restarted, &restarted_log)] {
        let pid = worker.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
        let pid = worker.id().expect("running");
        let out = tokio::time::timeout(Duration::from_secs(60), worker.wait_with_output())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "worker still running 60 s after SIGTERM:\n{}\nits threads:\n{}",
                    log.lock().unwrap(),
                    stacks(pid)
                )
            })
            .unwrap();
        assert!(out.status.success(), "{}", log.lock().unwrap());
        outs.push(out);
    }

    let mut stale = 0;
    for out in &outs {
        let (pulled, written, deleted, s, superseded, duplicates) = counts(out);
        assert_eq!(duplicates, 0, "upsert counts no duplicates");
        assert_eq!(
            pulled,
            written + deleted + s + superseded,
            "every record accounted for"
        );
        stale += s;
    }
    assert_final(&table_state(&table).await, &want);
    // The version kept is the offset of each key's last event: no older one won.
    let mut conn = pg().await;
    let versions: HashMap<String, i64> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT key, version::bigint FROM {table}"
    )))
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(versions, last_offsets);
    assert_eq!(high_watermarks(&topic, PARTITIONS).await, ends);
    let deleted_keys = want.values().filter(|v| v.is_none()).count();
    eprintln!(
        "upsert: {EVENTS} events over {KEYS} keys ({deleted_keys} deleted at the end) produced in {produced:.1?}, drained by 2 workers (one killed at {committed} committed) in {drained:.1?}; {stale} stale"
    );
    clean_up(&table, &topic).await;
    stale
}

/// Collects a running worker's stderr as it comes.
fn tee_stderr(child: &mut tokio::process::Child) -> Arc<Mutex<String>> {
    use tokio::io::AsyncBufReadExt;
    let err = child.stderr.take().expect("stderr is piped");
    let log = Arc::new(Mutex::new(String::new()));
    let into = log.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = into.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    log
}

async fn wait_for_log(log: &Mutex<String>, needle: &str, limit: Duration) {
    let started = Instant::now();
    while !log.lock().unwrap().contains(needle) {
        assert!(
            started.elapsed() < limit,
            "never logged {needle:?}: {}",
            log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn kill_9(mut child: tokio::process::Child) {
    child.start_kill().unwrap();
    drop(child);
}

/// Writes `events` as NDJSON with `updated_at` timestamps: each key's versions a minute
/// apart from a base, written in shuffled order, deletes flagged `"deleted": true`.
fn write_shuffled(path: &Path, rng: &mut StdRng, keys: usize, per_key: usize) -> Vec<Event> {
    let mut events: Vec<Event> = (0..keys * per_key)
        .map(|seq| Event {
            key: seq % keys,
            seq,
            delete: rng.random_bool(0.2),
        })
        .collect();
    for i in (1..events.len()).rev() {
        let j = rng.random_range(0..=i);
        events.swap(i, j);
    }
    let mut body = String::with_capacity(events.len() * 100);
    for e in &events {
        // seq / keys is the key's version number: later seq, later time.
        let minutes = e.seq / keys;
        body.push_str(&format!(
            "{{\"id\":\"k{}\",\"seq\":{},\"updated_at\":\"2024-03-01T{:02}:{:02}:00+00:00\",\"deleted\":{}}}\n",
            e.key,
            e.seq,
            minutes / 60,
            minutes % 60,
            e.delete
        ));
    }
    std::fs::write(path, body).unwrap();
    events.sort_by_key(|e| e.seq);
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_versions_by_timestamp_arrive_shuffled_newest_wins() {
    let dir = tempfile::tempdir().unwrap();
    let table = unique("sluice_upsert_file").replace('-', "_");
    let input = dir.path().join("changes.ndjson");
    let mut rng = StdRng::seed_from_u64(21);
    let events = write_shuffled(&input, &mut rng, 1_000, 20);
    let want = last_states(&events);
    // A version that cannot be read, and one of another kind than the table's.
    let mut body = std::fs::read_to_string(&input).unwrap();
    body.push_str("{\"id\":\"k1\",\"seq\":-1,\"updated_at\":\"yesterday\"}\n");
    body.push_str("{\"id\":\"k2\",\"seq\":-2,\"updated_at\":99999999999}\n");
    std::fs::write(&input, body).unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = {input:?}\n\n\
             [sink]\nkind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"\nkey = \"/id\"\n\
             mode = \"upsert\"\nversion = \"/updated_at\"\ndelete_flag = \"/deleted\"\nmax_batch = 500\n\n\
             [rate]\nrecords_per_second = 10000000\n\n\
             [concurrency]\nalgorithm = \"fixed\"\nmax = 8\n",
            pg_url()
        ),
    )
    .unwrap();

    let victim = start_worker(&config, &["--until-empty"]);
    wait_for_table(&table, Duration::from_secs(60)).await;
    wait_for_count(
        &format!("SELECT count(*) FROM {table}"),
        100,
        Duration::from_secs(60),
    )
    .await;
    kill_9(victim);
    let rerun = finish(
        start_worker(&config, &["--until-empty"]),
        Duration::from_secs(120),
    )
    .await;
    assert!(rerun.status.success(), "rerun failed: {}", stderr(&rerun));
    let s = summary(&rerun);
    eprintln!("upsert from a file, after a kill -9: the rerun's summary {s}");
    assert!(s["stale"].as_u64().unwrap() > 0, "{s}");
    assert_final(&table_state(&table).await, &want);
    let mut conn = pg().await;
    let reasons: Vec<String> = sqlx::query_scalar(
        "SELECT reason FROM sluice_dead_letters WHERE target = $1 ORDER BY reason",
    )
    .bind(&table)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].starts_with("mixed versions"), "{reasons:?}");
    assert!(
        reasons[1].contains("version /updated_at is neither"),
        "{reasons:?}"
    );
    pg_execute(&format!(
        "DELETE FROM sluice_dead_letters WHERE target = '{table}'; \
         DELETE FROM sluice_version_kinds WHERE target = '{table}'; DROP TABLE {table}"
    ))
    .await;
}

/// An existing table through `[sink.columns]`: the mapped columns are updated only by a
/// newer version, a delete sets the flag, and insert mode on the same table is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapped_columns_take_only_newer_versions() {
    let dir = tempfile::tempdir().unwrap();
    let table = unique("sluice_upsert_mapped").replace('-', "_");
    pg_execute(&format!(
        "CREATE TABLE {table} (sku text PRIMARY KEY, level int, rev bigint, gone boolean NOT NULL DEFAULT false)"
    ))
    .await;
    let input = dir.path().join("stock.ndjson");
    std::fs::write(
        &input,
        "{\"sku\":\"a\",\"level\":5,\"rev\":2}\n\
         {\"sku\":\"a\",\"level\":9,\"rev\":3}\n\
         {\"sku\":\"a\",\"level\":1,\"rev\":1}\n\
         {\"sku\":\"b\",\"level\":7,\"rev\":10}\n\
         {\"sku\":\"b\",\"rev\":11,\"gone\":true}\n\
         {\"sku\":\"b\",\"level\":6,\"rev\":9}\n\
         {\"sku\":\"c\",\"level\":4,\"rev\":1}\n",
    )
    .unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = {input:?}\n\n\
             [sink]\nkind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"\nkey = \"/sku\"\n\
             key_column = \"sku\"\nmode = \"upsert\"\nversion = \"/rev\"\nversion_column = \"rev\"\n\
             delete_flag = \"/gone\"\ndeleted_column = \"gone\"\nmax_batch = 2\n\n\
             [sink.columns]\nlevel = \"/level\"\n",
            pg_url()
        ),
    )
    .unwrap();
    let out = finish(
        start_worker(&config, &["--until-empty"]),
        Duration::from_secs(60),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    let n = |k: &str| s[k].as_u64().unwrap();
    assert_eq!(n("deleted"), 1, "{s}");
    assert_eq!(
        n("written") + n("deleted") + n("stale") + n("superseded"),
        7,
        "{s}"
    );
    let mut conn = pg().await;
    let rows: Vec<(String, Option<i32>, i64, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT sku, level, rev, gone FROM {table} ORDER BY sku"
    )))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            ("a".into(), Some(9), 3, false),
            ("b".into(), None, 11, true),
            ("c".into(), Some(4), 1, false),
        ]
    );
    pg_execute(&format!(
        "DELETE FROM sluice_version_kinds WHERE target = '{table}'; DROP TABLE {table}"
    ))
    .await;
}
