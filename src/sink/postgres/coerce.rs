//! Which JSON value a mapped column takes, and as what: the JSON type × column type table
//! of the README. Strict (the default) writes a value only when its JSON type is the
//! column's own; lenient also hands strings (and numbers, booleans) to PostgreSQL's input
//! function for the column type, as text. Numbers always travel as their exact JSON text.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `[sink] coerce`: how far a JSON value may be converted to fit its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Coerce {
    /// Only a value of the column's own JSON type is written; anything else is a dead letter.
    #[default]
    Strict,
    /// Strings, numbers and booleans are also handed to the column type's input function.
    Lenient,
}

/// What a column is, as far as converting JSON into it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnKind {
    /// smallint, integer, bigint: an integral number within `min..=max`.
    Integer {
        min: i64,
        max: i64,
    },
    /// numeric, real, double precision: a number, as its exact text.
    Number,
    Boolean,
    /// text, varchar, char, name, citext: a string.
    Text,
    /// json, jsonb: any JSON value, kept as it is.
    Json,
    /// timestamptz: a string in RFC 3339 with an offset (strict), so the instant never
    /// depends on the session's time zone.
    Timestamptz,
    /// An array of its element kind: a JSON array, element by element.
    Array(Box<ColumnKind>),
    /// A composite type: a JSON object, field by field (PostgreSQL's own conversion).
    Composite,
    /// Anything else (uuid, date, timestamp, inet, enums, …): a string for the type's
    /// input function.
    Other,
}

impl ColumnKind {
    /// From `pg_type`: the type's name and category, and for an array its element's.
    pub fn from_pg(typname: &str, category: &str, element: Option<(&str, &str)>) -> Self {
        match (category, element) {
            ("A", Some((name, category))) => {
                ColumnKind::Array(Box::new(ColumnKind::from_pg(name, category, None)))
            }
            ("C", _) => ColumnKind::Composite,
            _ => match typname {
                "int2" => ColumnKind::Integer {
                    min: i16::MIN.into(),
                    max: i16::MAX.into(),
                },
                "int4" => ColumnKind::Integer {
                    min: i32::MIN.into(),
                    max: i32::MAX.into(),
                },
                "int8" => ColumnKind::Integer {
                    min: i64::MIN,
                    max: i64::MAX,
                },
                "numeric" | "float4" | "float8" => ColumnKind::Number,
                "bool" => ColumnKind::Boolean,
                "text" | "varchar" | "bpchar" | "name" | "citext" => ColumnKind::Text,
                "json" | "jsonb" => ColumnKind::Json,
                "timestamptz" => ColumnKind::Timestamptz,
                _ => ColumnKind::Other,
            },
        }
    }
}

/// The value to place in the row for a column of `kind`, or why the record cannot go in.
/// JSON null never reaches here: it is NULL in every column.
pub fn convert(value: &Value, kind: &ColumnKind, coerce: Coerce) -> Result<Value, String> {
    let lenient = coerce == Coerce::Lenient;
    let refuse = |what: &str| {
        let hint = if lenient {
            ""
        } else {
            " (strict; [sink] coerce = \"lenient\" lets PostgreSQL parse scalars)"
        };
        Err(format!("takes no {what}{hint}"))
    };
    match (kind, value) {
        (ColumnKind::Json, v) => Ok(v.clone()),
        (_, Value::Null) => Ok(Value::Null),
        (ColumnKind::Integer { min, max }, Value::Number(n)) => {
            integer(&n.to_string(), *min, *max).map(Value::from)
        }
        (ColumnKind::Number, Value::Number(_)) => Ok(value.clone()),
        (ColumnKind::Boolean, Value::Bool(_)) => Ok(value.clone()),
        (ColumnKind::Text, Value::String(_)) => Ok(value.clone()),
        (ColumnKind::Timestamptz, Value::String(s)) => {
            match chrono::DateTime::parse_from_rfc3339(s) {
                _ if lenient => Ok(value.clone()),
                // timestamptz keeps microseconds: finer digits would be rounded away.
                Ok(at) if at.timestamp_subsec_nanos() % 1000 != 0 => Err(format!(
                    "keeps microseconds: {s:?} has finer digits, which would be rounded"
                )),
                Ok(_) => Ok(value.clone()),
                Err(_) => Err(format!(
                    "takes an RFC 3339 timestamp with an offset, not {s:?} (strict; [sink] coerce = \"lenient\" lets PostgreSQL parse it)"
                )),
            }
        }
        (ColumnKind::Other, Value::String(_)) => Ok(value.clone()),
        (ColumnKind::Composite, Value::Object(_)) => Ok(value.clone()),
        (ColumnKind::Array(element), Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                convert(item, element, coerce).map_err(|e| format!("element {i}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        // Lenient: text gets the exact JSON text of whatever it is given.
        (
            ColumnKind::Text,
            Value::Number(_) | Value::Bool(_) | Value::Object(_) | Value::Array(_),
        ) if lenient => Ok(Value::String(value.to_string())),
        // Lenient: a scalar goes to the column type's input function as text.
        (_, Value::String(_) | Value::Number(_) | Value::Bool(_)) if lenient => {
            Ok(Value::String(match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }))
        }
        (_, v) => refuse(json_type(v)),
    }
}

/// The name of a value's JSON type, as messages say it.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The integer a JSON number's text denotes, whatever its notation (`1e3`, `1000.0`):
/// refused when it has a fraction or does not fit `min..=max`. Exact: no float in between.
pub fn integer(text: &str, min: i64, max: i64) -> Result<i64, String> {
    integer_within(text, min.into(), max.into()).map(|v| v as i64)
}

/// [`integer`] over bounds wider than `i64` (the MySQL sink's `BIGINT UNSIGNED`, up to
/// 2^64 − 1, and every other width and signedness it maps).
pub fn integer_within(text: &str, min: i128, max: i128) -> Result<i128, String> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], &unsigned[at + 1..]),
        None => (unsigned, "0"),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = whole.chars().chain(fraction.chars()).collect();
    // The value is digits × 10^scale.
    let Ok(exponent) = exponent.trim_start_matches('+').parse::<i64>() else {
        return Err(format!("{text} is out of range"));
    };
    let mut scale = exponent - fraction.len() as i64;
    while scale < 0 && digits.ends_with('0') {
        digits.pop();
        scale += 1;
    }
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    if scale < 0 {
        return Err(format!("{text} is not an integer"));
    }
    let out_of_range = || format!("{text} is out of range ({min}..{max})");
    if digits.len() as i64 + scale > 20 {
        return Err(out_of_range());
    }
    let magnitude: i128 = format!("{digits}{}", "0".repeat(scale as usize))
        .parse()
        .map_err(|_| out_of_range())?;
    let value = if negative { -magnitude } else { magnitude };
    if value < min || value > max {
        return Err(out_of_range());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIGINT: ColumnKind = ColumnKind::Integer {
        min: i64::MIN,
        max: i64::MAX,
    };

    fn json(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn integers_in_any_notation_and_nothing_else() {
        assert_eq!(integer("1e3", i64::MIN, i64::MAX), Ok(1000));
        assert_eq!(integer("1000.0", i64::MIN, i64::MAX), Ok(1000));
        assert_eq!(integer("-12.50E1", i64::MIN, i64::MAX), Ok(-125));
        assert_eq!(integer("0e999999", i64::MIN, i64::MAX), Ok(0));
        assert_eq!(integer("-0.0", i64::MIN, i64::MAX), Ok(0));
        assert_eq!(
            integer("-9223372036854775808", i64::MIN, i64::MAX),
            Ok(i64::MIN)
        );
        assert!(integer("9223372036854775808", i64::MIN, i64::MAX).is_err());
        assert!(
            integer("1e400", i64::MIN, i64::MAX)
                .unwrap_err()
                .contains("out of range")
        );
        assert!(
            integer("1.5", i64::MIN, i64::MAX)
                .unwrap_err()
                .contains("not an integer")
        );
        assert!(integer("1e-1", i64::MIN, i64::MAX).is_err());
        assert!(integer("32768", i16::MIN.into(), i16::MAX.into()).is_err());
    }

    #[test]
    fn strict_takes_only_the_columns_own_type() {
        let strict = Coerce::Strict;
        assert_eq!(convert(&json("1e3"), &BIGINT, strict), Ok(json("1000")));
        assert!(convert(&json("\"12\""), &BIGINT, strict).is_err());
        assert!(convert(&json("\"yes\""), &ColumnKind::Boolean, strict).is_err());
        assert!(convert(&json("1"), &ColumnKind::Boolean, strict).is_err());
        assert!(convert(&json("{\"a\":1}"), &ColumnKind::Text, strict).is_err());
        let text_array = ColumnKind::Array(Box::new(ColumnKind::Text));
        assert!(convert(&json("\"{p,q}\""), &text_array, strict).is_err());
        assert!(convert(&json("[\"p\",1]"), &text_array, strict).is_err());
        assert_eq!(
            convert(&json("[\"p\",null]"), &text_array, strict),
            Ok(json("[\"p\",null]"))
        );
        assert!(convert(&json("\"2024-01-01\""), &ColumnKind::Timestamptz, strict).is_err());
        let ts = ColumnKind::Timestamptz;
        assert!(convert(&json("\"2024-01-01T10:00:00.123456Z\""), &ts, strict).is_ok());
        assert!(
            convert(
                &json("\"2024-01-01T10:00:00.123456000+02:00\""),
                &ts,
                strict
            )
            .is_ok()
        );
        let nanos = convert(&json("\"2024-01-01T10:00:00.123456789Z\""), &ts, strict);
        assert!(
            nanos.unwrap_err().contains("rounded"),
            "never rounded silently"
        );
        assert!(
            convert(
                &json("\"2024-01-01T10:00:00+02:00\""),
                &ColumnKind::Timestamptz,
                strict
            )
            .is_ok()
        );
    }

    #[test]
    fn numbers_keep_every_digit() {
        let big = json("123456789012345678901234567890.0000000000000000001");
        let kept = convert(&big, &ColumnKind::Number, Coerce::Strict).unwrap();
        assert_eq!(
            kept.to_string(),
            "123456789012345678901234567890.0000000000000000001"
        );
        let lenient = convert(&json("1e400"), &ColumnKind::Text, Coerce::Lenient).unwrap();
        assert_eq!(lenient, Value::String("1e+400".into()));
    }

    #[test]
    fn lenient_hands_scalars_to_postgresql_as_text() {
        let lenient = Coerce::Lenient;
        assert_eq!(
            convert(&json("\"yes\""), &ColumnKind::Boolean, lenient),
            Ok(json("\"yes\""))
        );
        assert_eq!(
            convert(&json("1"), &ColumnKind::Other, lenient),
            Ok(json("\"1\""))
        );
        assert_eq!(
            convert(&json("{\"a\":1.10}"), &ColumnKind::Text, lenient),
            Ok(json("\"{\\\"a\\\":1.10}\""))
        );
        assert!(convert(&json("{\"a\":1}"), &ColumnKind::Boolean, lenient).is_err());
        assert!(convert(&json("true"), &BIGINT, lenient).is_ok());
    }
}
