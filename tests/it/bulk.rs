//! Sinks that take part of a batch: the real `sluice run` binary against `sim-sink --bulk`
//! (Elasticsearch `_bulk` answers: 429 items when the write queue is full, 400 items for a
//! mapping error) and against tiny in-test servers answering as Kinesis PutRecords and
//! DynamoDB BatchWriteItem do. Every record must land once, none acknowledged that the sink
//! refused, and only refused records go again.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sluice::sim_sink::{SimSink, SimSinkSettings};

/// No run may take longer than this, however loaded the machine.
const RUN_LIMIT: Duration = Duration::from_secs(180);

struct Run {
    code: Option<i32>,
    summary: Value,
    stderr: String,
}

fn command(config: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["run", "--until-empty", "--summary", "json", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, _) in std::env::vars() {
        if name.starts_with("SLUICE_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

async fn run_sluice(config: &Path) -> Run {
    run_command(command(config)).await
}

async fn run_command(mut command: tokio::process::Command) -> Run {
    let output = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .expect("sluice run finished in time")
        .expect("sluice run started");
    Run {
        code: output.status.code(),
        summary: serde_json::from_str(String::from_utf8_lossy(&output.stdout).trim())
            .unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn count(run: &Run, field: &str) -> u64 {
    run.summary[field]
        .as_u64()
        .unwrap_or_else(|| panic!("summary has no {field}: {}\n{}", run.summary, run.stderr))
}

/// `n` records keyed `/id` = "k0".."k{n-1}"; those at `unmapped` carry a field the emulated
/// mapping refuses (`bad` for the in-test servers).
fn write_input(dir: &Path, n: usize, unmapped: &[usize], field: &str) -> PathBuf {
    let path = dir.join("in.ndjson");
    let mut text = String::new();
    for i in 0..n {
        let mut record =
            json!({"id": format!("k{i}"), "amount": i * 3, "note": "0123456789abcdef"});
        if unmapped.contains(&i) {
            record[field] = json!("not a number");
        }
        text.push_str(&record.to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn write_config(dir: &Path, input: &Path, sink: &str, rate: u32) -> PathBuf {
    write_config_ticking(dir, input, sink, rate, "200ms")
}

fn write_config_ticking(dir: &Path, input: &Path, sink: &str, rate: u32, tick: &str) -> PathBuf {
    let path = dir.join("sluice.toml");
    let dead = dir.join("dead.ndjson");
    let text = format!(
        "[source]\nkind = \"file\"\npath = {input:?}\n\n[sink]\nkey = \"/id\"\ntimeout = \"10s\"\n{sink}\n\n\
         [sink.dead_letters]\npath = {dead:?}\n\n[rate]\nrecords_per_second = {rate}\ntick = \"{tick}\"\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Keys and reasons of the dead letters.
fn dead_letters(dir: &Path) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(dir.join("dead.ndjson")) else {
        return Vec::new();
    };
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["key"].as_str().unwrap().to_string(),
                v["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn keys_except(n: usize, except: &[usize]) -> Vec<String> {
    let mut keys: Vec<String> = (0..n)
        .filter(|i| !except.contains(i))
        .map(|i| format!("k{i}"))
        .collect();
    keys.sort();
    keys
}

async fn bulk_sim(capacity: f64, queue: u32) -> SimSink {
    let mut config = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), capacity);
    config.bulk = true;
    config.burst = queue;
    config.reject_field = Some("price".into());
    SimSink::start(config).await.unwrap()
}

fn elasticsearch(url: &str) -> String {
    format!(
        "kind = \"elasticsearch\"\nurl = \"{url}\"\nmax_batch = 200\n\n[sink.elasticsearch]\nindex = \"orders\"\nop = \"create\""
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_times_the_write_queue_every_document_once_only_refused_items_again() {
    four_times_the_write_queue(2000, "200ms", None).await;
}

/// The bound on what overload costs: records sent / delivered ≤ 1.10, at a fine
/// cadence (measured 1.001-1.014).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_times_the_write_queue_costs_at_most_ten_percent_more_sends() {
    four_times_the_write_queue(6000, "20ms", Some(1.10)).await;
}

/// At the default 200 ms tick the same bound. A tick's 800 records used to go as four
/// requests of 200 at once into the queue of 200 (~570 items refused before any answer
/// could tell: 1.13-1.35 in all); slow start meets the queue from 100 a tick, in parts
/// spread across the tick (measured 1.077-1.078, 6.9 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_times_the_write_queue_at_coarse_ticks_costs_at_most_ten_percent_more_sends() {
    four_times_the_write_queue(6000, "200ms", Some(1.10)).await;
}

/// `n` documents at 4,000/s into a queue of 200 drained at 1,000/s, one in 97 refused by
/// the mapping, at `tick`; `bound`: the most records sent / delivered may be.
async fn four_times_the_write_queue(n: usize, tick: &str, bound: Option<f64>) {
    let dir = tempfile::tempdir().unwrap();
    let sim = bulk_sim(1000.0, 200).await;
    let unmapped: Vec<usize> = (0..n).filter(|i| i % 97 == 13).collect();
    let input = write_input(dir.path(), n, &unmapped, "price");
    let sink = elasticsearch(&sim.base_url());
    let config = write_config_ticking(dir.path(), &input, &sink, 4000, tick);
    let run = run_sluice(&config).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let good = (n - unmapped.len()) as u64;
    assert_eq!(count(&run, "written"), good, "{}", run.summary);
    assert_eq!(count(&run, "dead_lettered"), unmapped.len() as u64);
    assert_eq!(count(&run, "duplicates"), 0);
    assert!(
        count(&run, "throttled_records") > 0,
        "the scenario must refuse items: {}",
        run.summary
    );

    let stats = sim.stop().await.unwrap();
    assert_eq!(stats.inserted, good, "every document stored");
    assert_eq!(stats.duplicates, 0, "none sent again after it was taken");
    assert_eq!(
        stats.unmapped,
        unmapped.len() as u64,
        "each unmapped one sent once"
    );
    let dead = dead_letters(dir.path());
    let dead_keys: BTreeSet<&str> = dead.iter().map(|(k, _)| k.as_str()).collect();
    let expected: BTreeSet<String> = unmapped.iter().map(|i| format!("k{i}")).collect();
    assert_eq!(
        dead_keys,
        expected.iter().map(String::as_str).collect(),
        "mapping errors dead-lettered"
    );
    assert!(
        dead.iter().all(|(_, r)| r
            .starts_with("HTTP 400 mapper_parsing_exception: failed to parse field [price]")),
        "{dead:?}"
    );
    let ratio = stats.records_received as f64 / (stats.inserted + stats.unmapped) as f64;
    eprintln!(
        "bulk at 4x: sent/delivered {ratio:.3} ({} sent, {} refused in {} requests of {}), {} s",
        stats.records_received,
        stats.rejected_records,
        stats.rejected,
        stats.requests,
        run.summary["elapsed_s"]
    );
    if let Some(bound) = bound {
        assert!(ratio <= bound, "records sent / delivered = {ratio:.3}");
    }
}

/// Starts `sluice run` with `config` and kills it (SIGKILL: no checkpoint written on the
/// way out) once `sim` has stored `stored` documents; returns what it had stored then.
async fn killed_once_stored(config: &Path, sim: &SimSink, stored: u64) -> u64 {
    let mut child = command(config).spawn().unwrap();
    let started = std::time::Instant::now();
    while sim.stats().inserted < stored {
        assert!(started.elapsed() < RUN_LIMIT, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().await.unwrap();
    sim.stats().inserted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_run_and_run_again_every_document_once() {
    let dir = tempfile::tempdir().unwrap();
    let sim = bulk_sim(1500.0, 300).await;
    let n = 4000;
    let input = write_input(dir.path(), n, &[], "price");
    let config = write_config(dir.path(), &input, &elasticsearch(&sim.base_url()), 3000);
    let stored_at_kill = killed_once_stored(&config, &sim, 1000).await;
    assert!(stored_at_kill < n as u64, "killed mid-run");

    let run = run_sluice(&config).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let written = count(&run, "written");
    let duplicates = count(&run, "duplicates");
    let stats = sim.stop().await.unwrap();
    assert_eq!(stats.inserted, n as u64, "every key stored");
    assert_eq!(stats.inserted, keys_except(n, &[]).len() as u64);
    // The rerun wrote the rest; what the first run stored past its checkpoint came back
    // as 409s on `create`, counted as duplicates, never as a second document.
    assert_eq!(written + stored_at_kill, n as u64, "{}", run.summary);
    assert_eq!(duplicates, stats.duplicates, "{}", run.summary);
    eprintln!(
        "killed at {stored_at_kill} stored; the rerun wrote {written}, {duplicates} duplicates"
    );
}

/// The bound across a restart: at 4× the write queue and the default 200 ms tick, killed
/// (SIGKILL) a third of the way in and run again, items sent per document stay ≤ 1.12 in
/// all, not counting the documents the first run stored past its checkpoint, which the
/// second sends again (they come back as 409s on `create`) — exactly those, no more: the
/// checkpoint is saved every 250 ms, so one or two batches of 200 come back (187–386
/// measured), which on top of the refusals (400–588) put the sum over 1.15, the bound
/// before, in one run of eight; past them, 1.066–1.098 in eighteen. The second run meets
/// the queue as the first did, by slow start, not at the rate it was killed at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_times_the_write_queue_killed_and_run_again_costs_at_most_twelve_percent() {
    let n = 6000;
    let dir = tempfile::tempdir().unwrap();
    let sim = bulk_sim(1000.0, 200).await;
    let input = write_input(dir.path(), n, &[], "price");
    let config = write_config(dir.path(), &input, &elasticsearch(&sim.base_url()), 4000);
    let stored_at_kill = killed_once_stored(&config, &sim, 2000).await;
    assert!(stored_at_kill < n as u64, "killed mid-run");
    // The lines before the one the checkpoint names (counted from 1): acknowledged.
    let checkpointed = crate::common::checkpoint_files(&input)[0]["line"]
        .as_u64()
        .expect("a checkpointed line")
        - 1;

    let run = run_sluice(&config).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let stats = sim.stop().await.unwrap();
    assert_eq!(stats.inserted, n as u64, "every document stored");
    // What the first run stored, counted after it was gone (a request it sent may have
    // been stored after the kill): all the second did not write.
    let first_stored = n as u64 - count(&run, "written");
    assert_eq!(
        stats.duplicates,
        first_stored - checkpointed,
        "sent again: what the first run stored past its checkpoint (line {checkpointed} of the {first_stored} it stored)"
    );
    let ratio = (stats.records_received - stats.duplicates) as f64 / n as f64;
    eprintln!(
        "bulk at 4x, killed at {stored_at_kill} and run again: items sent per document {ratio:.3} past the {} sent again ({} sent, {} refused)",
        stats.duplicates, stats.records_received, stats.rejected_records
    );
    assert!(ratio <= 1.12, "items sent per document = {ratio:.3}");
}

/// What an in-test ingest API stored: each key with the times it was stored.
type Stored = Arc<Mutex<HashMap<String, u32>>>;

/// Serves `POST /` with sluice's envelope array; takes the first `room` records of each
/// request that lack a `bad` field, and answers with `answer(outcomes)`, where each
/// outcome is (key, "ok" | "throttled" | "bad").
async fn partial_server(
    room: usize,
    answer: fn(&[(String, &'static str)]) -> Value,
) -> (String, Stored, tokio::task::JoinHandle<()>) {
    let stored: Stored = Arc::default();
    let state = stored.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |axum::Json(batch): axum::Json<Vec<Value>>| {
            let stored = state.clone();
            async move {
                let mut taken = 0;
                let outcomes: Vec<(String, &'static str)> = batch
                    .iter()
                    .map(|e| {
                        let key = e["key"].as_str().unwrap().to_string();
                        if e["record"].get("bad").is_some() {
                            (key, "bad")
                        } else if taken < room {
                            taken += 1;
                            *stored.lock().unwrap().entry(key.clone()).or_default() += 1;
                            (key, "ok")
                        } else {
                            (key, "throttled")
                        }
                    })
                    .collect();
                axum::Json(answer(&outcomes))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, stored, task)
}

fn kinesis(outcomes: &[(String, &'static str)]) -> Value {
    let records: Vec<Value> = outcomes
        .iter()
        .enumerate()
        .map(|(i, (_, o))| match *o {
            "ok" => json!({"SequenceNumber": format!("4954346307654800757710509270303956035997522851839501{i:04}"), "ShardId": "shardId-000000000000"}),
            "throttled" => json!({"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded for shard shardId-000000000000 in stream orders under account 111111111111."}),
            _ => json!({"ErrorCode": "ValidationException", "ErrorMessage": "record has a bad field"}),
        })
        .collect();
    let failed = outcomes.iter().filter(|(_, o)| *o != "ok").count();
    json!({"FailedRecordCount": failed, "Records": records})
}

fn dynamodb(outcomes: &[(String, &'static str)]) -> Value {
    // BatchWriteItem lists the requests it did not process; a bad item it would refuse
    // whole (ValidationException), which this test leaves to the Kinesis case.
    let unprocessed: Vec<Value> = outcomes
        .iter()
        .filter(|(_, o)| *o != "ok")
        .map(|(k, _)| json!({"PutRequest": {"Item": {"id": {"S": k}}}}))
        .collect();
    if unprocessed.is_empty() {
        json!({"UnprocessedItems": {}})
    } else {
        json!({"UnprocessedItems": {"Orders": unprocessed}})
    }
}

async fn partial_case(
    answer: fn(&[(String, &'static str)]) -> Value,
    contract: &str,
    bad: &[usize],
) {
    let dir = tempfile::tempdir().unwrap();
    let (url, stored, server) = partial_server(30, answer).await;
    let n = 1000;
    let input = write_input(dir.path(), n, bad, "bad");
    let sink =
        format!("kind = \"http\"\nurl = \"{url}\"\nmax_batch = 100\n\n[sink.response]\n{contract}");
    let config = write_config(dir.path(), &input, &sink, 2000);
    let run = run_sluice(&config).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let stored = stored.lock().unwrap().clone();
    let mut keys: Vec<String> = stored.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, keys_except(n, bad), "every good record stored");
    assert!(stored.values().all(|t| *t == 1), "none stored twice");
    assert_eq!(count(&run, "written"), (n - bad.len()) as u64);
    assert!(count(&run, "throttled_records") > 0, "{}", run.summary);
    let dead: BTreeSet<String> = dead_letters(dir.path())
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(dead, bad.iter().map(|i| format!("k{i}")).collect());
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_style_error_codes_retry_only_the_throttled_records() {
    partial_case(
        kinesis,
        "results = \"/Records\"\nstatus = \"/ErrorCode\"\nmessage = \"/ErrorMessage\"\n\
         throttled = [\"ProvisionedThroughputExceededException\"]\npermanent = [\"ValidationException\"]",
        &[5, 250, 999],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_style_unprocessed_items_are_sent_again_alone() {
    partial_case(
        dynamodb,
        "results = \"/UnprocessedItems/Orders\"\nid = \"/PutRequest/Item/id/S\"\nabsent = \"throttled\"",
        &[],
    )
    .await;
}

/// What a drain into a cluster refusing documents at random did.
struct RandomRefusals {
    per_second: f64,
    items_per_document: f64,
    /// The worker's push-backs: the rate cut (and the learned limit with it).
    cuts: usize,
    /// The push-backs found not the rate's doing, and undone.
    restored: usize,
    /// Push-backs after the first was undone.
    cuts_after_restored: usize,
}

/// Drains `n` documents at 5,000/s into a cluster with room for all that refuses `share`
/// of them at random.
async fn refused_at_random(share: f64, n: usize) -> RandomRefusals {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 1_000_000.0);
    config.bulk = true;
    config.burst = 1_000_000;
    config.refuse_share = share;
    let sim = SimSink::start(config).await.unwrap();
    let input = write_input(dir.path(), n, &[], "price");
    let sink = format!(
        "kind = \"elasticsearch\"\nurl = \"{}\"\n\n[sink.elasticsearch]\nindex = \"orders\"",
        sim.base_url()
    );
    let config = write_config(dir.path(), &input, &sink, 5000);
    let mut cmd = command(&config);
    cmd.env("SLUICE_LOG", "info,sluice::write::backpressure=debug");
    let run = run_command(cmd).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(count(&run, "written"), n as u64, "{}", run.summary);
    let stats = sim.stop().await.unwrap();
    assert_eq!(stats.inserted, n as u64);
    let elapsed = run.summary["elapsed_s"].as_f64().unwrap();
    let (cut, restored) = ("sink limit (per second)", "rate restored");
    let lines = |what: &str| run.stderr.lines().filter(|l| l.contains(what)).count();
    let drain = RandomRefusals {
        per_second: n as f64 / elapsed,
        items_per_document: stats.records_received as f64 / n as f64,
        cuts: lines(cut),
        restored: lines(restored),
        cuts_after_restored: run
            .stderr
            .lines()
            .skip_while(|l| !l.contains(restored))
            .filter(|l| l.contains(cut))
            .count(),
    };
    eprintln!(
        "{:.0}% refused at random: {n} documents in {elapsed:.2} s ({:.0}/s), {:.3} items sent per document, {} cuts, {} restored, {} cuts after",
        share * 100.0,
        drain.per_second,
        drain.items_per_document,
        drain.cuts,
        drain.restored,
        drain.cuts_after_restored,
    );
    drain
}

/// A cluster refusing a share of documents whatever the rate (one busy node among idle
/// ones): the refused ones are resent, and the rate is not drained for them. Each answer
/// that refused anything was a full throttle: at 1%, 2,073 documents/s where 4,153 went
/// with none refused; at 20%, 159/s; at 50%, 3/s. Then, at 20%, the sink's own share was
/// ratcheted down to a second's lowest draw and the rate cut again every 1.6 s (4 cuts
/// undone in one 8 s drain; its speed varied 2.7x run to run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_refused_at_random_are_resent_without_draining_the_rate() {
    let few = refused_at_random(0.01, 5000).await;
    let fifth = refused_at_random(0.2, 10_000).await;
    // 1% is under the noise: no push-back (one if the first few dozen items of the slow
    // start drew 4 refusals or more: 1 run in 250).
    assert!(few.cuts <= 1, "1%: {} cuts", few.cuts);
    assert!(few.items_per_document < 1.03, "{}", few.items_per_document);
    // 20%: pushed back (a cut per round of answers) until the share is seen not to fall
    // with the rate; then restored, and no push-back again.
    assert_eq!(fifth.restored, 1, "20%: restored {} times", fifth.restored);
    // The cuts are counted by their debug line: none seen would mean that line changed,
    // not that nothing was cut (the first push-back comes before the restore).
    assert!(fifth.cuts >= 1, "20%: no cut logged");
    assert_eq!(fifth.cuts_after_restored, 0, "20%: cut again");
    assert!(
        fifth.items_per_document < 1.3,
        "{}",
        fifth.items_per_document
    );
}

/// Refusing most documents is no share the worker keeps sending into: it backs off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_refusing_most_documents_is_backed_off() {
    let none = refused_at_random(0.0, 2000).await;
    let most = refused_at_random(0.8, 200).await;
    assert!(
        most.per_second <= 0.25 * none.per_second,
        "80%: {:.0}/s against {:.0}/s",
        most.per_second,
        none.per_second
    );
}
