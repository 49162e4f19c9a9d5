//! The `_bulk` request body: for each record an action line naming its index and `_id`
//! (the record's key), then the record on one line.
//!
//! ```text
//! {"create":{"_index":"orders","_id":"42"}}
//! {"id":42,"total":9.5}
//! ```

use super::settings::{BulkOp, Part};
use crate::record::Row;

/// A request body and the records that could not be put in it.
pub struct Encoded {
    pub body: Vec<u8>,
    /// Per row: why it was left out (its index name could not be built), or `None`.
    pub left_out: Vec<Option<String>>,
    /// Per action sent, in order: what its answer item must name.
    pub targets: Vec<DocumentTarget>,
}

/// The document an action writes: its answer item names the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentTarget {
    pub index: String,
    pub id: String,
}

/// The longest `_id` Elasticsearch and OpenSearch take, in UTF-8 bytes: a longer one
/// fails the whole `_bulk` request (400 `action_request_validation_exception`), so such a
/// record is left out and dead-lettered on its own, never truncated.
pub const MAX_ID_BYTES: usize = 512;

pub fn encode(rows: &[Row], index: &[Part], op: BulkOp) -> Encoded {
    let mut body = Vec::with_capacity(rows.iter().map(|r| r.payload.len() + 64).sum());
    let mut left_out = Vec::with_capacity(rows.len());
    let mut targets = Vec::with_capacity(rows.len());
    for row in rows {
        if row.key.len() > MAX_ID_BYTES {
            left_out.push(Some(format!(
                "the key is {} bytes: an Elasticsearch _id holds at most {MAX_ID_BYTES}",
                row.key.len()
            )));
            continue;
        }
        let record: serde_json::Value = match serde_json::from_str(&row.payload) {
            Ok(v) => v,
            Err(e) => {
                left_out.push(Some(format!("not JSON: {e}")));
                continue;
            }
        };
        let name = match index_name(index, &record) {
            Ok(name) => name,
            Err(why) => {
                left_out.push(Some(why));
                continue;
            }
        };
        left_out.push(None);
        let action = serde_json::json!({ op.name(): { "_index": name, "_id": row.key } });
        serde_json::to_writer(&mut body, &action).expect("a value serializes");
        body.push(b'\n');
        // A payload is valid JSON; only its whitespace can hold a line break, which would
        // cut the body's lines apart: such a payload is compacted.
        if row.payload.contains(['\n', '\r']) {
            serde_json::to_writer(&mut body, &record).expect("a value serializes");
        } else {
            body.extend_from_slice(row.payload.as_bytes());
        }
        body.push(b'\n');
        targets.push(DocumentTarget {
            index: name,
            id: row.key.clone(),
        });
    }
    Encoded {
        body,
        left_out,
        targets,
    }
}

/// The index for `record`: the template's text with each `{/pointer}` replaced by that
/// field (a string as it is, a number as its JSON text).
fn index_name(index: &[Part], record: &serde_json::Value) -> Result<String, String> {
    let mut name = String::new();
    for part in index {
        match part {
            Part::Text(text) => name.push_str(text),
            Part::Pointer(pointer) => match record.pointer(pointer) {
                Some(serde_json::Value::String(s)) if !s.is_empty() => name.push_str(s),
                Some(n @ serde_json::Value::Number(_)) => name.push_str(&n.to_string()),
                Some(other) => {
                    return Err(format!(
                        "index name: {pointer} is {other}, not a string or a number"
                    ));
                }
                None => return Err(format!("index name: the record has no {pointer}")),
            },
        }
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::elasticsearch::settings::parse_index;

    fn row(key: &str, payload: &str) -> Row {
        Row {
            key: key.into(),
            payload: payload.into(),
            origin: format!("in:{key}"),
            ..Default::default()
        }
    }

    #[test]
    fn action_and_source_lines_with_the_key_as_id() {
        let index = parse_index("logs-{/day}").unwrap();
        let rows = [
            row("1", r#"{"day":"2026.11.30","n":1}"#),
            row("a\"b", "{\n \"day\": 7\n}"),
            row("3", r#"{"n":3}"#),
            row("4", r#"{"day":{"x":1}}"#),
        ];
        let e = encode(&rows, &index, BulkOp::Create);
        let text = String::from_utf8(e.body).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                r#"{"create":{"_id":"1","_index":"logs-2026.11.30"}}"#,
                r#"{"day":"2026.11.30","n":1}"#,
                r#"{"create":{"_id":"a\"b","_index":"logs-7"}}"#,
                r#"{"day":7}"#,
            ]
        );
        assert!(text.ends_with('\n'), "the last line ends too");
        assert_eq!(e.left_out[..2], [None, None]);
        assert_eq!(
            e.targets,
            [
                DocumentTarget {
                    index: "logs-2026.11.30".into(),
                    id: "1".into()
                },
                DocumentTarget {
                    index: "logs-7".into(),
                    id: "a\"b".into()
                },
            ]
        );
        assert_eq!(
            e.left_out[2].as_deref(),
            Some("index name: the record has no /day")
        );
        assert!(e.left_out[3].as_deref().unwrap().contains("not a string"));

        let e = encode(&rows[..1], &parse_index("orders").unwrap(), BulkOp::Index);
        assert!(
            String::from_utf8(e.body)
                .unwrap()
                .starts_with(r#"{"index":{"_id":"1","_index":"orders"}}"#)
        );
    }

    #[test]
    fn a_key_longer_than_an_id_holds_is_left_out_whole() {
        let index = parse_index("orders").unwrap();
        let longest = "é".repeat(MAX_ID_BYTES / 2);
        let rows = [row(&longest, "{}"), row(&format!("{longest}x"), "{}")];
        let e = encode(&rows, &index, BulkOp::Create);
        assert_eq!(e.left_out[0], None, "512 bytes fit");
        assert_eq!(
            e.left_out[1].as_deref(),
            Some("the key is 513 bytes: an Elasticsearch _id holds at most 512")
        );
        assert_eq!(String::from_utf8(e.body).unwrap().lines().count(), 2);
    }
}
