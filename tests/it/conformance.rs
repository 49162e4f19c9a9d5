//! One corpus through every sink kind (issue #39): keys, values, malformed lines and
//! duplicates in one NDJSON file, drained into SQLite, PostgreSQL, MariaDB, the HTTP sink
//! (against `sim-sink`, deduplicating by key) and Elasticsearch (against `sim-sink
//! --bulk`), then compared with what a plain reading of the file says must land. Every
//! record ends in exactly one place: a row equal to it, a dead letter naming what is
//! wrong, or a duplicate of an earlier record's key. Each sink is run killed (SIGKILL) in
//! the middle, then to the end, then once more over the whole file (everything a
//! duplicate); upsert runs at `max_batch` 1, 7 and 1000 must give the same table.

use crate::common;
mod corpus;
mod drivers;
mod expect;
mod mapped;
mod mapped_mysql;
mod mapped_postgres;
mod mapped_values;
mod run;
mod ties;

use drivers::{Driver, driver_for};
use expect::same;
use run::{Workdir, count};
use serde_json::Value;
use sluice::sink::settings::SinkKind;

/// Every kind of sink has a conformance driver: a kind added to `SinkKind` without one
/// fails to build here (the match in `driver_for` has no catch-all), and one left out of
/// `SinkKind::ALL` fails this count.
#[test]
fn every_sink_kind_has_a_conformance_driver() {
    let kinds = SinkKind::ALL;
    for kind in kinds {
        assert_eq!(driver_for(kind).kind(), kind);
    }
    let named = ["sqlite", "http", "postgres", "mysql", "elasticsearch"];
    assert_eq!(kinds.len(), named.len(), "a kind without its test below");
}

/// Compares what landed with what must have, and says every difference.
fn compare(
    d: &dyn Driver,
    wd: &Workdir,
    table: &str,
    want: &expect::Expected,
    failures: &mut Vec<String>,
) {
    let rows = d.rows(wd.path(), table);
    for (key, (case, text)) in &want.rows {
        match rows.get(key) {
            None => failures.push(format!("{case}: no row for key {key:?}")),
            Some(stored) if d.keeps_text() => {
                if stored != text {
                    failures.push(format!("{case}: stored {stored:?}, sent {text:?}"));
                }
            }
            Some(stored) => {
                let (a, b): (Value, Value) = (
                    serde_json::from_str(stored).unwrap(),
                    serde_json::from_str(text).unwrap(),
                );
                if !same(&a, &b, d.numbers_by_value()) {
                    failures.push(format!("{case}: stored {stored}, sent {text}"));
                }
            }
        }
    }
    for key in rows.keys().filter(|k| !want.rows.contains_key(*k)) {
        failures.push(format!("a row nobody expects: key {key:?}"));
    }
    let letters = d.letters(wd.path(), table);
    for (case, raw, why) in &want.letters {
        let found: Vec<_> = letters.iter().filter(|l| l.raw == *raw).collect();
        match found.as_slice() {
            [one] if one.reason.contains(why.as_str()) => {}
            [one] => failures.push(format!(
                "{case}: dead-lettered with {:?}, which does not say {why:?}",
                one.reason
            )),
            [] => failures.push(format!("{case}: no dead letter (expected: {why})")),
            more => failures.push(format!("{case}: {} dead letters", more.len())),
        }
    }
    for l in &letters {
        if !want.letters.iter().any(|(_, raw, _)| *raw == l.raw) {
            let raw = String::from_utf8_lossy(&l.raw);
            let raw: String = raw.chars().take(120).collect();
            failures.push(format!("an unexpected dead letter: {raw} ({})", l.reason));
        }
    }
}

/// The insert-mode corpus into `kind`'s created table: killed in the middle, finished,
/// then the whole file again.
fn insert_conformance(kind: SinkKind) {
    let d = driver_for(kind);
    let table = common::unique(&format!("conf_{}", format!("{kind:?}").to_lowercase()));
    let lines = corpus::insert_corpus();
    let refuses = |key: &str, record: &Value| d.refuses(key, record);
    let (want, _) = expect::insert(&lines, &refuses);
    let wd = Workdir::new(&lines);
    let mut failures = Vec::new();

    // Killed once a few batches landed; the rest is redelivered to the next run.
    wd.config(&d.sink(&table), 60.0, 7, 2);
    if let Err(e) = wd.kill_once(&|| d.rows(wd.path(), &table).len(), 10) {
        failures.push(format!("kill -9 run: {e}"));
    }
    wd.config(&d.sink(&table), 1_000_000.0, 7, 4);
    match wd.drain() {
        Ok(s) => {
            let settled =
                count(&s, "written") + count(&s, "duplicates") + count(&s, "dead_lettered");
            if count(&s, "pulled") != settled {
                failures.push(format!(
                    "after the kill: not every record accounted for: {s}"
                ));
            }
        }
        Err(e) => failures.push(format!("run after the kill failed: {e}")),
    }
    compare(&*d, &wd, &table, &want, &mut failures);

    // The whole file once more: nothing new, every letter still once.
    wd.forget_checkpoint();
    match wd.drain() {
        Ok(s) => {
            let valid = want.rows.len() as u64 + want.duplicates;
            let got = (
                count(&s, "written"),
                count(&s, "duplicates"),
                count(&s, "dead_lettered"),
            );
            if got != (0, valid, want.letters.len() as u64) {
                failures.push(format!(
                    "rerun: written/duplicates/dead-lettered {got:?}, expected (0, {valid}, {}): {s}",
                    want.letters.len()
                ));
            }
        }
        Err(e) => failures.push(format!("rerun failed: {e}")),
    }
    compare(&*d, &wd, &table, &want, &mut failures);
    d.clean_up(&table);
    eprintln!(
        "{kind:?}: {} records ({} rows, {} dead letters, {} duplicates); {} differences",
        lines.len(),
        want.rows.len(),
        want.letters.len(),
        want.duplicates,
        failures.len()
    );
    assert!(failures.is_empty(), "{kind:?}:\n{}", failures.join("\n"));
}

#[test]
fn sqlite_created_table() {
    insert_conformance(SinkKind::Sqlite);
}

#[test]
fn postgres_created_table() {
    insert_conformance(SinkKind::Postgres);
}

#[test]
fn mysql_created_table() {
    insert_conformance(SinkKind::Mysql);
}

#[test]
fn http_against_the_emulator() {
    insert_conformance(SinkKind::Http);
}

#[test]
fn elasticsearch_against_the_emulator() {
    insert_conformance(SinkKind::Elasticsearch);
}
