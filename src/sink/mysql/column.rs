//! What a mapped column is, and the text a JSON value is bound as for it. Values travel
//! as text for the server to convert in strict mode, where a value the column cannot hold
//! is an error (dead-lettered with its number). Strict mode still changes some values
//! with a mere note, and those are checked here and refused naming the column: a number
//! (or a string of one) rounded into an integer or DECIMAL column, a float too small for
//! its type stored as 0, a string whose excess trailing spaces a VARCHAR cuts or that a
//! CHAR gives back without its trailing spaces, a time's fractional digits beyond the
//! column's precision, a time of day dropped by a DATE column.

use serde_json::Value;

use crate::sink::column_fit::time::{date_text, time_text};
use crate::sink::column_fit::{
    Digits, Float, TextLimit, decimal_within, float_within, integer_within,
};

/// What a column is, as far as binding JSON to it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum MysqlColumnKind {
    /// MySQL's `JSON`, MariaDB's `JSON` alias (LONGTEXT with its `json_valid` check): any
    /// value as JSON text, a string included.
    Json,
    /// TINYINT … BIGINT, signed or unsigned (BOOLEAN is TINYINT(1)): a number must be
    /// integral and within `min..=max`.
    Integer { min: i128, max: i128 },
    /// DECIMAL(precision, scale): a number must fit both; MySQL would round the rest.
    Decimal { precision: u32, scale: i32 },
    /// FLOAT and DOUBLE: the nearest value of the type (see `float_within`); with
    /// `(M,D)` at most `D` decimal places, which MySQL would round.
    Float { float: Float, scale: Option<u32> },
    /// CHAR, VARCHAR, the TEXT types, VARBINARY and the BLOB types: within the length.
    Text(TextLimit),
    /// DATETIME(p) and TIMESTAMP(p): a string, sent in the column's form.
    DateTime { precision: u32 },
    /// DATE: a string of a date, or of a time at midnight.
    Date,
    /// Anything else (TIME, YEAR, BINARY, BIT, ENUM, SET, …): the server converts the text.
    Other,
}

/// A column as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, Default)]
pub struct Described {
    pub data_type: String,
    pub column_type: String,
    pub numeric_precision: Option<u64>,
    pub numeric_scale: Option<u64>,
    pub datetime_precision: Option<u64>,
    pub max_chars: Option<u64>,
    pub max_bytes: Option<u64>,
}

impl MysqlColumnKind {
    pub fn of(c: &Described) -> Self {
        let unsigned = c.column_type.to_ascii_lowercase().contains("unsigned");
        let small = |v: Option<u64>| v.and_then(|v| u32::try_from(v).ok());
        let data_type = c.data_type.to_ascii_lowercase();
        let bits = match data_type.as_str() {
            "json" => return MysqlColumnKind::Json,
            "datetime" | "timestamp" => {
                return MysqlColumnKind::DateTime {
                    precision: small(c.datetime_precision).unwrap_or(0),
                };
            }
            "date" => return MysqlColumnKind::Date,
            "decimal" | "numeric" => {
                return match (small(c.numeric_precision), small(c.numeric_scale)) {
                    (Some(precision), Some(scale)) => MysqlColumnKind::Decimal {
                        precision,
                        scale: scale as i32,
                    },
                    _ => MysqlColumnKind::Other,
                };
            }
            "float" | "double" | "real" => {
                return MysqlColumnKind::Float {
                    float: match data_type.as_str() {
                        "float" => Float::Single,
                        _ => Float::Double,
                    },
                    scale: small(c.numeric_scale),
                };
            }
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "varbinary"
            | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
                return MysqlColumnKind::Text(TextLimit {
                    chars: c.max_chars,
                    bytes: c.max_bytes,
                    padded: data_type == "char",
                });
            }
            "tinyint" => 8,
            "smallint" => 16,
            "mediumint" => 24,
            "int" | "integer" => 32,
            "bigint" => 64,
            _ => return MysqlColumnKind::Other,
        };
        let (min, max) = match unsigned {
            true => (0, (1i128 << bits) - 1),
            false => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
        };
        MysqlColumnKind::Integer { min, max }
    }

    fn numeric(&self) -> bool {
        matches!(
            self,
            MysqlColumnKind::Integer { .. }
                | MysqlColumnKind::Decimal { .. }
                | MysqlColumnKind::Float { .. }
        )
    }
}

/// The text a value is bound as, `None` for NULL: for a JSON column its JSON text;
/// otherwise a string as it is (one of a number, for a numeric column, checked as that
/// number), a number with every digit of its JSON text (an integer column's normalised:
/// `1e3` is 1000), a boolean as 1 or 0 (MySQL's BOOLEAN is TINYINT(1)), an array or
/// object as its JSON text. A time column takes only strings: a number there would be
/// read as digits of a date (`20240501`), never as the epoch seconds it more likely is.
pub fn text(value: &Value, kind: &MysqlColumnKind) -> Result<Option<String>, String> {
    let number = match (value, kind) {
        (Value::Null, _) => return Ok(None),
        (_, MysqlColumnKind::Json) => return Ok(Some(value.to_string())),
        (Value::Number(n), _) => Some(n.to_string()),
        // MySQL reads a string of a number with spaces around it, `+5`, `.5` and `5.`.
        (Value::String(s), kind) if kind.numeric() => {
            let trimmed = s.trim_matches(' ');
            Digits::parse(trimmed).map(|_| trimmed.to_string())
        }
        _ => None,
    };
    let text = match (value, kind, number) {
        (_, MysqlColumnKind::DateTime { .. } | MysqlColumnKind::Date, _) => {
            let Value::String(s) = value else {
                return Err(format!("takes a time as a string, not {value}"));
            };
            // A form not read here goes as it is: the server takes it or refuses it.
            match kind {
                MysqlColumnKind::DateTime { precision } => time_text(s, *precision)?,
                _ => date_text(s)?,
            }
            .unwrap_or_else(|| s.clone())
        }
        (_, MysqlColumnKind::Integer { min, max }, Some(n)) => {
            integer_within(&n, *min, *max)?.to_string()
        }
        (_, MysqlColumnKind::Decimal { precision, scale }, Some(n)) => {
            decimal_within(&n, *precision, *scale)?;
            n
        }
        (_, MysqlColumnKind::Float { float, scale }, Some(n)) => {
            float_within(&n, *float)?;
            if let Some(scale) = scale {
                decimal_within(&n, u32::MAX, *scale as i32)?;
            }
            n
        }
        (Value::String(s), _, _) => s.clone(),
        (Value::Bool(b), _, _) => if *b { "1" } else { "0" }.to_string(),
        (_, _, Some(n)) => n,
        _ => value.to_string(),
    };
    if let MysqlColumnKind::Text(limit) = kind {
        limit.check(&text)?;
    }
    Ok(Some(text))
}

#[cfg(test)]
#[path = "column_tests.rs"]
mod tests;
