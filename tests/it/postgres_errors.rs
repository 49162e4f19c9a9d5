//! PostgreSQL errors against the real server, each in a throwaway database of its own:
//! "not now" states (a database closed to connections, a read-only database after a
//! "failover", and every other outage SQLSTATE raised by a trigger for a while) are waited
//! out with nothing dead-lettered; errors of single rows (a trigger's RAISE EXCEPTION, an
//! index row too big) are isolated and dead-lettered with their neighbours written; an
//! error that hits every row stops the worker without dead-lettering anything.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::pg::*;
use common::*;

/// A file → PostgreSQL config; at most 2 attempts per record, so a "not now" state
/// wrongly taken for a transient one dead-letters records within the test.
fn config(dir: &Path, db: &Db, rate: u32, max_batch: usize) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"postgres\"\nurl = {:?}\ntable = \"records\"\nkey = \"/id\"\nmax_batch = {max_batch}\n\n\
             [rate]\nrecords_per_second = {rate}\ntick = \"100ms\"\n\n\
             [retry]\nmin_delay = \"50ms\"\nmax_delay = \"400ms\"\nfactor = 2.0\nmax_attempts = 2\nbudget_min_per_second = 20.0\n\n\
             [throttle]\nmax_pause = \"400ms\"\n",
            db.url
        ),
    )
    .unwrap();
}

/// Starts a worker draining 1,000 records at 250 rec/s, brings `begin` about once it has
/// written some, keeps it for 2 s (the worker must stay up), then `end`s it; the worker
/// must finish with every record written and none dead-lettered, having met `code`.
fn waits_out(prefix: &str, code: &str, begin: impl Fn(&Db), end: impl Fn(&Db)) {
    let db = Db::create(prefix);
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 1000, &[]);
    config(dir.path(), &db, 250, 50);
    let mut child = worker(dir.path(), true);
    poll(Duration::from_secs(30), "first rows written", || {
        db.count("SELECT count(*) FROM pg_tables WHERE tablename = 'records'") == 1
            && db.count("SELECT count(*) FROM records") > 0
    });
    begin(&db);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the worker stopped during {code}"
    );
    end(&db);
    let out = finish(child, Duration::from_secs(60));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("SQLSTATE {code}")),
        "{code} not met: {err}"
    );
    assert_eq!(db.count("SELECT count(*) FROM records"), 1000, "{err}");
    assert_eq!(
        db.count("SELECT count(*) FROM sluice_dead_letters"),
        0,
        "{err}"
    );
    assert_eq!(summary(&out)["dead_lettered"], 0);
}

#[test]
fn a_database_closed_for_maintenance_is_waited_out() {
    waits_out(
        "notnow_closed",
        "55000",
        |db| {
            db.admin("ALTER DATABASE {db} ALLOW_CONNECTIONS false");
            db.terminate_sessions();
        },
        |db| db.admin("ALTER DATABASE {db} ALLOW_CONNECTIONS true"),
    );
}

#[test]
fn a_read_only_database_after_a_failover_is_waited_out_on_fresh_connections() {
    // Sessions opened while the setting is on stay read-only after it is reset: the
    // worker recovers only if it drops the connections that met 25006.
    waits_out(
        "notnow_readonly",
        "25006",
        |db| {
            db.admin("ALTER DATABASE {db} SET default_transaction_read_only = on");
            db.terminate_sessions();
        },
        |db| db.admin("ALTER DATABASE {db} RESET default_transaction_read_only"),
    );
}

/// A trigger raises `code` on the first 4 statements (a sequence is not rolled back, so
/// the condition is transient and deterministic), more than the 2 attempts a record has.
/// The worker must wait it out: exit 0, every record written, nothing dead-lettered.
fn trigger_outage(code: &str) {
    let db = Db::create("notnow_trigger");
    db.records_table();
    execute(
        &db.url,
        &format!(
            "CREATE SEQUENCE statements; \
             CREATE FUNCTION not_now() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF nextval('statements') <= 4 THEN \
                 RAISE EXCEPTION USING ERRCODE = '{code}', MESSAGE = 'simulated {code}'; \
               END IF; RETURN NULL; END $$; \
             CREATE TRIGGER not_now BEFORE INSERT ON records \
               FOR EACH STATEMENT EXECUTE FUNCTION not_now()"
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 200, &[]);
    config(dir.path(), &db, 2000, 100);
    let out = finish(worker(dir.path(), true), Duration::from_secs(60));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{code}: {err}");
    assert!(
        db.count("SELECT last_value FROM statements") > 4,
        "{code}: the condition was never cleared"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM records"),
        200,
        "{code}: {err}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM sluice_dead_letters"),
        0,
        "{code}: {err}"
    );
    let s = summary(&out);
    assert!(s["retries"].as_u64().unwrap() >= 4, "{code}: {s}");
}

#[test]
fn lock_not_available_is_waited_out() {
    trigger_outage("55P03");
}

#[test]
fn object_in_use_is_waited_out() {
    trigger_outage("55006");
}

#[test]
fn database_dropped_on_a_standby_is_waited_out() {
    trigger_outage("57P04");
}

#[test]
fn idle_session_timeout_is_waited_out() {
    trigger_outage("57P05");
}

#[test]
fn server_shutdowns_and_startup_are_waited_out() {
    for code in ["57P01", "57P02", "57P03"] {
        trigger_outage(code);
    }
}

#[test]
fn connection_exceptions_are_waited_out() {
    for code in ["08006", "08P01"] {
        trigger_outage(code);
    }
}

#[test]
fn insufficient_resources_are_waited_out() {
    for code in ["53000", "53100", "53300"] {
        trigger_outage(code);
    }
}

#[test]
fn read_only_transaction_raised_in_a_statement_is_waited_out() {
    trigger_outage("25006");
}

#[test]
fn out_of_memory_is_a_throttle() {
    trigger_outage("53200");
}

/// Drains `n` records through a trigger that fails the rows whose `n` is a multiple of
/// 100 with `raise`; returns the output, the database and the config's directory.
fn load_with_row_errors(raise: &str) -> (std::process::Output, Db, tempfile::TempDir) {
    let db = Db::create("notnow_rows");
    db.records_table();
    execute(
        &db.url,
        &format!(
            "CREATE FUNCTION reject() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF (NEW.payload->>'n')::int % 100 = 0 THEN {raise}; END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER reject BEFORE INSERT ON records \
               FOR EACH ROW EXECUTE FUNCTION reject()"
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 5000, &[]);
    config(dir.path(), &db, 20_000, 500);
    let out = finish(worker(dir.path(), true), Duration::from_secs(120));
    (out, db, dir)
}

fn rejected_keys() -> Vec<String> {
    let mut keys: Vec<String> = (1..=50).map(|i| format!("k{}", i * 100)).collect();
    keys.sort();
    keys
}

#[test]
fn a_trigger_rejecting_one_percent_of_rows_dead_letters_exactly_those() {
    let (out, db, dir) =
        load_with_row_errors("RAISE EXCEPTION 'order % rejected', NEW.payload->>'id'");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM records"), 4950);
    assert_eq!(
        db.count("SELECT count(*) FROM records WHERE (payload->>'n')::int % 100 = 0"),
        0
    );
    let letters = texts(
        &db.url,
        "SELECT key FROM sluice_dead_letters \
         WHERE reason LIKE '%SQLSTATE P0001: order ' || key || ' rejected%' ORDER BY key COLLATE \"C\"",
    );
    assert_eq!(letters, rejected_keys());
    assert_eq!(db.count("SELECT count(*) FROM sluice_dead_letters"), 50);
    let s = summary(&out);
    assert_eq!(
        (s["written"].as_u64(), s["dead_lettered"].as_u64()),
        (Some(4950), Some(50))
    );

    // A rerun stops on nothing: every record is a duplicate or the same dead letter.
    let again = finish(worker(dir.path(), true), Duration::from_secs(120));
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(db.count("SELECT count(*) FROM records"), 4950);
    assert_eq!(db.count("SELECT count(*) FROM sluice_dead_letters"), 50);
}

#[test]
fn an_unclassified_error_of_single_rows_is_isolated_by_splitting() {
    let (out, db, _dir) = load_with_row_errors(
        "RAISE EXCEPTION USING ERRCODE = 'XX000', MESSAGE = 'cannot store ' || (NEW.payload->>'id')",
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM records"), 4950);
    let letters = texts(
        &db.url,
        "SELECT key FROM sluice_dead_letters \
         WHERE reason LIKE '%SQLSTATE XX000: cannot store ' || key || '%' ORDER BY key COLLATE \"C\"",
    );
    assert_eq!(letters, rejected_keys());
}

/// A key of `digits` pseudo-random digits seeded by `seed`: they do not compress below
/// the index's limit (2,704 bytes for a btree, 8,191 for any index row).
fn incompressible_key(seed: u64, digits: usize) -> String {
    let mut x = seed;
    (0..digits / 8)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            format!("{:08}", (x >> 33) % 100_000_000)
        })
        .collect()
}

/// Drains `ids` (one record each) in batches of `max_batch`; every key in `bad` must be
/// dead-lettered with `sqlstate`, every other written, twice over (a finished load leaves
/// no checkpoint: the rerun sends everything again, stops on nothing, stores nothing twice).
fn only_the_bad_keys_are_dead_lettered(
    prefix: &str,
    ids: &[String],
    bad: &[String],
    sqlstate: &str,
    max_batch: usize,
) {
    let db = Db::create(prefix);
    let dir = tempfile::tempdir().unwrap();
    let body: String = ids
        .iter()
        .enumerate()
        .map(|(n, id)| format!("{}\n", serde_json::json!({"id": id, "n": n})))
        .collect();
    std::fs::write(dir.path().join("in.ndjson"), body).unwrap();
    config(dir.path(), &db, 5000, max_batch);
    for run in ["first run", "rerun"] {
        let out = finish(worker(dir.path(), true), Duration::from_secs(60));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{run}: {err}");
        assert_eq!(
            db.count("SELECT count(*) FROM records"),
            (ids.len() - bad.len()) as i64,
            "{run}: {err}"
        );
        assert_eq!(
            db.count(&format!(
                "SELECT count(*) FROM sluice_dead_letters WHERE reason LIKE '%SQLSTATE {sqlstate}:%'"
            )),
            bad.len() as i64,
            "{run}: {err}"
        );
        assert_eq!(
            db.count("SELECT count(*) FROM sluice_dead_letters"),
            bad.len() as i64
        );
    }
}

#[test]
fn an_index_row_too_big_is_a_row_error() {
    // 54000 "index row requires 9016 bytes": among neighbours, in batches of 100.
    let big: Vec<String> = (1..=3).map(|i| incompressible_key(i, 6400)).collect();
    let ids: Vec<String> = (1..=300)
        .map(|i| match i % 97 {
            0 => big[i / 97 - 1].clone(),
            _ => format!("k{i}"),
        })
        .collect();
    only_the_bad_keys_are_dead_lettered("rows_bigkey", &ids, &big, "54000", 100);
}

#[test]
fn a_record_over_a_program_limit_alone_in_its_batch_is_dead_lettered() {
    // One record per batch: no neighbour can show whose fault the error is, only its
    // SQLSTATE. A 9,000-character key is its record's, however often it is sent.
    let big: Vec<String> = (1..=3).map(|i| incompressible_key(i, 9000)).collect();
    let ids: Vec<String> = (1..=12)
        .map(|i| match i % 4 {
            0 => big[i / 4 - 1].clone(),
            _ => format!("k{i}"),
        })
        .collect();
    only_the_bad_keys_are_dead_lettered("rows_bigkey_alone", &ids, &big, "54000", 1);
}

#[test]
fn a_data_exception_alone_in_its_batch_is_dead_lettered() {
    // A NUL in a key: text cannot hold it (22021), whatever batch it is in.
    let bad = vec!["k\u{0}nul".to_string()];
    let ids: Vec<String> = ["k1", "k2", &bad[0], "k4"].map(String::from).to_vec();
    only_the_bad_keys_are_dead_lettered("rows_nul_alone", &ids, &bad, "22021", 1);
}

#[test]
fn an_unclassified_error_on_every_row_stops_the_worker_without_dead_letters() {
    let db = Db::create("notnow_every");
    db.records_table();
    execute(
        &db.url,
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           RAISE EXCEPTION USING ERRCODE = 'XX000', MESSAGE = 'no row goes in'; END $$; \
         CREATE TRIGGER refuse BEFORE INSERT ON records \
           FOR EACH ROW EXECUTE FUNCTION refuse()",
    );
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 500, &[]);
    config(dir.path(), &db, 5000, 100);
    let out = finish(worker(dir.path(), true), Duration::from_secs(60));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("SQLSTATE XX000: no row goes in"), "{err}");
    assert!(err.contains("not a row's fault"), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM records"), 0);
    assert_eq!(db.count("SELECT count(*) FROM sluice_dead_letters"), 0);
}

#[test]
fn a_dropped_table_stops_the_worker_without_dead_letters() {
    let db = Db::create("notnow_dropped");
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 1000, &[]);
    config(dir.path(), &db, 250, 50);
    let child = worker(dir.path(), true);
    poll(Duration::from_secs(30), "first rows written", || {
        db.count("SELECT count(*) FROM pg_tables WHERE tablename = 'records'") == 1
            && db.count("SELECT count(*) FROM records") > 0
    });
    execute(&db.url, "DROP TABLE records");
    let out = finish(child, Duration::from_secs(60));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("SQLSTATE 42P01"), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM sluice_dead_letters"), 0);
}

/// A worker started while its database is closed for maintenance waits for it, as a
/// running worker does, and loads everything once the database opens.
#[test]
fn a_database_closed_at_start_is_waited_for() {
    let db = Db::create("notnow_start");
    db.admin("ALTER DATABASE {db} ALLOW_CONNECTIONS false");
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 300, &[]);
    config(dir.path(), &db, 1000, 50);
    let mut child = worker(dir.path(), true);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the worker gave up on a database closed at start"
    );
    db.admin("ALTER DATABASE {db} ALLOW_CONNECTIONS true");
    let out = finish(child, Duration::from_secs(60));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("sink not available yet"), "{err}");
    assert!(err.contains("55000"), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM records"), 300, "{err}");
    assert_eq!(summary(&out)["written"], 300);
}

/// SIGTERM while the worker waits for its database ends it at once with exit 0: nothing
/// was pulled, so nothing is lost.
#[test]
fn a_worker_waiting_for_its_database_stops_at_once() {
    let db = Db::create("notnow_stop");
    db.admin("ALTER DATABASE {db} ALLOW_CONNECTIONS false");
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 10, &[]);
    config(dir.path(), &db, 1000, 50);
    let child = worker(dir.path(), true);
    std::thread::sleep(Duration::from_millis(1500));
    let stopped = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = finish(child, Duration::from_secs(10));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(stopped.elapsed() < Duration::from_secs(5), "{err}");
    assert_eq!(summary(&out)["written"], 0);
    db.admin("ALTER DATABASE {db} ALLOW_CONNECTIONS true");
    assert_eq!(
        db.count("SELECT count(*) FROM pg_tables WHERE tablename = 'records'"),
        0
    );
}
