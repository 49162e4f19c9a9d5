//! Turns raw records into rows, or into dead letters that say what is wrong with them.

use serde_json::Value;

use crate::record::{DeadLetter, Record, Row};
use crate::sink::upsert::{MESSAGE_KEY, Upsert};

/// How a record's key is found: a JSON pointer into the payload, the Kafka message key
/// (`@key`), or the source's own key; and in upsert mode its version and whether it deletes.
#[derive(Debug, Clone)]
pub struct Decoder {
    key_pointer: Option<String>,
    upsert: Option<Upsert>,
}

impl Decoder {
    pub fn new(key_pointer: Option<String>) -> Self {
        Decoder {
            key_pointer,
            upsert: None,
        }
    }

    /// Decodes for upsert mode: every row gets a version; tombstones and flagged records
    /// become deletes.
    pub fn with_upsert(self, upsert: Option<Upsert>) -> Self {
        Decoder { upsert, ..self }
    }

    /// Whether records decode for upsert mode (each with a version).
    pub fn is_upsert(&self) -> bool {
        self.upsert.is_some()
    }

    pub fn decode(&self, mut record: Record) -> Result<Row, DeadLetter> {
        let reject = |record: Record, reason: String| DeadLetter {
            origin: record.origin,
            key: None,
            raw: record.payload,
            reason,
            attempts: 1,
            context: Box::new(record.context),
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
        if let Some(why) = record.undecodable.take() {
            return Err(reject(record, why));
        }
        if record.context.tombstone {
            if let Some(upsert) = self.upsert.as_ref().filter(|u| u.delete_on_tombstone) {
                let key = match message_key(&record) {
                    Ok(key) => key,
                    Err(reason) => return Err(reject(record, reason)),
                };
                let version = match upsert.version_of(record.position.start, None) {
                    Ok(v) => v,
                    Err(reason) => return Err(keyed(reject(record, reason), key)),
                };
                return Ok(Row {
                    key,
                    payload: String::new(),
                    origin: record.origin,
                    context: record.context,
                    version: Some(version),
                    delete: true,
                });
            }
            return Err(reject(
                record,
                "tombstone: the message has no value (a delete marker), nothing to write".into(),
            ));
        }
        if record.payload.trim_ascii().is_empty() {
            return Err(reject(record, "empty record: no JSON value".into()));
        }
        let value: Value = match serde_json::from_slice(&record.payload) {
            Ok(v) => v,
            Err(e) => return Err(reject(record, format!("malformed JSON: {e}"))),
        };
        let key = match &self.key_pointer {
            None => record.fallback_key.clone(),
            Some(at) if at == MESSAGE_KEY => match message_key(&record) {
                Ok(key) => key,
                Err(reason) => return Err(reject(record, reason)),
            },
            Some(pointer) => match value.pointer(pointer) {
                None | Some(Value::Null) => {
                    return Err(reject(record, format!("missing key {pointer}")));
                }
                Some(Value::String(s)) if s.is_empty() => {
                    return Err(reject(record, format!("empty key {pointer}")));
                }
                Some(Value::String(s)) => string_key(s),
                Some(other @ (Value::Number(_) | Value::Bool(_))) => other.to_string(),
                Some(_) => {
                    return Err(reject(
                        record,
                        format!("key {pointer} is an object or array, not a scalar"),
                    ));
                }
            },
        };
        let (version, delete) = match &self.upsert {
            None => (None, false),
            Some(upsert) => match upsert.version_of(record.position.start, Some(&value)) {
                Ok(v) => (Some(v), upsert.is_delete(&value)),
                Err(reason) => return Err(keyed(reject(record, reason), key)),
            },
        };
        // The payload was valid JSON, hence valid UTF-8.
        let payload = String::from_utf8(record.payload).expect("JSON is UTF-8");
        Ok(Row {
            key,
            payload: payload.trim_end().to_string(),
            origin: record.origin,
            context: record.context,
            version,
            delete,
        })
    }
}

/// A letter for a record whose key was found before its fault: it keeps the key, so the
/// letter says which record it was.
fn keyed(letter: DeadLetter, key: String) -> DeadLetter {
    DeadLetter {
        key: Some(key),
        ..letter
    }
}

/// The Kafka message key as the record key: its bytes as text, as the producer sent them.
fn message_key(record: &Record) -> Result<String, String> {
    match record.context.key.as_deref() {
        None | Some([]) => Err("missing key: the message has no key (sink.key = \"@key\")".into()),
        Some(bytes) => String::from_utf8(bytes.to_vec())
            .map_err(|_| "the message key is not UTF-8 text (sink.key = \"@key\")".into()),
    }
}

/// A string key as stored: as it is, unless its text would read as another JSON type
/// (`"5"` next to `5`, `"true"` next to `true`) or as a quoted string; then in its JSON
/// form, quotes included. Keys of different JSON types never collide, and every key that
/// could not be mistaken (a UUID, a name) is stored exactly as before.
fn string_key(s: &str) -> String {
    if serde_json::from_str::<Value>(s).is_ok_and(|v| !v.is_array() && !v.is_object()) {
        Value::String(s.to_string()).to_string()
    } else {
        s.to_string()
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
            undecodable: None,
            context: Default::default(),
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

    #[test]
    fn keys_keep_their_json_type() {
        let d = Decoder::new(Some("/id".into()));
        let key = |json: &str| d.decode(rec(json)).unwrap().key;
        assert_eq!(key(r#"{"id":5}"#), "5");
        assert_eq!(key(r#"{"id":"5"}"#), r#""5""#);
        assert_eq!(key(r#"{"id":true}"#), "true");
        assert_eq!(key(r#"{"id":"true"}"#), r#""true""#);
        assert_eq!(key(r#"{"id":"null"}"#), r#""null""#);
        assert_eq!(key(r#"{"id":"\"5\""}"#), r#""\"5\"""#);
        // Keys that no other type could produce are stored as they are.
        assert_eq!(key(r#"{"id":"abc"}"#), "abc");
        assert_eq!(key(r#"{"id":"0042"}"#), "0042");
        assert_eq!(key(r#"{"id":"[1]"}"#), "[1]");
        assert_eq!(
            key(r#"{"id":"6f1c-uuid"}"#),
            "6f1c-uuid",
            "a UUID-like key is unchanged"
        );
    }

    #[test]
    fn upsert_rows_carry_versions_and_deletes() {
        use crate::sink::upsert::{Upsert, VersionFrom};
        let by_offset = Decoder::new(Some(MESSAGE_KEY.into())).with_upsert(Some(Upsert {
            version: VersionFrom::Source,
            delete_on_tombstone: true,
            delete_flag: None,
        }));
        let mut keyed = rec(r#"{"n":1}"#);
        keyed.position.start = 77;
        keyed.context.key = Some(b"k-1".to_vec());
        let row = by_offset.decode(keyed.clone()).unwrap();
        assert_eq!((row.key.as_str(), row.delete), ("k-1", false));
        assert_eq!(row.version.unwrap().numeric, "77");
        keyed.context.tombstone = true;
        keyed.payload.clear();
        let row = by_offset.decode(keyed.clone()).unwrap();
        assert!(row.delete);
        assert_eq!(row.key, "k-1");
        keyed.context.key = None;
        assert!(
            by_offset
                .decode(keyed)
                .unwrap_err()
                .reason
                .contains("no key")
        );
        let by_field = Decoder::new(Some("/id".into())).with_upsert(Some(Upsert {
            version: VersionFrom::Pointer("/at".into()),
            delete_on_tombstone: false,
            delete_flag: Some("/gone".into()),
        }));
        let row = by_field
            .decode(rec(r#"{"id":1,"at":"2024-01-01T00:00:00Z","gone":true}"#))
            .unwrap();
        assert!(row.delete);
        assert_eq!(row.version.unwrap().numeric, "1704067200000000000");
        let letter = by_field.decode(rec(r#"{"id":1,"at":"soon"}"#)).unwrap_err();
        assert!(letter.reason.contains("version /at"), "{}", letter.reason);
        assert_eq!(
            letter.key.as_deref(),
            Some("1"),
            "a bad version keeps the key"
        );
        let missing = by_field.decode(rec(r#"{"id":1}"#)).unwrap_err();
        assert_eq!(missing.reason, "missing version /at");
        assert_eq!(
            missing.key.as_deref(),
            Some("1"),
            "a missing version keeps the key"
        );
    }

    #[test]
    fn tombstones_and_empty_records_say_what_they_are() {
        let d = Decoder::new(Some("/id".into()));
        let mut tombstone = rec("");
        tombstone.context.tombstone = true;
        tombstone.context.key = Some(b"order-1".to_vec());
        let letter = d.decode(tombstone).unwrap_err();
        assert!(letter.reason.starts_with("tombstone:"), "{}", letter.reason);
        assert_eq!(letter.context.key.as_deref(), Some(&b"order-1"[..]));
        for empty in ["", " \n"] {
            let reason = d.decode(rec(empty)).unwrap_err().reason;
            assert_eq!(reason, "empty record: no JSON value");
        }
        assert!(
            d.decode(rec("{"))
                .unwrap_err()
                .reason
                .starts_with("malformed JSON")
        );
    }
}
