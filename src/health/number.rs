//! How a probe's answer becomes one number. Whatever numeric type the query's first column
//! has is read as a number — `numeric` and `DECIMAL` too, which `avg()`, `SELECT 1.5` and
//! PostgreSQL 14's `extract(epoch …)` return — and so is text holding a number (MySQL's
//! `SHOW STATUS` answers in text, as does `pg_settings.setting`). Anything else (no row,
//! NULL, NaN, text or a type that is no number) is a failed reading whose message says
//! which; a failed reading holds the writes like a value over `max`.

use sqlx::mysql::MySqlRow;
use sqlx::postgres::PgRow;
use sqlx::{Column, Row, TypeInfo, ValueRef};

/// The first column of `row` (a PostgreSQL answer) as a number.
pub fn pg(row: &PgRow) -> Result<f64, String> {
    use sqlx::postgres::types::PgInterval;
    let raw = row.try_get_raw(0).map_err(|e| e.to_string())?;
    if raw.is_null() {
        return Err(NULL.into());
    }
    let kind = raw.type_info().name().to_string();
    let value = match kind.as_str() {
        "FLOAT8" => row.try_get::<f64, _>(0).ok(),
        "FLOAT4" => row.try_get::<f32, _>(0).ok().map(f64::from),
        "INT8" => row.try_get::<i64, _>(0).ok().map(|n| n as f64),
        "INT4" => row.try_get::<i32, _>(0).ok().map(f64::from),
        "INT2" => row.try_get::<i16, _>(0).ok().map(f64::from),
        "OID" => row
            .try_get::<sqlx::postgres::types::Oid, _>(0)
            .ok()
            .map(|o| f64::from(o.0)),
        "NUMERIC" if raw.format() == sqlx::postgres::PgValueFormat::Binary => {
            raw.as_bytes().ok().and_then(pg_numeric)
        }
        "NUMERIC" => return parse(raw.as_str().map_err(|e| e.to_string())?),
        // An interval counts in seconds (a month as 30 days).
        "INTERVAL" => row.try_get::<PgInterval, _>(0).ok().map(|i| {
            (f64::from(i.months) * 30.0 + f64::from(i.days)) * 86_400.0
                + i.microseconds as f64 / 1e6
        }),
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "UNKNOWN" => {
            let text: String = row.try_get(0).map_err(|e| e.to_string())?;
            return parse(&text);
        }
        _ => return Err(not_a_number(&kind.to_lowercase())),
    };
    finite(value.ok_or_else(|| not_a_number(&kind.to_lowercase()))?)
}

/// The column `index` of `row` (a MySQL answer) as a number.
pub fn mysql(row: &MySqlRow, index: usize) -> Result<f64, String> {
    let raw = row.try_get_raw(index).map_err(|e| e.to_string())?;
    if raw.is_null() {
        return Err(NULL.into());
    }
    let kind = row.column(index).type_info().name().to_string();
    let value = if let Ok(v) = row.try_get::<f64, _>(index) {
        v
    } else if let Ok(v) = row.try_get::<i64, _>(index) {
        v as f64
    } else if let Ok(v) = row.try_get::<u64, _>(index) {
        v as f64
    } else if let Ok(v) = row.try_get::<f32, _>(index) {
        f64::from(v)
    } else if kind == "DECIMAL" || kind.contains("CHAR") || kind.contains("TEXT") {
        // DECIMAL travels as its decimal text; so does a number in a string column.
        let text: String = row.try_get_unchecked(index).map_err(|e| e.to_string())?;
        return parse(&text);
    } else {
        return Err(not_a_number(&kind));
    };
    finite(value)
}

const NULL: &str = "the query returned NULL, not a number";

fn not_a_number(kind: &str) -> String {
    format!(
        "the query's first column is of type {kind}, not a number (return a number, or an interval, which counts in seconds)"
    )
}

fn parse(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) => finite(v),
        Err(_) => {
            let shown: String = text.chars().take(40).collect();
            Err(format!(
                "the query returned the text {shown:?}, not a number"
            ))
        }
    }
}

/// NaN compares with nothing, so it could never hold the writes: it is no reading.
fn finite(v: f64) -> Result<f64, String> {
    if v.is_nan() {
        Err("the query returned NaN, not a number".into())
    } else {
        Ok(v)
    }
}

/// PostgreSQL's binary `numeric`: digit count, weight (of the first base-10000 digit),
/// sign and display scale as big-endian 16-bit words, then the digits.
fn pg_numeric(bytes: &[u8]) -> Option<f64> {
    let word = |i: usize| -> Option<u16> {
        let b = bytes.get(i * 2..i * 2 + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    };
    let digits = usize::from(word(0)?);
    let weight = i32::from(word(1)? as i16);
    let sign = word(2)?;
    match sign {
        0xC000 => return Some(f64::NAN),
        0xD000 => return Some(f64::INFINITY),
        0xF000 => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    let mut value = 0.0;
    for i in 0..digits {
        let digit = f64::from(word(4 + i)?);
        value += digit * 10_000f64.powi(weight - i as i32);
    }
    Some(if sign == 0x4000 { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(words: &[u16]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    #[test]
    fn binary_numerics_read_as_their_value() {
        // 1.5: digits [1, 5000], weight 0.
        assert_eq!(pg_numeric(&numeric(&[2, 0, 0, 1, 1, 5000])), Some(1.5));
        // -123456.78: [12, 3456, 7800], weight 1.
        let v = pg_numeric(&numeric(&[3, 1, 0x4000, 2, 12, 3456, 7800])).unwrap();
        assert!((v + 123_456.78).abs() < 1e-9, "{v}");
        // 0: no digits.
        assert_eq!(pg_numeric(&numeric(&[0, 0, 0, 0])), Some(0.0));
        // 0.0001: [1], weight -1.
        assert_eq!(pg_numeric(&numeric(&[1, 0xFFFF, 0, 4, 1])), Some(0.0001));
        assert!(pg_numeric(&numeric(&[0, 0, 0xC000, 0])).unwrap().is_nan());
        assert_eq!(pg_numeric(&numeric(&[2, 0])), None, "truncated");
    }

    #[test]
    fn text_reads_as_a_number_or_says_what_it_was() {
        assert_eq!(parse(" 42 "), Ok(42.0));
        assert!(parse("busy").unwrap_err().contains("\"busy\""));
        assert!(parse("NaN").unwrap_err().contains("NaN"));
    }
}
