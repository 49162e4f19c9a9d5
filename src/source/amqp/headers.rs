//! A message's AMQP header table as a dead letter keeps it: each header in order, strings
//! and byte arrays as the bytes sent (the letter shows text, or hex for bytes that are not
//! UTF-8), every other type as the JSON value it is — numbers as numbers, booleans,
//! timestamps as seconds since the epoch, nested tables and arrays as JSON objects and
//! arrays — never the AMQP library's own names for the types (`{"LongInt":1}`).

use std::str::FromStr;

use lapin::types::{AMQPValue, FieldTable};
use serde_json::{Number, Value, json};

use crate::record::HeaderValue;

/// The header table as name/value pairs; a void value as none.
pub(super) fn header_list(table: &FieldTable) -> Vec<(String, Option<HeaderValue>)> {
    table
        .inner()
        .iter()
        .map(|(name, value)| (name.as_str().to_string(), header_value(value)))
        .collect()
}

fn header_value(value: &AMQPValue) -> Option<HeaderValue> {
    match value {
        AMQPValue::Void => None,
        AMQPValue::LongString(s) => Some(HeaderValue::Bytes(s.as_bytes().to_vec())),
        AMQPValue::ShortString(s) => Some(HeaderValue::Bytes(s.as_str().as_bytes().to_vec())),
        AMQPValue::ByteArray(b) => Some(HeaderValue::Bytes(b.as_slice().to_vec())),
        other => Some(HeaderValue::Json(json_of(other))),
    }
}

/// A value as JSON. Inside a table or an array, bytes are text when UTF-8, else
/// `{"value_hex": "…"}` as at the top level.
fn json_of(value: &AMQPValue) -> Value {
    match value {
        AMQPValue::Boolean(b) => json!(b),
        AMQPValue::ShortShortInt(n) => json!(n),
        AMQPValue::ShortShortUInt(n) => json!(n),
        AMQPValue::ShortInt(n) => json!(n),
        AMQPValue::ShortUInt(n) => json!(n),
        AMQPValue::LongInt(n) => json!(n),
        AMQPValue::LongUInt(n) => json!(n),
        AMQPValue::LongLongInt(n) => json!(n),
        AMQPValue::Timestamp(t) => json!(t),
        // Written as the shortest text that reads back as the same float: 0.1f32 is 0.1,
        // not 0.10000000149011612.
        AMQPValue::Float(f) => float(f.is_finite(), f.to_string()),
        AMQPValue::Double(d) => float(d.is_finite(), d.to_string()),
        AMQPValue::DecimalValue(d) => decimal(d.value, d.scale),
        AMQPValue::LongString(s) => bytes(s.as_bytes()),
        AMQPValue::ShortString(s) => json!(s.as_str()),
        AMQPValue::ByteArray(b) => bytes(b.as_slice()),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(json_of).collect()),
        AMQPValue::FieldTable(t) => Value::Object(
            t.inner()
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), json_of(v)))
                .collect(),
        ),
        AMQPValue::Void => Value::Null,
    }
}

/// A float as a JSON number; NaN and the infinities, which JSON has no number for, as
/// their names.
fn float(finite: bool, text: String) -> Value {
    match Number::from_str(&text) {
        Ok(n) if finite => Value::Number(n),
        _ => Value::String(text),
    }
}

/// An AMQP decimal (`value` × 10^-`scale`) as the exact JSON number it is.
fn decimal(value: u32, scale: u8) -> Value {
    let digits = format!("{value:0>width$}", width = usize::from(scale) + 1);
    let (whole, fraction) = digits.split_at(digits.len() - usize::from(scale));
    let text = if fraction.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{fraction}")
    };
    Number::from_str(&text).map_or(Value::String(text), Value::Number)
}

fn bytes(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(text) => json!(text),
        Err(_) => json!({ "value_hex": hex::encode(b) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{ByteArray, DecimalValue, FieldArray, LongString, ShortString};

    #[test]
    fn every_type_reads_as_its_json() {
        let mut nested = FieldTable::default();
        nested.insert(ShortString::from("n"), AMQPValue::LongInt(-1));
        nested.insert(
            ShortString::from("raw"),
            AMQPValue::ByteArray(ByteArray::from(vec![0xff_u8])),
        );
        let cases = [
            (AMQPValue::LongInt(1), json!(1)),
            (AMQPValue::LongLongInt(i64::MIN), json!(i64::MIN)),
            (AMQPValue::Boolean(true), json!(true)),
            (AMQPValue::Float(0.1), json!(0.1)),
            (AMQPValue::Double(f64::NAN), json!("NaN")),
            (AMQPValue::Timestamp(1_700_000_000), json!(1_700_000_000)),
            (
                AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 5 }),
                serde_json::from_str("0.05").unwrap(),
            ),
            (
                AMQPValue::DecimalValue(DecimalValue { scale: 0, value: 7 }),
                json!(7),
            ),
            (
                AMQPValue::FieldArray(FieldArray::from(vec![
                    AMQPValue::LongString(LongString::from("a")),
                    AMQPValue::ShortInt(2),
                ])),
                json!(["a", 2]),
            ),
            (
                AMQPValue::FieldTable(nested),
                json!({"n": -1, "raw": {"value_hex": "ff"}}),
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(
                header_value(&value),
                Some(HeaderValue::Json(expected)),
                "{value:?}"
            );
        }
        assert_eq!(
            header_value(&AMQPValue::ByteArray(ByteArray::from(vec![0xff_u8, 0xfe]))),
            Some(HeaderValue::Bytes(vec![0xff, 0xfe]))
        );
        assert_eq!(header_value(&AMQPValue::Void), None);
    }
}
