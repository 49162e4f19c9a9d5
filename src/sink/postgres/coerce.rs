//! Which JSON value a mapped column takes, and as what: the JSON type × column type table
//! of the book (docs/sinks/postgres.md). Strict (the default) writes a value only when its JSON type is the
//! column's own; lenient also hands strings (and numbers, booleans) to PostgreSQL's input
//! function for the column type, as text. Numbers always travel as their exact JSON text.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sink::column_fit::time::{date_text, time_text};
use crate::sink::column_fit::{Float, TextLimit, decimal_within, float_within, fraction_within};

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
    /// numeric: a number, as its exact text; `numeric(precision, scale)` only one that
    /// fits it, which PostgreSQL would otherwise round.
    Numeric {
        digits: Option<(u32, i32)>,
    },
    /// real, double precision: a number, rounded to the nearest float by PostgreSQL;
    /// one out of the type's range or too small for it is refused (see `float_within`).
    Float(Float),
    Boolean,
    /// text, varchar, char, name, citext: a string within the type's length (PostgreSQL
    /// cuts excess trailing spaces of a `varchar(n)` without a word, `name` any excess).
    Text(TextLimit),
    /// json, jsonb: any JSON value, kept as it is.
    Json,
    /// timestamptz(precision): a string in RFC 3339 with an offset (strict), so the
    /// instant never depends on the session's time zone, and with no more fractional
    /// digits than the column keeps (PostgreSQL would round them).
    Timestamptz {
        precision: u32,
    },
    /// timestamp(precision), without time zone: a string, converted to UTC when it has
    /// an offset (PostgreSQL would drop the offset) and refused with more fractional
    /// digits than the column keeps (see `column_fit::time`).
    Timestamp {
        precision: u32,
    },
    /// date: a string of a date, or of a time at midnight (PostgreSQL would drop a time
    /// of day).
    Date,
    /// An array of its element kind: a JSON array, element by element.
    Array(Box<ColumnKind>),
    /// A composite type: a JSON object, field by field (PostgreSQL's own conversion).
    Composite,
    /// Anything else (uuid, time, interval, inet, enums, …): a string for the type's
    /// input function.
    Other,
}

/// `pg_attribute.atttypmod`'s header: a length or precision is stored 4 more.
const VARHDRSZ: i32 = 4;

/// Bytes of a `name` (NAMEDATALEN − 1).
const NAME_BYTES: u64 = 63;

impl ColumnKind {
    /// From `pg_type` and `pg_attribute`: the type's name and category, the column's
    /// type modifier (`-1`: none; an array's applies to its elements), and for an array
    /// its element's name and category.
    pub fn from_pg(
        typname: &str,
        category: &str,
        typmod: i32,
        element: Option<(&str, &str)>,
    ) -> Self {
        let modified = (typmod >= 0).then_some(typmod);
        match (category, element) {
            ("A", Some((name, category))) => {
                ColumnKind::Array(Box::new(ColumnKind::from_pg(name, category, typmod, None)))
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
                "numeric" => ColumnKind::Numeric {
                    digits: modified.map(|m| {
                        let m = m - VARHDRSZ;
                        // PostgreSQL 15's layout: an 11-bit signed scale below the precision.
                        (((m >> 16) & 0xffff) as u32, ((m & 0x7ff) ^ 1024) - 1024)
                    }),
                },
                "float4" => ColumnKind::Float(Float::Single),
                "float8" => ColumnKind::Float(Float::Double),
                "bool" => ColumnKind::Boolean,
                "text" | "citext" => ColumnKind::Text(TextLimit::default()),
                "varchar" | "bpchar" => ColumnKind::Text(TextLimit {
                    chars: modified.map(|m| (m - VARHDRSZ).max(0) as u64),
                    bytes: None,
                    padded: typname == "bpchar",
                }),
                "name" => ColumnKind::Text(TextLimit {
                    bytes: Some(NAME_BYTES),
                    ..TextLimit::default()
                }),
                "json" | "jsonb" => ColumnKind::Json,
                "timestamptz" => ColumnKind::Timestamptz {
                    precision: modified.map_or(6, |p| p as u32),
                },
                "timestamp" => ColumnKind::Timestamp {
                    precision: modified.map_or(6, |p| p as u32),
                },
                "date" => ColumnKind::Date,
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
    // The row travels as jsonb, which cannot hold it: the whole batch would fail.
    if holds_nul(value) {
        return Err("holds \\u0000, which PostgreSQL's text and jsonb cannot".into());
    }
    match (kind, value) {
        (ColumnKind::Json, v) => Ok(v.clone()),
        (_, Value::Null) => Ok(Value::Null),
        (ColumnKind::Integer { min, max }, Value::Number(n)) => {
            integer(&n.to_string(), *min, *max).map(Value::from)
        }
        (ColumnKind::Numeric { digits }, Value::Number(n)) => {
            if let Some((precision, scale)) = digits {
                decimal_within(&n.to_string(), *precision, *scale)?;
            }
            Ok(value.clone())
        }
        (ColumnKind::Float(float), Value::Number(n)) => {
            float_within(&n.to_string(), *float)?;
            Ok(value.clone())
        }
        (ColumnKind::Boolean, Value::Bool(_)) => Ok(value.clone()),
        (ColumnKind::Text(limit), Value::String(s)) => {
            limit.check(s)?;
            Ok(value.clone())
        }
        (ColumnKind::Timestamptz { precision }, Value::String(s)) => {
            match chrono::DateTime::parse_from_rfc3339(s) {
                _ if lenient => Ok(value.clone()),
                Ok(_) => {
                    fraction_within(s, *precision)?;
                    Ok(value.clone())
                }
                Err(_) => Err(format!(
                    "takes an RFC 3339 timestamp with an offset, not {s:?} (strict; [sink] coerce = \"lenient\" lets PostgreSQL parse it)"
                )),
            }
        }
        (ColumnKind::Timestamp { .. } | ColumnKind::Date, Value::String(s)) => {
            let text = match kind {
                ColumnKind::Timestamp { precision } => time_text(s, *precision)?,
                _ => date_text(s)?,
            };
            match text {
                Some(text) => Ok(Value::String(text)),
                None if lenient => Ok(value.clone()),
                None => Err(format!(
                    "takes RFC 3339 or YYYY-MM-DD[ HH:MM:SS[.fraction]], not {s:?} (strict; [sink] coerce = \"lenient\" lets PostgreSQL parse it)"
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
            ColumnKind::Text(limit),
            Value::Number(_) | Value::Bool(_) | Value::Object(_) | Value::Array(_),
        ) if lenient => {
            let text = value.to_string();
            limit.check(&text)?;
            Ok(Value::String(text))
        }
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

/// Whether a value, or anything in it, is a string (or a field name) holding NUL.
fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(fields) => fields.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
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
    crate::sink::column_fit::integer_within(text, min.into(), max.into()).map(|v| v as i64)
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

    const TEXT: ColumnKind = ColumnKind::Text(TextLimit {
        chars: None,
        bytes: None,
        padded: false,
    });

    const TIMESTAMPTZ: ColumnKind = ColumnKind::Timestamptz { precision: 6 };

    #[test]
    fn type_modifiers_become_the_columns_limits() {
        let kind = |name: &str, typmod: i32| ColumnKind::from_pg(name, "N", typmod, None);
        assert_eq!(
            kind("numeric", ((10 << 16) | 2) + VARHDRSZ),
            ColumnKind::Numeric {
                digits: Some((10, 2))
            }
        );
        // numeric(2,-3), PostgreSQL 15's negative scale.
        assert_eq!(
            kind("numeric", ((2 << 16) | (-3i32 & 0x7ff)) + VARHDRSZ),
            ColumnKind::Numeric {
                digits: Some((2, -3))
            }
        );
        assert_eq!(kind("numeric", -1), ColumnKind::Numeric { digits: None });
        assert_eq!(kind("float4", -1), ColumnKind::Float(Float::Single));
        let varchar = kind("varchar", 5 + VARHDRSZ);
        assert_eq!(
            varchar,
            ColumnKind::Text(TextLimit {
                chars: Some(5),
                bytes: None,
                padded: false
            })
        );
        assert!(matches!(kind("bpchar", 9), ColumnKind::Text(l) if l.padded && l.chars == Some(5)));
        assert_eq!(kind("text", -1), TEXT);
        assert_eq!(kind("timestamptz", -1), TIMESTAMPTZ);
        assert_eq!(
            kind("timestamptz", 0),
            ColumnKind::Timestamptz { precision: 0 }
        );
        let array = ColumnKind::from_pg("_varchar", "A", 5 + VARHDRSZ, Some(("varchar", "S")));
        assert_eq!(array, ColumnKind::Array(Box::new(varchar)));
    }

    #[test]
    fn values_the_column_would_change_are_refused() {
        let strict = Coerce::Strict;
        let numeric = ColumnKind::Numeric {
            digits: Some((10, 2)),
        };
        assert_eq!(convert(&json("12.30"), &numeric, strict), Ok(json("12.30")));
        assert!(
            convert(&json("12.345"), &numeric, strict)
                .unwrap_err()
                .contains("not rounded")
        );
        let varchar = ColumnKind::Text(TextLimit {
            chars: Some(5),
            bytes: None,
            padded: false,
        });
        assert!(convert(&json("\"abcde \""), &varchar, strict).is_err());
        let nul = convert(&json("{\"a\":[\"x\\u0000\"]}"), &ColumnKind::Json, strict);
        assert!(nul.unwrap_err().contains("\\u0000"));
        assert!(convert(&json("123456"), &varchar, Coerce::Lenient).is_err());
        let real = ColumnKind::Float(Float::Single);
        assert_eq!(convert(&json("0.1"), &real, strict), Ok(json("0.1")));
        assert!(convert(&json("1e39"), &real, strict).is_err());
        assert!(convert(&json("1e-50"), &real, strict).is_err());
        let timestamp = ColumnKind::from_pg("timestamp", "D", 3, None);
        assert_eq!(
            convert(&json("\"2024-01-01T10:00:00.5+02:00\""), &timestamp, strict),
            Ok(json("\"2024-01-01 08:00:00.500\"")),
            "in UTC, not with its offset dropped"
        );
        assert!(convert(&json("\"2024-01-01 10:00:00.0005\""), &timestamp, strict).is_err());
        assert!(convert(&json("\"yesterday\""), &timestamp, strict).is_err());
        assert_eq!(
            convert(&json("\"yesterday\""), &timestamp, Coerce::Lenient),
            Ok(json("\"yesterday\""))
        );
        let date = ColumnKind::from_pg("date", "D", -1, None);
        assert_eq!(
            convert(&json("\"2024-01-01T00:00:00Z\""), &date, strict),
            Ok(json("\"2024-01-01\""))
        );
        assert!(convert(&json("\"2024-01-01T10:00:00\""), &date, Coerce::Lenient).is_err());
        let ts0 = ColumnKind::Timestamptz { precision: 0 };
        assert!(convert(&json("\"2024-01-01T10:00:00Z\""), &ts0, strict).is_ok());
        assert!(convert(&json("\"2024-01-01T10:00:00.5Z\""), &ts0, strict).is_err());
    }

    #[test]
    fn strict_takes_only_the_columns_own_type() {
        let strict = Coerce::Strict;
        assert_eq!(convert(&json("1e3"), &BIGINT, strict), Ok(json("1000")));
        assert!(convert(&json("\"12\""), &BIGINT, strict).is_err());
        assert!(convert(&json("\"yes\""), &ColumnKind::Boolean, strict).is_err());
        assert!(convert(&json("1"), &ColumnKind::Boolean, strict).is_err());
        assert!(convert(&json("{\"a\":1}"), &TEXT, strict).is_err());
        let text_array = ColumnKind::Array(Box::new(TEXT));
        assert!(convert(&json("\"{p,q}\""), &text_array, strict).is_err());
        assert!(convert(&json("[\"p\",1]"), &text_array, strict).is_err());
        assert_eq!(
            convert(&json("[\"p\",null]"), &text_array, strict),
            Ok(json("[\"p\",null]"))
        );
        assert!(convert(&json("\"2024-01-01\""), &TIMESTAMPTZ, strict).is_err());
        let ts = TIMESTAMPTZ;
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
        assert!(convert(&json("\"2024-01-01T10:00:00+02:00\""), &TIMESTAMPTZ, strict).is_ok());
    }

    #[test]
    fn numbers_keep_every_digit() {
        let big = json("123456789012345678901234567890.0000000000000000001");
        let kept = convert(&big, &ColumnKind::Numeric { digits: None }, Coerce::Strict).unwrap();
        assert_eq!(
            kept.to_string(),
            "123456789012345678901234567890.0000000000000000001"
        );
        let lenient = convert(&json("1e400"), &TEXT, Coerce::Lenient).unwrap();
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
            convert(&json("{\"a\":1.10}"), &TEXT, lenient),
            Ok(json("\"{\\\"a\\\":1.10}\""))
        );
        assert!(convert(&json("{\"a\":1}"), &ColumnKind::Boolean, lenient).is_err());
        assert!(convert(&json("true"), &BIGINT, lenient).is_ok());
    }
}
