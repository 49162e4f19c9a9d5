//! What a health probe reads, against the real PostgreSQL and MariaDB: every numeric type
//! is a number (`numeric` and `DECIMAL` from `avg()`, `SELECT 1.5`, `extract(epoch …)`),
//! an answer that is no number holds the writes and says why, and a probe's SQL changes
//! nothing — it runs in a READ ONLY transaction in `check`, `plan` and `run` alike; and
//! MariaDB's Threads_running as the `active_sessions` built-in.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::pg::*;
use common::*;

fn mysql_url() -> String {
    std::env::var("SLUICE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://sluice:sluice@127.0.0.1:3306/sluice_test".into())
}

/// Runs one statement against MariaDB.
fn mysql_execute(sql: &str) {
    block_on(async {
        let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&mysql_url())
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    })
}

fn mysql_tables(like: &str) -> i64 {
    block_on(async {
        let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&mysql_url())
            .await
            .unwrap();
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = ?",
        )
        .bind(like)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        n
    })
}

/// A file → PostgreSQL config at `db` with these probes (`(name, url, query)`).
fn config(dir: &Path, db: &Db, probes: &[(&str, String, &str)]) {
    write_records(&dir.join("in.ndjson"), 20, &[]);
    let probes: String = probes
        .iter()
        .map(|(name, url, query)| {
            format!(
                "[[health.probe]]\nname = {name:?}\nurl = {url:?}\nquery = {query:?}\nmax = 10\ninterval = \"200ms\"\n"
            )
        })
        .collect();
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"postgres\"\nurl = {:?}\ntable = \"records\"\nkey = \"/id\"\n\n{probes}",
            db.url
        ),
    )
    .unwrap();
}

/// `sluice plan --json`'s health reports, by probe name.
fn planned(dir: &Path) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = run_in(dir, &["plan", "-c", "sluice.toml", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    plan["health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p.clone()))
        .collect()
}

#[test]
fn every_numeric_type_reads_as_a_number() {
    let db = Db::create("probe_numeric");
    let dir = tempfile::tempdir().unwrap();
    let pg = || db.url.clone();
    // The expected value, or None for any number.
    let cases: Vec<(&str, String, &str, Option<f64>)> = vec![
        ("pg_decimal", pg(), "SELECT 1.5", Some(1.5)),
        (
            "pg_avg",
            pg(),
            "SELECT avg(x) FROM generate_series(1, 4) x",
            Some(2.5),
        ),
        (
            "pg_epoch",
            pg(),
            "SELECT extract(epoch FROM interval '2.25 seconds')",
            Some(2.25),
        ),
        (
            "pg_negative",
            pg(),
            "SELECT -1234567.125::numeric(20, 3)",
            Some(-1234567.125),
        ),
        ("pg_small", pg(), "SELECT 0.0001::numeric", Some(0.0001)),
        ("pg_int2", pg(), "SELECT 7::int2", Some(7.0)),
        ("pg_real", pg(), "SELECT 0.5::real", Some(0.5)),
        (
            "pg_text",
            pg(),
            "SELECT setting FROM pg_settings WHERE name = 'max_connections'",
            None,
        ),
        ("my_decimal", mysql_url(), "SELECT 1.5", Some(1.5)),
        (
            "my_avg",
            mysql_url(),
            "SELECT AVG(x) FROM (SELECT 2 AS x UNION ALL SELECT 3) t",
            Some(2.5),
        ),
        (
            "my_cast",
            mysql_url(),
            "SELECT CAST(-7.125 AS DECIMAL(10, 3))",
            Some(-7.125),
        ),
        (
            "my_unsigned",
            mysql_url(),
            "SELECT CAST(9 AS UNSIGNED)",
            Some(9.0),
        ),
    ];
    let probes: Vec<_> = cases
        .iter()
        .map(|(n, u, q, _)| (*n, u.clone(), *q))
        .collect();
    config(dir.path(), &db, &probes);
    let read = planned(dir.path());
    for (name, _, query, expected) in &cases {
        let report = &read[*name];
        let value = report["value"].as_f64();
        let Some(value) = value else {
            panic!("{name} ({query}) read no number: {report}");
        };
        if let Some(expected) = expected {
            assert!(
                (value - expected).abs() < 1e-9,
                "{name}: {value} for {expected}"
            );
        }
    }
    let max_connections = read["pg_text"]["value"].as_f64().unwrap();
    assert!(max_connections >= 1.0, "{max_connections}");
}

#[test]
fn an_answer_that_is_no_number_holds_the_writes_and_says_why() {
    let db = Db::create("probe_nan");
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "text",
            db.url.clone(),
            "SELECT 'busy'",
            "the text \"busy\", not a number",
        ),
        ("null", db.url.clone(), "SELECT NULL::int", "returned NULL"),
        (
            "none",
            db.url.clone(),
            "SELECT 1 WHERE false",
            "returned no row",
        ),
        (
            "bool",
            db.url.clone(),
            "SELECT true",
            "of type bool, not a number",
        ),
        (
            "nan",
            db.url.clone(),
            "SELECT 'NaN'::numeric",
            "returned NaN",
        ),
        (
            "my_text",
            mysql_url(),
            "SELECT 'busy'",
            "the text \"busy\", not a number",
        ),
        (
            "my_none",
            mysql_url(),
            "SELECT 1 FROM DUAL WHERE 1 = 0",
            "returned no row",
        ),
    ];
    let probes: Vec<_> = cases
        .iter()
        .map(|(n, u, q, _)| (*n, u.clone(), *q))
        .collect();
    config(dir.path(), &db, &probes);
    let read = planned(dir.path());
    for (name, _, _, why) in &cases {
        let report = &read[*name];
        assert_eq!(report["holds"], true, "{name}: {report}");
        let verdict = report["verdict"].as_str().unwrap();
        assert!(verdict.contains(why), "{name}: {verdict}");
        assert!(verdict.contains("new writes would be held"), "{verdict}");
    }
    // A worker holds its writes for as long as the probe reads no number.
    config(
        dir.path(),
        &db,
        &[("text", db.url.clone(), "SELECT 'busy'")],
    );
    let out = run_in(
        dir.path(),
        &[
            "run",
            "-c",
            "sluice.toml",
            "--until-empty",
            "--deadline",
            "3s",
            "--summary",
            "json",
        ],
    );
    let err = stderr(&out);
    assert_eq!(summary(&out)["written"], 0, "{err}");
    assert!(
        err.contains("the query returned the text \"busy\""),
        "{err}"
    );
}

#[test]
fn a_probe_changes_nothing_in_check_plan_or_run() {
    let db = Db::create("probe_readonly");
    let made = unique("probe_made");
    mysql_execute(&format!("DROP TABLE IF EXISTS {made}"));
    db.execute("CREATE TABLE probe_log (n int)");
    let dir = tempfile::tempdir().unwrap();
    let create = format!("CREATE TABLE {made} AS SELECT 1 AS n");
    let probes = [
        ("pg_create", db.url.clone(), create.as_str()),
        (
            "pg_insert",
            db.url.clone(),
            "WITH i AS (INSERT INTO probe_log VALUES (1) RETURNING n) SELECT count(*) FROM i",
        ),
        ("pg_sequence", db.url.clone(), "SELECT nextval('probe_seq')"),
        ("my_create", mysql_url(), create.as_str()),
    ];
    db.execute("CREATE SEQUENCE probe_seq");
    config(dir.path(), &db, &probes);
    let checked = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let said = stderr(&checked);
    assert_eq!(checked.status.code(), Some(1), "{said}");
    for name in ["pg_create", "pg_insert", "pg_sequence"] {
        assert!(
            said.lines()
                .any(|l| l.starts_with(&format!("FAIL  health probe {name}"))
                    && l.contains("SQLSTATE 25006")),
            "{name}: {said}"
        );
    }
    assert!(said.contains("FAIL  health probe my_create"), "{said}");
    planned(dir.path());
    let out = run_in(
        dir.path(),
        &[
            "run",
            "-c",
            "sluice.toml",
            "--until-empty",
            "--deadline",
            "2s",
            "--summary",
            "json",
        ],
    );
    assert_eq!(summary(&out)["written"], 0, "{}", stderr(&out));
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM pg_tables WHERE tablename = '{made}'"
        )),
        0
    );
    assert_eq!(db.count("SELECT count(*) FROM probe_log"), 0);
    assert_eq!(db.count("SELECT last_value FROM probe_seq"), 1);
    assert_eq!(
        db.count("SELECT count(*) FROM probe_seq WHERE is_called"),
        0
    );
    assert_eq!(mysql_tables(&made), 0, "MariaDB: the probe created {made}");
}

/// Threads_running on the real MariaDB: `sluice plan` reads it, and it holds the writes
/// while two sessions run SLEEP.
#[test]
fn mysql_threads_running_as_a_probe() {
    let Ok(url) = std::env::var("SLUICE_TEST_MYSQL_URL") else {
        panic!("SLUICE_TEST_MYSQL_URL is not set: eval \"$(scripts/services.sh)\"");
    };
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 50, &[]);
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        &format!(
            "[[health.probe]]\nbuiltin = \"active_sessions\"\nurl = \"{url}\"\nmax = 1\ninterval = \"200ms\"\n\n[[health.probe]]\nname = \"lag\"\nbuiltin = \"replica_lag\"\nreplicas = [\"{url}\"]\nmax = 5\n"
        ),
    );
    let plan = |dir: &Path| {
        let out = run_in(dir, &["plan", "-c", "sluice.toml", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let quiet = plan(dir.path());
    let sessions = &quiet["health"][0];
    assert_eq!(sessions["name"], "active_sessions");
    assert!(sessions["value"].as_f64().is_some(), "{quiet}");
    // MariaDB here is no replica (or the user may not ask): its lag is unknown, which
    // holds (fail safe).
    let lag = &quiet["health"][1];
    assert_eq!(lag["holds"], true, "{quiet}");
    assert!(lag["value"].is_null(), "{quiet}");
    eprintln!("mysql replica_lag on a non-replica: {}", lag["verdict"]);
    // `sluice check` reaches and reads each probe; the unreadable one fails the check.
    let check = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let text = stderr(&check);
    assert!(
        text.contains("health probe active_sessions: reads"),
        "{text}"
    );
    assert!(text.contains("health probe lag"), "{text}");
    assert_eq!(check.status.code(), Some(1), "{text}");
    let sleepers: Vec<Child> = (0..3)
        .map(|_| {
            Command::new("mariadb")
                .args(["--protocol=socket", "-u", "root", "-e", "SELECT SLEEP(8)"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    poll(
        Duration::from_secs(5),
        "MariaDB to count the sleepers",
        || {
            plan(dir.path())["health"][0]["value"]
                .as_f64()
                .is_some_and(|v| v >= 3.0)
        },
    );
    let busy = plan(dir.path());
    assert_eq!(busy["health"][0]["holds"], true, "{busy}");
    for mut c in sleepers {
        let _ = c.kill();
        let _ = c.wait();
    }
    let out = Command::new("mariadb")
        .args(["--protocol=socket", "-u", "root", "-N", "-e"])
        .arg("SELECT CONCAT('KILL QUERY ', id, ';') FROM information_schema.processlist WHERE info = 'SELECT SLEEP(8)'")
        .output()
        .unwrap();
    let kills = String::from_utf8_lossy(&out.stdout).to_string();
    if !kills.trim().is_empty() {
        Command::new("mariadb")
            .args(["--protocol=socket", "-u", "root", "-e", &kills])
            .output()
            .unwrap();
    }
    poll(Duration::from_secs(10), "the sleepers to end", || {
        plan(dir.path())["health"][0]["holds"] == false
    });
}
