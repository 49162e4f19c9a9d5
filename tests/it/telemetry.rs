//! /metrics, /healthz, /readyz during a real drain, and credentials kept out of logs.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

fn get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match crate::common::http().get(url).send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    })
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
}

#[test]
fn metrics_match_the_sink_and_health_endpoints_answer() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3_000, &[10, 20, 30]);
    let port = free_port();
    write_config(
        dir.path(),
        "in.ndjson",
        2_000.0,
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let child = sluice()
        .current_dir(dir.path())
        .args(["run", "-c", "sluice.toml", "--summary", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let db = dir.path().join("out.db");
    loop {
        let (code, text) = get(&format!("{base}/metrics"));
        if code == 200 && text.contains("sluice_records_written_total 2997") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never saw the drain finish: {code} {text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, text) = get(&format!("{base}/metrics"));
    assert_eq!(code, 200);
    assert_eq!(
        metric(&text, "sluice_records_written_total") as i64,
        sqlite_count(&db, "select count(*) from records")
    );
    assert_eq!(
        metric(&text, "sluice_records_dead_lettered_total") as i64,
        sqlite_count(&db, "select count(*) from sluice_dead_letters")
    );
    assert_eq!(metric(&text, "sluice_records_pulled_total"), 3_000.0);
    assert_eq!(
        metric(&text, "sluice_rate_limit_records_per_second"),
        2_000.0
    );
    // An SQLite file never throttles: the whole rate, no pause, no cut.
    assert_eq!(metric(&text, "sluice_rate_multiplier"), 1.0);
    assert_eq!(metric(&text, "sluice_throttle_pauses_total"), 0.0);
    assert_eq!(metric(&text, "sluice_rate_cuts_total"), 0.0);
    assert_eq!(get(&format!("{base}/healthz")).0, 200);
    let (code, body) = get(&format!("{base}/readyz"));
    assert_eq!(code, 200, "{body}");
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn no_log_line_shows_a_password() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 10, &[]);
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        "[leases]\nstore = \"postgres://sluice:s3cr3t-pw@127.0.0.1:1/nope\"\npool = \"p\"\ncapacity = 100\npartitions = 2\n",
    );
    let out = sluice()
        .current_dir(dir.path())
        .env("SLUICE_LOG", "debug")
        .args([
            "run",
            "-c",
            "sluice.toml",
            "--until-empty",
            "--deadline",
            "3s",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    // An unreachable store is an outage (#44): the worker waits at its reserved rate and
    // says why; the deadline ends it.
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("lease store"), "{err}");
    assert!(!err.contains("s3cr3t-pw"), "{err}");

    let queue = unique("sluice_redact");
    let url = amqp_url().replace("guest:guest", "guest:n0t-the-pw");
    std::fs::write(
        dir.path().join("amqp.toml"),
        format!("[source]\nkind = \"amqp\"\nurl = {url:?}\nqueue = {queue:?}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\n"),
    )
    .unwrap();
    let out = sluice()
        .current_dir(dir.path())
        .env("SLUICE_LOG", "debug")
        .args(["run", "-c", "amqp.toml", "--until-empty"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("n0t-the-pw"), "{err}");
}

#[test]
fn readyz_follows_the_sink() {
    let relay = CuttableRelay::start("127.0.0.1:5432");
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 100, &[]);
    let port = free_port();
    let table = unique("sluice_ready");
    let sink_url = pg_url().replace(":5432/", &format!(":{}/", relay.port));
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"postgres\"\nurl = {sink_url:?}\ntable = {table:?}\nkey = \"/id\"\n[telemetry]\nlisten = \"127.0.0.1:{port}\"\n"
        ),
    )
    .unwrap();
    let child = sluice()
        .current_dir(dir.path())
        .args(["run", "-c", "sluice.toml"])
        .spawn()
        .unwrap();
    let ready = format!("http://127.0.0.1:{port}/readyz");
    let wait_for = |want_ok: bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (code, body) = get(&ready);
            if (code == 200) == want_ok && code != 0 {
                return body;
            }
            assert!(Instant::now() < deadline, "{what}: still {code} {body}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_for(true, "ready at start");
    relay.cut();
    let body = wait_for(false, "not ready while PostgreSQL is unreachable");
    assert!(body.contains("sink"), "{body}");
    relay.restore();
    wait_for(true, "ready again");
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
}
