//! A mapped table (`[sink.columns]`): every value of one corpus into every typed column
//! of an existing table, one value per record, each record naming its column. Each lands
//! as its column's documented form (docs/sinks/: the PostgreSQL type table, the MySQL mapping,
//! "What each sink cannot hold exactly"), or is dead-lettered with a reason naming the
//! column — by sluice before the write, or by the server with its error — never changed.
//! The expectation of each (column, value) is worked out in the sink's file from the
//! value's JSON text alone.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::corpus::Line;
use super::drivers::{Driver, Letter};
use super::expect::{decimal, key_of, same};
use super::mapped_values::values;
use super::run::{Workdir, count};

/// What a stored value must be.
#[derive(Debug, Clone, PartialEq)]
pub enum Want {
    /// The stored text as it is.
    Text(String),
    /// A number of this exact value, in any notation (`42.00` is 42).
    Number(String),
    /// JSON equal to this, numbers by their exact value.
    Json(Value),
    /// A float of exactly this value, single precision or double (read back as text
    /// that parses to it).
    Float { value: f64, single: bool },
    /// A time (UTC for a time with an offset), read back as `YYYY-MM-DD HH:MM:SS[.f]`.
    Time(chrono::NaiveDateTime),
}

/// Where one record must end.
#[derive(Debug, Clone, PartialEq)]
pub enum Fate {
    /// A row whose column holds this (`None`: NULL).
    Row(Option<Want>),
    /// A dead letter from sluice, before the write: `column c (from "/c") …`.
    Sluice,
    /// A dead letter with the server's error, naming the column.
    Server,
    /// A dead letter whose reason says this (a key the sink cannot hold).
    Refused(&'static str),
    /// Its key was taken by an earlier record.
    Duplicate,
}

/// One record of the run: its key, the column its value is for (none: a record of the
/// key family, every column NULL), where it must end, and its line.
struct Case<'a, T> {
    key: String,
    column: Option<&'a Column<T>>,
    fate: Fate,
    line: Line,
}

/// A column of the table: its name, its SQL type, and what the sink's expectation and
/// reading need to know of it.
pub struct Column<T> {
    pub name: &'static str,
    pub sql: &'static str,
    pub ty: T,
}

/// One sink's mapped table.
pub trait Mapped {
    type Type;
    /// The sink kind's driver: its `[sink]` keys, its dead letters, its clean-up.
    fn driver(&self) -> &dyn Driver;
    fn columns(&self) -> Vec<Column<Self::Type>>;
    /// Creates the table: the key column `k`, then every column.
    fn create(&self, table: &str);
    fn expected(&self, column: &Column<Self::Type>, value: &Value) -> Fate;
    /// A name quoted for the sink's SQL.
    fn quote(&self, name: &str) -> String;
    /// The expression that reads `column` back as text.
    fn read(&self, column: &Column<Self::Type>) -> String;
    /// The rows of a query of two text columns.
    fn pairs(&self, sql: String) -> Vec<(String, String)>;
    /// A key the table's key column cannot hold: what its dead letter says.
    fn refuses_key(&self, key: &str) -> Option<&'static str>;
}

/// The keys of the created tables' corpus (and its duplicates), through the mapped key
/// column: each record's key by the documented rule (docs/how-it-works.md), every column NULL.
fn key_cases<'a, M: Mapped>(sink: &M) -> Vec<Case<'a, M::Type>> {
    let mut seen = BTreeSet::new();
    let lines = super::corpus::keys()
        .into_iter()
        .chain(super::corpus::duplicates());
    lines
        .map(|line| {
            let record: Value = serde_json::from_slice(&line.bytes).unwrap();
            let (key, fate) = match key_of(&record) {
                Err(why) => (String::new(), Fate::Refused(why)),
                Ok(key) => match sink.refuses_key(&key) {
                    Some(why) => (key, Fate::Refused(why)),
                    None if !seen.insert(key.clone()) => (key, Fate::Duplicate),
                    None => (key, Fate::Row(None)),
                },
            };
            Case {
                key,
                column: None,
                fate,
                line,
            }
        })
        .collect()
}

/// Whether `stored` is what `want` says.
fn holds(want: &Want, stored: &str) -> bool {
    match want {
        Want::Text(t) => stored == t,
        Want::Number(n) => {
            serde_json::from_str::<Value>(stored).is_ok_and(|v| v.is_number())
                && decimal(stored) == decimal(n)
        }
        Want::Json(v) => serde_json::from_str(stored).is_ok_and(|s: Value| same(&s, v, true)),
        Want::Float {
            value,
            single: true,
        } => stored.parse::<f32>().is_ok_and(|s| f64::from(s) == *value),
        Want::Float { value, .. } => stored.parse::<f64>().is_ok_and(|s| s == *value),
        Want::Time(t) => chrono::NaiveDateTime::parse_from_str(stored, "%Y-%m-%d %H:%M:%S%.f")
            .is_ok_and(|s| s == *t),
    }
}

/// Whether a reason names `column`, as sluice names it or as the server does (the
/// column, or MariaDB's JSON check: the constraint `table.column`).
fn names(reason: &str, column: &str, by: &Fate) -> bool {
    match by {
        Fate::Sluice => reason.contains(&format!("column {column} (from \"/{column}\")")),
        _ => {
            reason.contains("MySQL error ")
                && [
                    format!("'{column}'"),
                    format!("`{column}`"),
                    format!(".{column}`"),
                ]
                .iter()
                .any(|form| reason.contains(form.as_str()))
        }
    }
}

/// Drains the corpus into `sink`'s table twice (the second run all duplicates) and
/// compares every column of every row, every dead letter, and the summaries' counts.
pub fn conformance<M: Mapped>(sink: &M, name: &str) {
    let table = super::common::unique(&format!("conf_mapped_{name}"));
    sink.create(&table);
    let columns = sink.columns();
    let mut cases = key_cases(sink);
    for column in &columns {
        for (i, text) in values().iter().enumerate() {
            let value: Value = serde_json::from_str(text).unwrap();
            let key = format!("c-{}-{i}", column.name);
            let line = Line {
                case: format!("mapped/{}/{}={text}", name, column.name),
                bytes: format!("{{\"id\":\"{key}\",\"{}\":{text}}}", column.name).into_bytes(),
            };
            let fate = sink.expected(column, &value);
            cases.push(Case {
                key,
                column: Some(column),
                fate,
                line,
            });
        }
    }
    let lines: Vec<Line> = cases
        .iter()
        .map(|c| Line {
            case: c.line.case.clone(),
            bytes: c.line.bytes.clone(),
        })
        .collect();
    let wd = Workdir::new(&lines);
    let mapping: String = columns
        .iter()
        .map(|c| format!("{0} = \"/{0}\"\n", c.name))
        .collect();
    let toml = format!(
        "{}\nkey_column = \"k\"\n\n[sink.columns]\n{mapping}",
        sink.driver().sink(&table)
    );
    wd.config(&toml, 1_000_000.0, 50, 4);
    let of = |f: fn(&Fate) -> bool| cases.iter().filter(|c| f(&c.fate)).count() as u64;
    let rows = of(|f| matches!(f, Fate::Row(_)));
    let duplicates = of(|f| *f == Fate::Duplicate);
    let letters = cases.len() as u64 - rows - duplicates;
    let mut failures = Vec::new();
    for (round, want) in [
        ("first run", (rows, duplicates, letters)),
        ("rerun", (0, rows + duplicates, letters)),
    ] {
        match wd.drain() {
            Ok(s) => {
                let got = (
                    count(&s, "written"),
                    count(&s, "duplicates"),
                    count(&s, "dead_lettered"),
                );
                if got != want {
                    failures.push(format!(
                        "{round}: written/duplicates/dead-lettered {got:?}, expected {want:?}: {s}"
                    ));
                }
            }
            Err(e) => failures.push(format!("{round}: {e}")),
        }
        wd.forget_checkpoint();
    }
    let quoted = sink.quote(&table);
    let keys: BTreeSet<String> = sink
        .pairs(format!("SELECT k, k FROM {quoted}"))
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    // Column → key → the value stored, where it is not NULL.
    let stored: BTreeMap<&str, BTreeMap<String, String>> = columns
        .iter()
        .map(|c| {
            let sql = format!(
                "SELECT k, {} FROM {quoted} WHERE {} IS NOT NULL",
                sink.read(c),
                sink.quote(c.name)
            );
            (c.name, sink.pairs(sql).into_iter().collect())
        })
        .collect();
    let found = sink.driver().letters(wd.path(), &table);
    let expected_keys: BTreeSet<&str> = cases
        .iter()
        .filter(|c| matches!(c.fate, Fate::Row(_)))
        .map(|c| c.key.as_str())
        .collect();
    for key in keys.iter().filter(|k| !expected_keys.contains(k.as_str())) {
        failures.push(format!("a row nobody expects: {key:?}"));
    }
    for case in &cases {
        let (key, line) = (&case.key, &case.line);
        let own = case.column.map(|c| c.name);
        let elsewhere: Vec<&str> = stored
            .iter()
            .filter(|(c, values)| Some(**c) != own && values.contains_key(key))
            .map(|(c, _)| *c)
            .collect();
        if matches!(case.fate, Fate::Row(_)) && !elsewhere.is_empty() {
            failures.push(format!("{}: a value in {elsewhere:?} too", line.case));
        }
        let value = own.and_then(|c| stored[c].get(key));
        let mine: Vec<&Letter> = found.iter().filter(|l| l.raw == line.bytes).collect();
        let reasons: Vec<&str> = mine.iter().map(|l| l.reason.as_str()).collect();
        match (&case.fate, case.column) {
            (Fate::Row(want), _) => match (keys.contains(key), want, value) {
                (false, _, _) => failures.push(format!(
                    "{}: no row (expected {want:?}); letters: {reasons:?}",
                    line.case
                )),
                (true, None, None) => {}
                (true, Some(want), Some(got)) if holds(want, got) => {}
                (true, _, got) => {
                    failures.push(format!("{}: stored {got:?}, expected {want:?}", line.case))
                }
            },
            (Fate::Duplicate, _) if mine.is_empty() => {}
            (Fate::Refused(why), _) if matches!(reasons.as_slice(), [one] if one.contains(why)) => {
            }
            (Fate::Sluice | Fate::Server, Some(column))
                if matches!(reasons.as_slice(), [one] if names(one, column.name, &case.fate))
                    && !keys.contains(key) => {}
            (fate, _) => failures.push(format!(
                "{}: expected {fate:?}; row: {}, stored {value:?}, letters: {reasons:?}",
                line.case,
                keys.contains(key)
            )),
        }
    }
    for l in &found {
        if !cases.iter().any(|c| c.line.bytes == l.raw) {
            failures.push(format!("a letter nobody expects: {}", l.reason));
        }
    }
    sink.driver().clean_up(&table);
    eprintln!(
        "mapped {name}: {} key records, {} columns × {} values; {} records ({rows} rows, {duplicates} duplicates, {letters} dead letters); {} differences",
        cases.iter().filter(|c| c.column.is_none()).count(),
        columns.len(),
        values().len(),
        cases.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
