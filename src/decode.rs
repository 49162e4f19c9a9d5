//! Turns raw records into rows, or into dead letters that say what is wrong with them.

use serde_json::Value;

use crate::record::{DeadLetter, Record, Row};

/// How a record's key is found: a JSON pointer into the payload, or the source's own key.
#[derive(Debug, Clone)]
pub struct Decoder {
    key_pointer: Option<String>,
}

impl Decoder {
    pub fn new(key_pointer: Option<String>) -> Self {
        Decoder { key_pointer }
    }

    pub fn decode(&self, record: Record) -> Result<Row, DeadLetter> {
        let reject = |record: Record, reason: String| DeadLetter {
            origin: record.origin,
            key: None,
            raw: record.payload,
            reason,
            attempts: 1,
        };
        if let Some(len) = record.oversize {
            let limit = record.payload.len();
            return Err(reject(
                record,
                format!(
                    "record of {len} bytes exceeds source.max_record_bytes ({limit}); raw holds its first {limit} bytes"
                ),
            ));
        }
        let value: Value = match serde_json::from_slice(&record.payload) {
            Ok(v) => v,
            Err(e) => return Err(reject(record, format!("malformed JSON: {e}"))),
        };
        let key = match &self.key_pointer {
            None => record.fallback_key.clone(),
            Some(pointer) => match value.pointer(pointer) {
                None | Some(Value::Null) => {
                    return Err(reject(record, format!("missing key {pointer}")));
                }
                Some(Value::String(s)) if s.is_empty() => {
                    return Err(reject(record, format!("empty key {pointer}")));
                }
                Some(Value::String(s)) => s.clone(),
                Some(other @ (Value::Number(_) | Value::Bool(_))) => other.to_string(),
                Some(_) => {
                    return Err(reject(
                        record,
                        format!("key {pointer} is an object or array, not a scalar"),
                    ));
                }
            },
        };
        // The payload was valid JSON, hence valid UTF-8.
        let payload = String::from_utf8(record.payload).expect("JSON is UTF-8");
        Ok(Row {
            key,
            payload: payload.trim_end().to_string(),
            origin: record.origin,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Position;

    fn rec(payload: &str) -> Record {
        Record {
            position: Position {
                lane: 0,
                start: 0,
                end: 1,
            },
            origin: "in:1".into(),
            fallback_key: "in:1".into(),
            payload: payload.as_bytes().to_vec(),
            oversize: None,
        }
    }

    #[test]
    fn keys_by_pointer_or_fallback() {
        let d = Decoder::new(Some("/id".into()));
        assert_eq!(d.decode(rec(r#"{"id":"a"}"#)).unwrap().key, "a");
        assert_eq!(d.decode(rec(r#"{"id":42}"#)).unwrap().key, "42");
        let nested = Decoder::new(Some("/o/k".into()));
        assert_eq!(nested.decode(rec(r#"{"o":{"k":7}}"#)).unwrap().key, "7");
        assert_eq!(Decoder::new(None).decode(rec("{}")).unwrap().key, "in:1");
    }

    #[test]
    fn numbers_keep_every_digit() {
        let d = Decoder::new(Some("/id".into()));
        let payload =
            r#"{"id":123456789012345678901234567890,"x":1.0000000000000000001,"y":1e400}"#;
        let row = d.decode(rec(payload)).unwrap();
        assert_eq!(row.key, "123456789012345678901234567890");
        assert_eq!(row.payload, payload);
        let huge = Decoder::new(Some("/y".into()));
        assert_eq!(huge.decode(rec(payload)).unwrap().key, "1e+400");
    }

    #[test]
    fn bad_records_become_dead_letters_with_reasons() {
        let d = Decoder::new(Some("/id".into()));
        assert!(
            d.decode(rec("{not json"))
                .unwrap_err()
                .reason
                .contains("malformed JSON")
        );
        assert!(
            d.decode(rec(r#"{"x":1}"#))
                .unwrap_err()
                .reason
                .contains("missing key /id")
        );
        assert!(
            d.decode(rec(r#"{"id":null}"#))
                .unwrap_err()
                .reason
                .contains("missing key")
        );
        assert!(
            d.decode(rec(r#"{"id":[1]}"#))
                .unwrap_err()
                .reason
                .contains("not a scalar")
        );
        let mut big = rec("{\"id\":");
        big.oversize = Some(5_000_000);
        assert!(d.decode(big).unwrap_err().reason.contains("5000000 bytes"));
    }
}
