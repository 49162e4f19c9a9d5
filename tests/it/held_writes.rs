//! A worker whose new writes are held, against real services: by the operator through
//! `sluice ctl` (pause, rate, batch, resume of a running worker, the token that guards
//! them), or by a health probe — and then its leases go back to the pool after
//! `idle_grace`, to be taken again once it writes.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// POSTs to `url` without a token: the status and the body.
fn post(url: &str) -> (u16, String) {
    block_on(async {
        let r = crate::common::http().post(url).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    })
}

fn ctl(dir: &Path, args: &[&str], token: Option<&str>) -> std::process::Output {
    let mut cmd = sluice();
    cmd.current_dir(dir)
        .args(["ctl", "-c", "sluice.toml"])
        .args(args);
    if let Some(t) = token {
        cmd.env("SLUICE_TELEMETRY__TOKEN", t);
    }
    cmd.output().unwrap()
}

fn status(dir: &Path) -> serde_json::Value {
    let out = ctl(dir, &["status", "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `sluice ctl` against a running worker: pause holds the writes, rate sets the ceiling,
/// resume lets the drain finish; a wrong or missing token is refused with 401.
#[test]
fn ctl_pauses_resumes_and_sets_the_rate_of_a_running_worker() {
    let dir = tempfile::tempdir().unwrap();
    let n = 600;
    write_records(&dir.path().join("in.ndjson"), n, &[]);
    let port = free_port();
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"s3cret\"\n"),
    );
    let worker = worker(dir.path(), true);
    poll(Duration::from_secs(20), "the worker's first writes", || {
        let out = ctl(dir.path(), &["status", "--json"], None);
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|s| s["written"].as_u64() > Some(0))
    });
    let wrong = ctl(dir.path(), &["pause"], Some("wrong"));
    assert_eq!(wrong.status.code(), Some(1));
    assert!(stderr(&wrong).contains("401"), "{}", stderr(&wrong));
    let (missing, _) = post(&format!("http://127.0.0.1:{port}/control/pause"));
    assert_eq!(missing, 401);
    assert_eq!(status(dir.path())["controls"]["paused"], false);

    let out = ctl(dir.path(), &["pause"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    poll(Duration::from_secs(5), "the pause to apply", || {
        status(dir.path())["held_by"] == "operator"
    });
    // Batches in flight when the pause applied finish; then nothing more.
    std::thread::sleep(Duration::from_millis(300));
    let paused_at = status(dir.path())["written"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(status(dir.path())["written"].as_u64().unwrap(), paused_at);
    assert!(paused_at < n as u64);

    let out = ctl(dir.path(), &["batch", "3"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = ctl(dir.path(), &["batch", "0"], None);
    assert_eq!(out.status.code(), Some(2), "a batch of 0 is refused");
    let out = ctl(dir.path(), &["rate", "20"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = ctl(dir.path(), &["resume"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    poll(Duration::from_secs(5), "the new ceiling to apply", || {
        let s = status(dir.path());
        s["held_by"].is_null() && s["rate_limit"].as_f64().is_some_and(|r| r <= 20.0)
    });
    assert!(status(dir.path())["batch_records"].as_u64().unwrap() <= 3);
    let out = ctl(dir.path(), &["status"], None);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("batch 3 records"), "{text}");
    let at = Instant::now();
    let before = status(dir.path())["written"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let gained = status(dir.path())["written"].as_u64().unwrap() - before;
    let per_second = gained as f64 / at.elapsed().as_secs_f64();
    eprintln!("ctl: {per_second:.0} rec/s under a 20 rec/s ceiling (configured 100)");
    assert!(per_second <= 40.0, "{per_second} rec/s");
    let out = ctl(dir.path(), &["rate", "off"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = finish(worker, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(&dir.path().join("out.db"), "select count(*) from records"),
        n as i64
    );
    let log = stderr(&out);
    assert!(log.contains("operator: new writes paused"), "{log}");
    assert!(log.contains("http from 127.0.0.1"), "{log}");
}

/// A listener off loopback without a token serves metrics but refuses the controls (403):
/// the worker runs, says so naming the key, and drains everything.
#[test]
fn controls_off_loopback_need_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    write_records(&dir.path().join("in.ndjson"), n, &[]);
    let port = free_port();
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        &format!("[telemetry]\nlisten = \"0.0.0.0:{port}\"\n"),
    );
    let worker = worker(dir.path(), true);
    poll(Duration::from_secs(20), "the metrics", || {
        get(&format!("http://127.0.0.1:{port}/metrics")).contains("sluice_")
    });
    let (code, body) = post(&format!("http://127.0.0.1:{port}/control/pause"));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("telemetry.token"), "{body}");
    let out = finish(worker, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("telemetry.token"), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(&dir.path().join("out.db"), "select count(*) from records"),
        n as i64
    );
}

/// Leases and health combine: a worker held by a probe keeps its leases only for
/// `idle_grace`, and takes them again once the probe lets it write.
#[test]
fn a_worker_held_by_health_gives_its_leases_back_after_idle_grace() {
    let knob = unique("health_knob");
    let pool = unique("health_pool");
    let psql = |sql: &str| {
        let out = Command::new("psql")
            .arg(pg_url())
            .args(["-XtAq", "-c", sql])
            .output()
            .unwrap();
        assert!(out.status.success(), "{sql}: {}", stderr(&out));
    };
    psql(&format!(
        "create table {knob} (v float8); insert into {knob} values (0)"
    ));
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 5000, &[]);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\ntable = \"records\"\nkey = \"/id\"\n\n[rate]\ntick = \"100ms\"\n\n\
             [leases]\nstore = {:?}\npool = {pool:?}\ncapacity = 200\npartitions = 4\nttl = \"4s\"\nidle_grace = \"2s\"\n\n\
             [[health.probe]]\nname = \"knob\"\nquery = \"select v from {knob}\"\nurl = {:?}\nmax = 10\ninterval = \"200ms\"\n",
            pg_url(),
            pg_url()
        ),
    )
    .unwrap();
    let held = |dir: &Path| {
        let out = run_in(dir, &["leases", "-c", "sluice.toml", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["leases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["expires_in_s"].as_f64().unwrap() > 0.0)
            .count()
    };
    let worker = worker(dir.path(), true);
    poll(Duration::from_secs(15), "the worker's first lease", || {
        held(dir.path()) > 0
    });
    psql(&format!("update {knob} set v = 100"));
    let at = Instant::now();
    poll(
        Duration::from_secs(8),
        "the held worker to give its leases back",
        || held(dir.path()) == 0,
    );
    let released = at.elapsed();
    psql(&format!("update {knob} set v = 0"));
    let at = Instant::now();
    poll(Duration::from_secs(8), "a lease again once writing", || {
        held(dir.path()) > 0
    });
    eprintln!(
        "leases: given back {:.1} s after the probe went over max (idle_grace 2 s), taken again {:.1} s after it fell back",
        released.as_secs_f64(),
        at.elapsed().as_secs_f64()
    );
    assert!(released >= Duration::from_millis(1500), "{released:?}");
    let _ = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status();
    let out = finish(worker, Duration::from_secs(20));
    assert!(out.status.success(), "{}", stderr(&out));
    psql(&format!("drop table {knob}"));
}
