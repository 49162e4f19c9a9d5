//! Upsert mode: the newest version of a key wins, and on equal versions the later record
//! in source order — whatever the batch size, the batches in flight, a kill -9 and a
//! rerun. Only PostgreSQL upserts; every other kind refuses `mode = "upsert"` at start.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::Value;
use sluice::sink::settings::SinkKind;

use super::corpus::Line;
use super::drivers::{Driver, driver_for, pg_url};
use super::expect::{decimal, key_of, same};
use super::run::{Workdir, count};

fn line(case: &str, id: &str, rest: &str) -> Line {
    Line {
        case: case.into(),
        bytes: format!("{{\"id\":\"{id}\",\"case\":\"{case}\",{rest}}}").into_bytes(),
    }
}

/// Named cases, then many keys with versions drawn from three values (ties everywhere)
/// in shuffled order, then the far halves of two ties.
pub fn corpus() -> Vec<Line> {
    let named: &[(&str, &str, &str)] = &[
        ("versions/increasing", "u-inc", "\"ver\":1,\"n\":1"),
        ("versions/increasing", "u-inc", "\"ver\":2,\"n\":2"),
        ("versions/increasing", "u-inc", "\"ver\":3,\"n\":3"),
        ("versions/decreasing", "u-dec", "\"ver\":3,\"n\":1"),
        ("versions/decreasing", "u-dec", "\"ver\":2,\"n\":2"),
        ("versions/decreasing", "u-dec", "\"ver\":1,\"n\":3"),
        ("ties/three", "u-tie", "\"ver\":5,\"n\":1"),
        ("ties/three", "u-tie", "\"ver\":5,\"n\":2"),
        ("ties/three", "u-tie", "\"ver\":5,\"n\":3"),
        ("ties/far-apart", "u-tie-far", "\"ver\":5,\"n\":1"),
        ("ties/after-newer", "u-tie-after", "\"ver\":5,\"n\":1"),
        ("ties/after-newer", "u-tie-after", "\"ver\":7,\"n\":2"),
        ("ties/after-newer", "u-tie-after", "\"ver\":5,\"n\":3"),
        ("ties/after-newer", "u-tie-after", "\"ver\":7,\"n\":4"),
        ("ties/same-value-other-text", "u-exp", "\"ver\":1e2,\"n\":1"),
        ("ties/same-value-other-text", "u-exp", "\"ver\":100,\"n\":2"),
        ("ties/fractions", "u-frac", "\"ver\":1.5,\"n\":1"),
        ("ties/fractions", "u-frac", "\"ver\":1.25,\"n\":2"),
        ("ties/fractions", "u-frac", "\"ver\":1.50,\"n\":3"),
        (
            "versions/beyond-2^64",
            "u-big",
            "\"ver\":18446744073709551616,\"n\":1",
        ),
        (
            "versions/beyond-2^64",
            "u-big",
            "\"ver\":18446744073709551617,\"n\":2",
        ),
        ("deletes/newer", "u-del", "\"ver\":1,\"n\":1"),
        ("deletes/newer", "u-del", "\"ver\":2,\"gone\":true"),
        ("deletes/then-older", "u-del-old", "\"ver\":3,\"gone\":true"),
        ("deletes/then-older", "u-del-old", "\"ver\":2,\"n\":2"),
        ("deletes/tie", "u-del-tie", "\"ver\":4,\"n\":1"),
        ("deletes/tie", "u-del-tie", "\"ver\":4,\"gone\":true"),
        (
            "deletes/tie-undone",
            "u-undel-tie",
            "\"ver\":4,\"gone\":true",
        ),
        ("deletes/tie-undone", "u-undel-tie", "\"ver\":4,\"n\":2"),
        ("versions/missing", "u-nover", "\"n\":1"),
        ("versions/string", "u-badver", "\"ver\":\"soon\",\"n\":1"),
        ("versions/boolean", "u-boolver", "\"ver\":true,\"n\":1"),
    ];
    let mut lines: Vec<Line> = named.iter().map(|(c, id, r)| line(c, id, r)).collect();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut many = Vec::new();
    for key in 0..150 {
        for n in 0..6 {
            let gone = if next(7) == 0 { ",\"gone\":true" } else { "" };
            let rest = format!("\"ver\":{},\"n\":{n}{gone}", 1 + next(3));
            many.push(line("ties/many-keys", &format!("u-{key}"), &rest));
        }
    }
    // Shuffled, but each key's records keep their relative order only by chance.
    for i in (1..many.len()).rev() {
        many.swap(i, next(i as u64 + 1) as usize);
    }
    lines.extend(many);
    lines.push(line("ties/far-apart", "u-tie-far", "\"ver\":5,\"n\":2"));
    lines
}

/// Orders two nonnegative JSON numbers by exact value.
fn order(a: &str, b: &str) -> Ordering {
    let magnitude = |t: &str| {
        let (_, digits, exp) = decimal(t);
        (digits.len() as i64 + exp, digits)
    };
    let ((ma, da), (mb, db)) = (magnitude(a), magnitude(b));
    if da.is_empty() || db.is_empty() {
        return (!da.is_empty()).cmp(&!db.is_empty());
    }
    ma.cmp(&mb).then_with(|| {
        let width = da.len().max(db.len());
        format!("{da:0<width$}").cmp(&format!("{db:0<width$}"))
    })
}

/// key → (version text, the record or None for a tombstone); and the dead letters.
#[derive(Debug, Default)]
pub struct Final {
    pub rows: BTreeMap<String, (String, Option<String>)>,
    pub letters: Vec<(Vec<u8>, &'static str)>,
}

/// The table the documented rule (docs/sinks/postgres.md) gives: a version applies over an older one, and over an
/// equal one since the later record in source order wins.
pub fn expected(lines: &[Line]) -> Final {
    let mut f = Final::default();
    for l in lines {
        let text = std::str::from_utf8(&l.bytes).unwrap();
        let record: Value = serde_json::from_str(text).unwrap();
        let key = key_of(&record).unwrap();
        let version = match record.get("ver") {
            None => {
                f.letters.push((l.bytes.clone(), "missing version /ver"));
                continue;
            }
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => {
                f.letters.push((l.bytes.clone(), "neither a number"));
                continue;
            }
        };
        let gone = record.get("gone") == Some(&Value::Bool(true));
        let applies = f
            .rows
            .get(&key)
            .is_none_or(|(stored, _)| order(&version, stored) != Ordering::Less);
        if applies {
            f.rows
                .insert(key, (version, (!gone).then(|| text.to_string())));
        }
    }
    f
}

fn upsert_sink(table: &str) -> String {
    format!(
        "kind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"\nmode = \"upsert\"\nversion = \"/ver\"\ndelete_flag = \"/gone\"",
        pg_url()
    )
}

fn table_state(table: &str) -> BTreeMap<String, (String, Option<String>)> {
    super::drivers::block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
        let sql = format!(
            "SELECT key, version::text, CASE WHEN deleted THEN NULL ELSE payload::text END FROM \"{table}\""
        );
        sqlx::query_as::<_, (String, String, Option<String>)>(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut c)
            .await
            .unwrap()
            .into_iter()
            .map(|(k, v, p)| (k, (v, p)))
            .collect()
    })
}

fn compare(table: &str, want: &Final, wd: &Workdir, failures: &mut Vec<String>, when: &str) {
    let got = table_state(table);
    for (key, (version, record)) in &want.rows {
        let Some((v, stored)) = got.get(key) else {
            failures.push(format!("{when}: no row for {key}"));
            continue;
        };
        let same_version = order(v, version) == Ordering::Equal;
        let same_record = match (stored, record) {
            (None, None) => true,
            (Some(a), Some(b)) => same(
                &serde_json::from_str(a).unwrap(),
                &serde_json::from_str(b).unwrap(),
                true,
            ),
            _ => false,
        };
        if !(same_version && same_record) {
            failures.push(format!(
                "{when}: {key} holds version {v} {stored:?}, expected {version} {record:?}"
            ));
        }
    }
    if got.len() != want.rows.len() {
        failures.push(format!(
            "{when}: {} rows, expected {}",
            got.len(),
            want.rows.len()
        ));
    }
    let letters = super::drivers::Postgres.letters(wd.path(), table);
    // A stale or superseded record dead-lettered would leave the table as it should be.
    if letters.len() != want.letters.len() {
        failures.push(format!(
            "{when}: {} dead letters, expected {}: {:?}",
            letters.len(),
            want.letters.len(),
            letters.iter().map(|l| &l.reason).collect::<Vec<_>>()
        ));
    }
    for (raw, why) in &want.letters {
        let n = letters
            .iter()
            .filter(|l| l.raw == *raw && l.reason.contains(why))
            .count();
        if n != 1 {
            failures.push(format!(
                "{when}: {n} dead letters saying {why:?} for {}",
                String::from_utf8_lossy(raw)
            ));
        }
    }
}

/// Every record pulled settled once; `letters`: the dead letters a run from the start
/// must count (a run after a kill counts only those the killed run had not stored).
fn accounted(s: &Value, letters: Option<usize>) -> bool {
    let parts = ["written", "deleted", "stale", "superseded", "dead_lettered"];
    count(s, "pulled") == parts.iter().map(|p| count(s, p)).sum::<u64>()
        && count(s, "duplicates") == 0
        && letters.is_none_or(|n| count(s, "dead_lettered") == n as u64)
}

/// The same table at `max_batch` 1, 7 and 1000 with 4 batches in flight; at 7 also after a
/// kill -9 in the middle and a rerun of the whole file.
#[test]
fn postgres_upsert_ties_go_to_the_later_record_whatever_the_batching() {
    let lines = corpus();
    let want = expected(&lines);
    let mut failures = Vec::new();
    let pg = super::drivers::Postgres;
    for max_batch in [1, 7, 1000] {
        let table = super::common::unique(&format!("conf_upsert_{max_batch}"));
        let wd = Workdir::new(&lines);
        let when = format!("max_batch {max_batch}");
        if max_batch == 7 {
            wd.config(&upsert_sink(&table), 300.0, max_batch, 4);
            let landed = || table_rows(&table);
            if let Err(e) = wd.kill_once(&landed, 40) {
                failures.push(format!("{when}: kill -9 run: {e}"));
            }
        }
        wd.config(&upsert_sink(&table), 1_000_000.0, max_batch, 4);
        let letters = (max_batch != 7).then_some(want.letters.len());
        match wd.drain() {
            Ok(s) if accounted(&s, letters) => {}
            Ok(s) => failures.push(format!("{when}: not every record accounted for: {s}")),
            Err(e) => failures.push(format!("{when}: {e}")),
        }
        compare(&table, &want, &wd, &mut failures, &when);
        if max_batch == 7 {
            wd.forget_checkpoint();
            match wd.drain() {
                Ok(s) if accounted(&s, Some(want.letters.len())) => {}
                Ok(s) => failures.push(format!("{when}, rerun: not accounted for: {s}")),
                Err(e) => failures.push(format!("{when}, rerun: {e}")),
            }
            compare(&table, &want, &wd, &mut failures, &format!("{when}, rerun"));
        }
        pg.clean_up(&table);
    }
    eprintln!(
        "upsert: {} records, {} keys, {} dead letters; {} differences",
        lines.len(),
        want.rows.len(),
        want.letters.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn table_rows(table: &str) -> usize {
    super::drivers::block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
        let sql = format!("SELECT count(*) FROM \"{table}\"");
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql))
            .fetch_one(&mut c)
            .await
            .map_or(0, |n| n as usize)
    })
}

/// A sink that cannot upsert says so before anything moves: exit 2 naming `sink.mode`.
#[test]
fn sinks_without_upsert_refuse_it_at_start() {
    for kind in SinkKind::ALL {
        if kind == SinkKind::Postgres {
            continue;
        }
        let d: Box<dyn Driver> = driver_for(kind);
        let wd = Workdir::new(&corpus()[..3]);
        let sink = d.sink("conf_upsert_refused");
        let (head, tables) = sink.split_once("\n\n[").map_or((sink.as_str(), ""), |p| p);
        let tables = if tables.is_empty() {
            String::new()
        } else {
            format!("\n\n[{tables}")
        };
        wd.config(
            &format!("{head}\nmode = \"upsert\"\nversion = \"/ver\"{tables}"),
            1000.0,
            7,
            1,
        );
        let out = super::common::finish(wd.start(), std::time::Duration::from_secs(30));
        let err = super::common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{kind:?}: {err}");
        assert!(err.contains("sink.mode"), "{kind:?}: {err}");
        assert!(
            d.rows(wd.path(), "conf_upsert_refused").is_empty(),
            "{kind:?}"
        );
    }
}
