//! The canary probe against the real PostgreSQL and MariaDB: `sluice plan` measures its
//! baseline over one window and resolves a relative target; a run with `rate = "auto"`
//! measures the baseline before its first write, steers by the target and says what
//! bounded it; each run is timed from when it was due; and the canary's query runs READ
//! ONLY whatever it says.

use crate::common;

use std::path::Path;

use common::pg::*;
use common::*;

fn mysql_url() -> String {
    std::env::var("SLUICE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://sluice:sluice@127.0.0.1:3306/sluice_test".into())
}

/// A file (`records` lines) → PostgreSQL config at `db` with this canary probe.
fn config(dir: &Path, db: &Db, rate: &str, records: usize, probe: &str) {
    write_records(&dir.join("in.ndjson"), records, &[]);
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"postgres\"\nurl = {:?}\ntable = \"records\"\nkey = \"/id\"\n\n\
             [rate]\nrecords_per_second = {rate}\n\n\
             [[health.probe]]\nbuiltin = \"canary\"\n{probe}\n",
            db.url
        ),
    )
    .unwrap();
}

/// What `sluice plan --json` says of the configuration in `dir`.
fn planned(dir: &Path) -> serde_json::Value {
    let out = run_in(dir, &["plan", "-c", "sluice.toml", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The baseline `sluice plan` measured for the configuration's canary, seconds.
fn planned_baseline(dir: &Path) -> f64 {
    planned(dir)["health"][0]["baseline"]
        .as_f64()
        .expect("a baseline")
}

#[test]
fn plan_measures_the_baseline_and_resolves_a_relative_target() {
    let db = Db::create("canary_plan");
    let dir = tempfile::tempdir().unwrap();
    for url in [db.url.clone(), mysql_url()] {
        config(
            dir.path(),
            &db,
            "\"auto\"",
            10,
            &format!("url = {url:?}\ntarget = \"2x\"\nwindow = \"600ms\""),
        );
        let plan = planned(dir.path());
        let canary = &plan["health"][0];
        let baseline = canary["baseline"].as_f64().expect("a baseline");
        assert!(baseline > 0.0 && baseline < 1.0, "{canary}");
        assert_eq!(canary["target"].as_f64(), Some(2.0 * baseline), "{canary}");
        assert_eq!(canary["baseline_age_s"], 0.0);
        assert_eq!(canary["holds"], false, "{canary}");
        assert!(plan["worker_rate"].is_null(), "no ceiling of ours: {plan}");
        let text = run_in(dir.path(), &["plan", "-c", "sluice.toml"]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("measured now"), "{text}");
    }
}

/// A canary's runs are timed from when each was due, as production's clients time theirs:
/// a 100 ms query due every 50 ms on average queues behind itself, and its baseline reads
/// that wait. Timed from when it was sent, it read the query's 100 ms alone. (A simulation
/// of these two 2 s windows put the baseline at 266 ms at the least in 100,000; a run is
/// never more than a window late, and its own time is at most the 1 s timeout.)
#[test]
fn a_canary_run_is_timed_from_when_it_was_due() {
    let db = Db::create("canary_due");
    let dir = tempfile::tempdir().unwrap();
    for (url, sleep) in [
        (db.url.clone(), "SELECT pg_sleep(0.1)"),
        (mysql_url(), "SELECT SLEEP(0.1)"),
    ] {
        config(
            dir.path(),
            &db,
            "\"auto\"",
            10,
            &format!(
                "url = {url:?}\nquery = {sleep:?}\ntarget = \"2x\"\ninterval = \"50ms\"\nwindow = \"2s\""
            ),
        );
        let baseline = planned_baseline(dir.path());
        assert!(
            (0.2..3.5).contains(&baseline),
            "{url}: baseline {baseline} s"
        );
    }
}

/// A new backend's first query is not a canary run, and the run that opened the
/// connection does not queue the next behind it: here the query sleeps 300 ms while its
/// backend is younger than 200 ms, and 1 ms after. Sixteen runs make the baseline, whose
/// p99 is their slowest: without the untimed first query it read the 300 ms, and without
/// the schedule starting again once the connection is open, the next run's wait for it.
#[test]
fn a_new_connections_first_query_is_not_a_canary_run() {
    let db = Db::create("canary_warm");
    let dir = tempfile::tempdir().unwrap();
    let query = "SELECT pg_sleep(CASE WHEN now() - (SELECT backend_start FROM pg_stat_activity \
                 WHERE pid = pg_backend_pid()) < interval '200 milliseconds' THEN 0.3 ELSE 0.001 END)";
    config(
        dir.path(),
        &db,
        "\"auto\"",
        10,
        &format!("query = {query:?}\ntarget = \"2x\"\ninterval = \"50ms\"\nwindow = \"400ms\""),
    );
    let baseline = planned_baseline(dir.path());
    assert!(baseline < 0.2, "baseline {baseline} s");
}

#[test]
fn an_auto_run_measures_the_baseline_before_writing_and_says_what_bounded_it() {
    let db = Db::create("canary_run");
    let dir = tempfile::tempdir().unwrap();
    config(
        dir.path(),
        &db,
        "\"auto\"",
        2_000,
        "target = \"2x\"\nwindow = \"1s\"",
    );
    let out = sluice()
        .current_dir(dir.path())
        .args(DRAIN)
        .env("SLUICE_LOG", "info")
        .output()
        .unwrap();
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    let s = summary(&out);
    assert_eq!(s["written"], 2_000, "{s}");
    assert_eq!(db.count("SELECT count(*) FROM records"), 2_000);
    // The baseline first, then the first write.
    let baseline = log.find("baseline p99 =").expect(&log);
    assert!(
        log[baseline..].contains("the rate is steered to keep it under"),
        "{log}"
    );
    let bounds: Vec<&str> = s["bounded_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["by"].as_str().unwrap())
        .collect();
    assert!(
        bounds.contains(&"canary (held)"),
        "the baseline's window: {s}"
    );
    assert!(!bounds.contains(&"rate.records_per_second"), "{s}");
}

#[test]
fn a_canary_changes_nothing_whatever_its_query_says() {
    let db = Db::create("canary_ro");
    let dir = tempfile::tempdir().unwrap();
    config(
        dir.path(),
        &db,
        "100",
        10,
        "query = \"CREATE TABLE canary_wrote (x int)\"\nmax = \"1s\"",
    );
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("read-only"), "{text}");
    assert_eq!(
        db.count("SELECT count(*) FROM pg_tables WHERE tablename = 'canary_wrote'"),
        0
    );
}

/// The database gets slower on its own (here: the canary's query sleeps 20 ms instead of
/// 1 ms once the table holds a record, as a baseline read in a quiet spell looks): the
/// steering cuts to its least rate and stays over the target there, so the canary
/// measures its baseline again with the writes held, and the load goes on steered under
/// the new one. Before, it crawled at 10 rec/s to the end (here: over half an hour).
#[test]
fn a_baseline_the_database_no_longer_meets_is_measured_again() {
    const RECORDS: usize = 20_000;
    let db = Db::create("canary_again");
    db.records_table();
    let dir = tempfile::tempdir().unwrap();
    config(
        dir.path(),
        &db,
        "\"auto\"",
        RECORDS,
        "query = \"SELECT pg_sleep(CASE WHEN EXISTS (SELECT 1 FROM records) THEN 0.02 ELSE 0.001 END)\"\n\
         target = \"2x\"\nwindow = \"400ms\"\ninterval = \"50ms\"",
    );
    let child = sluice()
        .current_dir(dir.path())
        .args(DRAIN)
        .env("SLUICE_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(child, std::time::Duration::from_secs(120));
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert_eq!(summary(&out)["written"], RECORDS, "{log}");
    assert_eq!(db.count("SELECT count(*) FROM records"), RECORDS as i64);
    let again = log
        .find("measuring the baseline again with the writes held")
        .unwrap_or_else(|| panic!("no second baseline: {log}"));
    let second = &log[again..];
    let at = second
        .find("with the writes held (it was")
        .unwrap_or_else(|| panic!("{log}"));
    // "baseline p99 = 20.xx ms, of 2 windows of 400ms, with the writes held (it
    // was 1.xx ms)"
    let line = second[..at].rsplit("baseline p99 = ").next().unwrap();
    let ms: f64 = line.split(' ').next().unwrap().parse().unwrap();
    // The sleep's 20 ms, and a run's wait behind the one before when it was due during it
    // (runs arrive at random, 50 ms apart on average): a simulation of these windows put
    // the baseline over 100 ms once in a thousand, never over 160 ms in 100,000.
    assert!(
        (20.0..200.0).contains(&ms),
        "second baseline {ms} ms: {log}"
    );
}
