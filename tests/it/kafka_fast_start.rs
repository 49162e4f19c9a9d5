//! One-shot Kafka loads that start fast: `--until-empty --direct-assignment` takes the
//! topic's partitions without a group join, commits to the group (so a daemon resumes
//! where it stopped), and is refused while the group has an active member. Prints the
//! time from process start to the first row written and the whole-run vs draining rates;
//! 1,000,000 records (and the group-join path for comparison) run with `--ignored`.

use crate::kafka_pg_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use kafka_pg_support::*;

const LIMIT: Duration = Duration::from_secs(300);

struct Load {
    first_row: Duration,
    whole_run: f64,
    draining: Option<f64>,
}

/// Drains the prepared topic into `table`, timing the first row PostgreSQL shows.
async fn load(config: &std::path::Path, table: &str, records: usize, args: &[&str]) -> Load {
    let started = Instant::now();
    let worker = sluice()
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(["--until-empty", "--summary", "json"])
        .args(args)
        .env("SLUICE_SINK__TABLE", table)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_table(table, LIMIT).await;
    let mut conn = pg().await;
    let any = format!("SELECT EXISTS (SELECT 1 FROM {table})");
    loop {
        let seen: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(any.clone()))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        if seen {
            break;
        }
        assert!(started.elapsed() < LIMIT, "no row written");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first_row = started.elapsed();
    let out = finish(worker, LIMIT).await;
    let wall = started.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["written"], records, "{s}");
    assert_eq!(s["remaining"], 0, "{s}");
    assert_eq!(
        pg_count(&format!("SELECT count(*) FROM {table}")).await,
        records as i64
    );
    Load {
        first_row,
        whole_run: records as f64 / wall.as_secs_f64(),
        draining: drain_rate(table, records).await,
    }
}

fn show(path: &str, records: usize, l: &Load) {
    eprintln!(
        "fast start: {path}, {records} records: first row after {:.0} ms; whole run {:.0} rec/s; draining {}",
        l.first_row.as_secs_f64() * 1000.0,
        l.whole_run,
        l.draining
            .map_or("— (one batch)".into(), |r| format!("{r:.0} rec/s"))
    );
}

async fn measure(records: usize, compare_with_group: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (topic, config, _) = prepare(dir.path(), "fast_start", records, 4).await;
    let table = format!("{topic}_direct");
    let direct = load(&config, &table, records, &["--direct-assignment"]).await;
    show("--direct-assignment", records, &direct);
    // The group holds the job's progress: a daemon started now resumes at the end.
    let ends = high_watermarks(&topic, 4).await;
    assert_eq!(
        committed_offsets(&topic, &format!("{topic}-workers"), 4).await,
        ends,
        "committed to the group"
    );
    pg_execute(&format!("DROP TABLE {table}")).await;
    if compare_with_group {
        let table = format!("{topic}_group");
        let body = std::fs::read_to_string(&config)
            .unwrap()
            .replace("-workers\"", "-joiners\"");
        std::fs::write(&config, body).unwrap();
        let joined = load(&config, &table, records, &[]).await;
        show("group join", records, &joined);
        pg_execute(&format!("DROP TABLE {table}")).await;
    }
    delete_topic(&topic);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_assignment_load_starts_at_once_and_commits_to_the_group() {
    measure(100_000, false).await;
}

/// `cargo test --release --test it kafka_fast_start:: -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: 1,000,000 records, and the group-join path for comparison"]
async fn direct_assignment_against_a_group_join_at_100k_and_1m() {
    measure(100_000, true).await;
    measure(1_000_000, true).await;
}

/// A daemon holds the group's partitions: a direct load would read beside it, so it is
/// refused with exit 2, naming the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_assignment_is_refused_while_the_group_has_a_member() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("fast_refused");
    let table = topic.clone();
    create_topic(&topic, 2);
    let config = write_config(dir.path(), &topic, &table, "key = \"/id\"", "");
    load_topic(&config, dir.path(), 100, &[]).await;
    let daemon = sluice()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The daemon has joined and committed (some brokers, Tansu among them, describe a
    // group only once it has committed offsets).
    wait_for_table(&table, LIMIT).await;
    assert_eq!(
        wait_for_count(&format!("SELECT count(*) FROM {table}"), 100, LIMIT).await,
        100
    );
    let started = Instant::now();
    while committed_offsets(&topic, &format!("{topic}-workers"), 2)
        .await
        .iter()
        .sum::<i64>()
        < 100
    {
        assert!(started.elapsed() < LIMIT, "the daemon never committed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = sluice()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .args(["--until-empty", "--direct-assignment", "--summary", "json"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("1 active member"), "{}", stderr(&out));
    assert!(
        summary(&out)["error"]
            .as_str()
            .unwrap()
            .contains("--direct-assignment")
    );
    drop(daemon);
    let wrong = sluice()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--direct-assignment")
        .output()
        .await
        .unwrap();
    assert_eq!(
        wrong.status.code(),
        Some(2),
        "a daemon cannot take every partition"
    );
    clean_up(&table, &topic).await;
}
