//! What must land, computed from the input alone: a plain reading of each line with
//! serde_json and the documented rules (the key: docs/how-it-works.md; the type mapping
//! and each sink's limits: docs/sinks.md "What each sink cannot hold exactly") — none of
//! sluice's code.

use std::collections::BTreeMap;

use serde_json::Value;

use super::corpus::Line;

/// Where one record must end.
#[derive(Debug, Clone, PartialEq)]
pub enum Fate {
    /// The row of `key`, holding the record.
    Row(String),
    /// A dead letter whose reason contains this.
    Dead(String),
    /// Its key was taken by an earlier record.
    Duplicate(String),
}

#[derive(Debug, Default)]
pub struct Expected {
    /// key → (case, the record's text).
    pub rows: BTreeMap<String, (String, String)>,
    /// (case, raw bytes, what the reason must say).
    pub letters: Vec<(String, Vec<u8>, String)>,
    pub duplicates: u64,
}

/// A sink's documented refusal of a record it cannot hold: what its letter's reason says.
pub type Refuses<'a> = &'a dyn Fn(&str, &Value) -> Option<&'static str>;

/// The key at `/id` as docs/how-it-works.md says it is stored, or why the record has none.
pub fn key_of(record: &Value) -> Result<String, &'static str> {
    match record.get("id") {
        None | Some(Value::Null) => Err("missing key /id"),
        Some(Value::String(s)) if s.is_empty() => Err("empty key /id"),
        // A string that would read as another JSON value is stored in its JSON form.
        Some(Value::String(s)) => Ok(match serde_json::from_str::<Value>(s) {
            Ok(v) if !v.is_array() && !v.is_object() => Value::String(s.clone()).to_string(),
            _ => s.clone(),
        }),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
        Some(_) => Err("not a scalar"),
    }
}

/// Insert mode: the first record of a key is its row, later ones are duplicates.
pub fn insert(lines: &[Line], refuses: Refuses) -> (Expected, Vec<Fate>) {
    let mut e = Expected::default();
    let mut fates = Vec::new();
    for line in lines {
        let text = String::from_utf8_lossy(&line.bytes).trim_end().to_string();
        let fate = match std::str::from_utf8(&line.bytes)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
        {
            None => Fate::Dead("malformed JSON".into()),
            Some(record) => match key_of(&record) {
                Err(why) => Fate::Dead(why.into()),
                Ok(key) => match refuses(&key, &record) {
                    Some(why) => Fate::Dead(why.into()),
                    None if e.rows.contains_key(&key) => Fate::Duplicate(key),
                    None => Fate::Row(key),
                },
            },
        };
        match &fate {
            Fate::Row(key) => {
                e.rows.insert(key.clone(), (line.case.clone(), text));
            }
            Fate::Dead(why) => e
                .letters
                .push((line.case.clone(), line.bytes.clone(), why.clone())),
            Fate::Duplicate(_) => e.duplicates += 1,
        }
        fates.push(fate);
    }
    (e, fates)
}

/// A JSON number as an exact decimal: (negative, significant digits, exponent); zero is
/// `(false, "", 0)` whatever its sign or form.
pub fn decimal(text: &str) -> (bool, String, i64) {
    let (negative, text) = match text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, text),
    };
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (
            &text[..i],
            text[i + 1..].parse::<i64>().expect("an exponent"),
        ),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let mut exponent = exponent - fraction.len() as i64;
    let digits = digits.trim_start_matches('0');
    let trimmed = digits.trim_end_matches('0');
    exponent += (digits.len() - trimmed.len()) as i64;
    if trimmed.is_empty() {
        return (false, String::new(), 0);
    }
    (negative, trimmed.to_string(), exponent)
}

/// Whether two JSON values are the same; numbers by their exact value when `by_value`
/// (a database that stores them as `numeric`: `1e3` is 1000, `-0` is 0), else by text.
pub fn same(a: &Value, b: &Value, by_value: bool) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if by_value => {
            decimal(&x.to_string()) == decimal(&y.to_string())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y, by_value))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same(v, w, by_value)))
        }
        _ => a == b,
    }
}

#[test]
fn decimals_compare_by_value() {
    assert_eq!(decimal("1e3"), decimal("1000"));
    assert_eq!(decimal("1000.000"), decimal("1E+3"));
    assert_eq!(decimal("-0"), decimal("0.0"));
    assert_ne!(decimal("-1"), decimal("1"));
    assert_ne!(
        decimal("9007199254740993"),
        decimal("9007199254740992"),
        "no float in between"
    );
    assert_eq!(decimal("0.5"), (false, "5".into(), -1));
}
