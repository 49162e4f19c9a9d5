//! A mapped table (`[sink.columns]`): every value of one corpus into every typed column
//! of an existing table, one value per record, each record naming its column. Each lands
//! as its column's documented form (README: the PostgreSQL type table, the MySQL mapping,
//! "What each sink cannot hold exactly"), or is dead-lettered with a reason naming the
//! column — by sluice before the write, or by the server with its error — never changed.
//! The expectation of each (column, value) is worked out in the sink's file from the
//! value's JSON text alone.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::corpus::Line;
use super::drivers::{Driver, Letter};
use super::expect::{decimal, key_of, same};
use super::run::{Workdir, count};

/// The values every column gets, as JSON text: integers at each width's boundaries,
/// decimals, floats out of range and too small, strings of numbers, strings at a length
/// limit and past it, every escape, times in every form, and every other JSON type.
pub fn values() -> Vec<String> {
    let mut v: Vec<String> = [
        "0",
        "-0",
        "1",
        "42",
        "-1",
        "1e3",
        "1000.0",
        "12.5",
        "12.345",
        "-12.34",
        "127",
        "128",
        "-128",
        "-129",
        "255",
        "256",
        "32767",
        "32768",
        "-32769",
        "65535",
        "65536",
        "8388607",
        "8388608",
        "16777215",
        "16777216",
        "16777217",
        "2147483647",
        "2147483648",
        "-2147483649",
        "4294967295",
        "4294967296",
        "9007199254740993",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
        "99999999.99",
        "100000000",
        "0.1",
        "0.123456789012345678901234567890",
        "123456789012345678901234567890",
        "1.5e10",
        "1E-7",
        "1e400",
        "-1e400",
        "1e-400",
        "1e-50",
        "1e39",
        "\"42\"",
        "\"12.5\"",
        "\" 7 \"",
        "\"1e-400\"",
        "\"NaN\"",
        "\"-Infinity\"",
        "\"text\"",
        "\"\"",
        "\"abc \"",
        "\" abc\"",
        "\"ABC\"",
        "\"\u{e0}bc\"",
        "\"a\u{300}bc\"",
        "\"😀𝄞\"",
        r#""a\u0000b""#,
        r#""\"\\\/\b\f\n\r\t\u0001""#,
        "\"sixteen chars ok\"",
        "\"seventeen chars!!\"",
        "\"sixteen chars ok \"",
        "\"ééééééééééééééé\"",
        "\"2024-05-01T10:00:00Z\"",
        "\"2024-05-01T10:00:00+02:00\"",
        "\"2024-05-01T10:00:00.123Z\"",
        "\"2024-05-01T10:00:00.123456Z\"",
        "\"2024-05-01T10:00:00.123456789Z\"",
        "\"2024-05-01T10:00:00.5-01:00\"",
        "\"2024-05-01T10:00:00\"",
        "\"2024-05-01 10:00:00.25\"",
        "\"2024-5-1 10:00:00.5\"",
        "\"20240501100000.5\"",
        "\"2024-05-01\"",
        "\"2024-05-01T00:00:00Z\"",
        "\"1969-12-31T23:59:59Z\"",
        "\"2038-01-19T03:14:08Z\"",
        "\"9999-12-31T23:59:59Z\"",
        "true",
        "false",
        "null",
        "[]",
        "{}",
        "[1,2]",
        "{\"a\":1.50,\"b\":[true,null]}",
    ]
    .map(String::from)
    .to_vec();
    v.push(format!("{}1{}", "[".repeat(40), "]".repeat(40)));
    v
}

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
/// column: each record's key by the README's rule, every column NULL.
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

/// The number a string reads as for a server that parses numbers from text (MySQL: with
/// spaces around, `+`, `.5`, `5.`), as JSON number text; `None`: not a number.
pub fn number_in(s: &str) -> Option<String> {
    let t = s.trim_matches(' ');
    let (sign, body) = match t.strip_prefix('-') {
        Some(b) => ("-", b),
        None => ("", t.strip_prefix('+').unwrap_or(t)),
    };
    let (mantissa, exponent) = body.split_at(body.find(['e', 'E']).unwrap_or(body.len()));
    if !mantissa.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let whole = match whole.trim_start_matches('0') {
        "" => "0",
        w => w,
    };
    let fraction = if fraction.is_empty() {
        String::new()
    } else {
        format!(".{fraction}")
    };
    let text = format!("{sign}{whole}{fraction}{exponent}");
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Number(_)) => Some(text),
        _ => None,
    }
}

/// The exact integer a number's text denotes, if it is one.
pub fn integer_of(text: &str) -> Option<i128> {
    let (negative, digits, exp) = decimal(text);
    if digits.is_empty() {
        return Some(0);
    }
    if exp < 0 || digits.len() as i64 + exp > 39 {
        return None;
    }
    let v: i128 = format!("{digits}{}", "0".repeat(exp as usize))
        .parse()
        .ok()?;
    Some(if negative { -v } else { v })
}

/// Whether a number's text fits `precision` digits, `scale` after the point.
pub fn fits_decimal(text: &str, precision: i64, scale: i64) -> bool {
    let (_, digits, exp) = decimal(text);
    digits.is_empty() || (exp >= -scale && digits.len() as i64 + exp <= precision - scale)
}

/// The float a number's text is rounded to, when it is in range and does not vanish.
pub fn float_of(text: &str, single: bool) -> Option<f64> {
    let v = if single {
        f64::from(text.parse::<f32>().ok()?)
    } else {
        text.parse::<f64>().ok()?
    };
    let zero = decimal(text).1.is_empty();
    (v.is_finite() && (v != 0.0 || zero)).then_some(if v == 0.0 { 0.0 } else { v })
}

/// A time's UTC form, its significant fractional digits, and whether it had an offset:
/// RFC 3339, or `YYYY-MM-DD[T ]HH:MM:SS[.f]` or MySQL's `YYYYMMDDHHMMSS[.f]` without one.
pub fn time_of(s: &str) -> Option<(chrono::NaiveDateTime, usize, bool)> {
    let (at, offset) = match chrono::DateTime::parse_from_rfc3339(s) {
        Ok(at) => (at.naive_utc(), true),
        Err(_) => (
            [
                "%Y-%m-%dT%H:%M:%S%.f",
                "%Y-%m-%d %H:%M:%S%.f",
                "%Y%m%d%H%M%S%.f",
            ]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())?,
            false,
        ),
    };
    let nanos = at.and_utc().timestamp_subsec_nanos();
    let digits = format!("{nanos:09}").trim_end_matches('0').len();
    Some((at, digits, offset))
}

/// A time as `time_of` reads it, or a date `YYYY-MM-DD` (its midnight, no fraction).
pub fn instant_of(s: &str) -> Option<(chrono::NaiveDateTime, usize)> {
    match time_of(s) {
        Some((at, digits, _)) => Some((at, digits)),
        None => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .map(|day| (day.and_time(chrono::NaiveTime::MIN), 0)),
    }
}

#[test]
fn strings_of_numbers_read_as_a_server_reads_them() {
    assert_eq!(number_in(" 7 ").as_deref(), Some("7"));
    assert_eq!(number_in("+.5").as_deref(), Some("0.5"));
    assert_eq!(number_in("-5.").as_deref(), Some("-5"));
    assert_eq!(number_in("007").as_deref(), Some("7"));
    assert_eq!(number_in("1e-400").as_deref(), Some("1e-400"));
    assert_eq!(number_in("12abc"), None);
    assert_eq!(number_in(""), None);
    assert_eq!(number_in("0x10"), None);
}
