//! How rows travel in a request body. Every record is wrapped with its key, so that the
//! endpoint can deduplicate a redelivered record:
//!
//! ```json
//! {"key":"42","source":"orders.ndjson:17","record":{"id":42,"total":9.5}}
//! ```
//!
//! `json-array` sends `[envelope, …]`; `ndjson` sends one envelope per line. The request
//! also carries an `Idempotency-Key` header: the record's key for a single record, and
//! for a batch a digest of its keys in order (the same batch retried has the same key).

use sha2::{Digest, Sha256};

use super::settings::HttpFormat;
use crate::record::Row;

pub fn content_type(format: HttpFormat) -> &'static str {
    match format {
        HttpFormat::JsonArray => "application/json",
        HttpFormat::Ndjson => "application/x-ndjson",
    }
}

pub fn encode(rows: &[Row], format: HttpFormat) -> Vec<u8> {
    let mut body = Vec::with_capacity(rows.iter().map(|r| r.payload.len() + 64).sum());
    if format == HttpFormat::JsonArray {
        body.push(b'[');
    }
    for (i, row) in rows.iter().enumerate() {
        match format {
            HttpFormat::JsonArray if i > 0 => body.push(b','),
            HttpFormat::Ndjson if i > 0 => body.push(b'\n'),
            _ => {}
        }
        body.extend_from_slice(b"{\"key\":");
        serde_json::to_writer(&mut body, &row.key).expect("a string serializes");
        body.extend_from_slice(b",\"source\":");
        serde_json::to_writer(&mut body, &row.origin).expect("a string serializes");
        body.extend_from_slice(b",\"record\":");
        // The payload is valid JSON text; only whitespace can hold a line break, and a
        // line break would cut an NDJSON body apart: such a payload is compacted.
        if row.payload.contains(['\n', '\r']) {
            let value: serde_json::Value =
                serde_json::from_str(&row.payload).expect("rows hold valid JSON");
            serde_json::to_writer(&mut body, &value).expect("a value serializes");
        } else {
            body.extend_from_slice(row.payload.as_bytes());
        }
        body.push(b'}');
    }
    match format {
        HttpFormat::JsonArray => body.push(b']'),
        HttpFormat::Ndjson => body.push(b'\n'),
    }
    body
}

/// The record's key when it alone is sent and fits in a header; otherwise a digest:
/// `sha256:` and the hex of the first 16 bytes over the keys, each followed by a NUL.
pub fn idempotency_key(rows: &[Row]) -> String {
    if let [row] = rows
        && !row.key.is_empty()
        && row.key.len() <= 200
        && row.key.bytes().all(|b| b.is_ascii_graphic())
    {
        return row.key.clone();
    }
    let mut h = Sha256::new();
    for row in rows {
        h.update(row.key.as_bytes());
        h.update([0]);
    }
    format!("sha256:{}", hex::encode(&h.finalize()[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, payload: &str) -> Row {
        Row {
            key: key.into(),
            payload: payload.into(),
            origin: format!("in:{key}"),
            ..Default::default()
        }
    }

    #[test]
    fn json_array_wraps_each_record_with_its_key() {
        let body = encode(
            &[row("1", r#"{"id":1}"#), row("a\"b", "[1, 2]")],
            HttpFormat::JsonArray,
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!([
                {"key": "1", "source": "in:1", "record": {"id": 1}},
                {"key": "a\"b", "source": "in:a\"b", "record": [1, 2]},
            ])
        );
    }

    #[test]
    fn ndjson_is_one_envelope_per_line_even_for_pretty_payloads() {
        let body = encode(
            &[row("1", "{\n  \"id\": 1\n}"), row("2", "{\"id\":2}")],
            HttpFormat::Ndjson,
        );
        let text = String::from_utf8(body).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["record"]["id"], 1);
        assert_eq!(lines[1]["key"], "2");
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn idempotency_keys() {
        assert_eq!(idempotency_key(&[row("order-7", "{}")]), "order-7");
        let batch = [row("1", "{}"), row("2", "{}")];
        let k = idempotency_key(&batch);
        assert!(k.starts_with("sha256:") && k.len() == 7 + 32, "{k}");
        assert_eq!(k, idempotency_key(&batch), "stable across retries");
        assert_ne!(k, idempotency_key(&[row("2", "{}"), row("1", "{}")]));
        // "12" + "" and "1" + "2" must differ: keys are delimited.
        assert_ne!(
            idempotency_key(&[row("12", "{}"), row("", "{}")]),
            idempotency_key(&[row("1", "{}"), row("2", "{}")])
        );
        assert!(idempotency_key(&[row("with space", "{}")]).starts_with("sha256:"));
        assert!(idempotency_key(&[row("clé", "{}")]).starts_with("sha256:"));
    }
}
