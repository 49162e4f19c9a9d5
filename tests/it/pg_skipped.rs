//! Rows a PostgreSQL trigger skips (a BEFORE INSERT trigger returning NULL): the table's
//! own decision, acknowledged and counted as `skipped_by_sink` — neither written nor, on
//! a rerun, duplicates (or, in upsert mode, stale) — and said once per run with the table.

use crate::common;

use std::path::Path;

use common::pg::*;
use common::*;

/// A trigger on `table` that keeps only the records whose `n` is even.
fn skip_odd(db: &Db, table: &str) {
    db.execute(&format!(
        "CREATE FUNCTION skip_odd_{table}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF (to_jsonb(NEW)->>'n')::int % 2 = 1 OR (NEW.payload->>'n')::int % 2 = 1 THEN \
             RETURN NULL; END IF; RETURN NEW; END $$; \
         CREATE TRIGGER skip_odd BEFORE INSERT ON {table} \
           FOR EACH ROW EXECUTE FUNCTION skip_odd_{table}()"
    ));
}

fn config(dir: &Path, db: &Db, table: &str, extra: &str) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"postgres\"\nurl = {:?}\ntable = {table:?}\nkey = \"/id\"\nmax_batch = 40\n{extra}\n\
             [rate]\nrecords_per_second = 5000\n",
            db.url
        ),
    )
    .unwrap();
}

/// Loads 100 records twice into `table`; half are skipped by its trigger each time. The
/// other half are written, then `again` (duplicates, or stale in upsert mode).
fn loads_twice(db: &Db, table: &str, extra: &str, again: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 100, &[]);
    config(dir.path(), db, table, extra);
    for (run, written, repeated) in [("first run", 50, 0), ("rerun", 0, 50)] {
        let out = run_in(dir.path(), DRAIN);
        let err = stderr(&out);
        assert!(out.status.success(), "{table} {run}: {err}");
        let s = summary(&out);
        assert_eq!(s["pulled"], 100, "{table} {run}: {s}");
        assert_eq!(s["written"], written, "{table} {run}: {s}");
        assert_eq!(s[again], repeated, "{table} {run}: {s}");
        assert_eq!(s["skipped_by_sink"], 50, "{table} {run}: {s}");
        assert_eq!(s["dead_lettered"], 0, "{table} {run}: {s}");
        assert_eq!(
            err.matches("skipped_by_sink").count(),
            1,
            "said once per run: {err}"
        );
        assert!(err.contains(&format!("table={table}")), "{err}");
        assert_eq!(db.count(&format!("SELECT count(*) FROM {table}")), 50);
    }
}

#[test]
fn rows_a_trigger_skips_are_counted_apart_and_are_no_duplicates_on_a_rerun() {
    let db = Db::create("skipped");
    // The table sluice creates (COPY, then INSERT … ON CONFLICT on the rerun).
    db.records_table();
    skip_odd(&db, "records");
    loads_twice(&db, "records", "", "duplicates");
    // An existing table written through [sink.columns].
    db.execute("CREATE TABLE mapped (id text PRIMARY KEY, n int, payload jsonb)");
    skip_odd(&db, "mapped");
    loads_twice(
        &db,
        "mapped",
        "key_column = \"id\"\n[sink.columns]\nn = \"/n\"\npayload = \"\"\n",
        "duplicates",
    );
}

#[test]
fn rows_a_trigger_skips_in_upsert_mode_are_counted_apart_and_are_not_stale() {
    let db = Db::create("skipped_upsert");
    db.execute(
        "CREATE TABLE state (key text PRIMARY KEY, payload jsonb, source text, \
         ingested_at timestamptz NOT NULL DEFAULT now(), version numeric, \
         deleted boolean NOT NULL DEFAULT false)",
    );
    skip_odd(&db, "state");
    loads_twice(
        &db,
        "state",
        "mode = \"upsert\"\nversion = \"/n\"\n",
        "stale",
    );
}
