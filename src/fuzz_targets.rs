//! The bodies of the fuzz targets: each reads bytes another system sent (a throttling
//! answer's headers, an ingest API's or `_bulk`'s answer, a record, an input file, a
//! checkpoint) the way the worker does, and checks what must hold whatever the bytes. No
//! input may panic, hang or allocate without bound. `fuzz/fuzz_targets/*.rs` hand them to
//! libFuzzer (`cargo fuzz run <target>`), and `tests/it/fuzz_corpora.rs` runs the same bodies
//! over the committed corpora and over generated inputs in the ordinary test run.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde_json::{Value, json};

use crate::control::{quota_unit, retry_after};
use crate::decode::Decoder;
use crate::record::{Position, Record, Row, SourceContext};
use crate::sink::elasticsearch::body::DocumentTarget;
use crate::sink::elasticsearch::{answer, settings::BulkOp};
use crate::sink::http::{contract::ResponseContract, response};
use crate::sink::upsert::{Upsert, VersionFrom};
use crate::source::file::fuzzing as file;

/// A target's body: any bytes in, a panic when something that must hold does not.
pub type Body = fn(&[u8]);

/// Every target by name, for the corpora test and the fuzz crate.
pub const TARGETS: &[(&str, Body)] = &[
    ("throttle_headers", throttle_headers),
    ("response_contract", response_contract),
    ("bulk_answer", bulk_answer),
    ("decode_record", decode_record),
    ("file_lines", file::lines),
    ("checkpoint", file::checkpoint),
    ("limit_memory", limit_memory),
    ("wire_record", wire_record),
];

/// `name: value` lines as a response's headers (lines that are no header are skipped),
/// after a first line holding the status code.
fn headers(text: &str) -> (StatusCode, HeaderMap) {
    let mut lines = text.lines();
    let status = lines
        .next()
        .and_then(|l| l.trim().parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let mut map = HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) {
            map.append(n, v);
        }
    }
    (status, map)
}

/// Retry-After (seconds, HTTP dates), `x-ms-retry-after-ms`, the RateLimit drafts and
/// `RateLimit-Policy`'s unit: the wait asked for never exceeds the cap.
pub fn throttle_headers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (status, map) = headers(&text);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let cap = Duration::from_secs(30);
    if let Some(wait) = retry_after::from_headers(&map, now, cap) {
        assert!(wait <= cap, "{wait:?} over the cap");
    }
    let _ = retry_after::parse_retry_after(&text, now);
    let _ = quota_unit::from_headers(&map);
    let _ = response::classify(status, &map, data, 3, now, cap);
}

fn rows(n: usize) -> Vec<Row> {
    (0..n)
        .map(|i| Row {
            key: format!("k{i}"),
            payload: "{}".into(),
            ..Default::default()
        })
        .collect()
}

/// `[sink.response]` answers (Kinesis-like: one result per record; DynamoDB-like: the
/// unprocessed ones by key): an answer read is one outcome per record, in order.
pub fn response_contract(data: &[u8]) {
    let contracts = [
        json!({"results": "/Records", "status": "/ErrorCode", "message": "/ErrorMessage",
               "throttled": ["ProvisionedThroughputExceededException"], "retry": ["InternalFailure"]}),
        json!({"results": "/UnprocessedItems/T", "id": "/PutRequest/Item/id/S", "absent": "throttled"}),
        json!({"results": "/items", "status": "/status", "written": [201], "duplicate": [409]}),
    ];
    for contract in contracts {
        let contract: ResponseContract = serde_json::from_value(contract).expect("a contract");
        for n in [0, 1, 3] {
            if let Ok(outcomes) = contract.read(data, &rows(n)) {
                assert_eq!(outcomes.len(), n, "one outcome per record");
            }
        }
    }
}

/// `_bulk` answers: read, they hold exactly one outcome per action sent — sent as the
/// answer names its items (so the matching passes and the outcomes are read) and as
/// documents it does not name (so the matching itself is exercised).
pub fn bulk_answer(data: &[u8]) {
    let named: Vec<DocumentTarget> = serde_json::from_slice::<Value>(data)
        .ok()
        .and_then(|v| v.get("items").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .map(|item| {
            let inner = item.as_object().and_then(|o| o.values().next());
            let field = |name: &str| {
                inner
                    .and_then(|i| i.get(name))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            DocumentTarget {
                index: field("_index"),
                id: field("_id"),
            }
        })
        .collect();
    let made = |n: usize| -> Vec<DocumentTarget> {
        (0..n)
            .map(|i| DocumentTarget {
                index: "orders".into(),
                id: i.to_string(),
            })
            .collect()
    };
    for op in [BulkOp::Create, BulkOp::Index] {
        for targets in [made(0), made(1), made(3), named.clone()] {
            for fixed_index in [true, false] {
                let sent = answer::Sent {
                    op,
                    targets: &targets,
                    fixed_index,
                };
                if let Ok(outcomes) = answer::read(data, sent) {
                    assert_eq!(outcomes.len(), targets.len(), "one outcome per action");
                }
            }
        }
    }
}

fn record(payload: &[u8], tombstone: bool) -> Record {
    Record {
        position: Position {
            lane: 0,
            start: 7,
            end: 8,
        },
        origin: "in:1".into(),
        fallback_key: "in:1".into(),
        payload: payload.to_vec(),
        oversize: None,
        undecodable: None,
        context: SourceContext {
            key: payload.get(..payload.len().min(8)).map(<[u8]>::to_vec),
            tombstone,
            ..Default::default()
        },
    }
}

/// A record's JSON, key and version: a row has valid JSON, a key, and in upsert mode a
/// version; a dead letter keeps the record's bytes and says why.
pub fn decode_record(data: &[u8]) {
    let upsert = Upsert {
        version: VersionFrom::Pointer("/v".into()),
        delete_on_tombstone: false,
        delete_flag: Some("/gone".into()),
    };
    let by_offset = Upsert {
        version: VersionFrom::Source,
        delete_on_tombstone: true,
        delete_flag: None,
    };
    let decoders = [
        Decoder::new(Some("/id".into())),
        Decoder::new(Some("/a/0/~1b".into())),
        Decoder::new(None),
        Decoder::new(Some("/id".into())).with_upsert(Some(upsert)),
        Decoder::new(Some("@key".into())).with_upsert(Some(by_offset)),
    ];
    for decoder in &decoders {
        for tombstone in [false, true] {
            match decoder.decode(record(data, tombstone)) {
                Ok(row) => {
                    assert!(!row.key.is_empty(), "a row has a key");
                    assert!(
                        row.delete || serde_json::from_str::<Value>(&row.payload).is_ok(),
                        "a row holds JSON"
                    );
                    assert_eq!(row.version.is_some(), decoder.is_upsert());
                }
                Err(letter) => {
                    assert_eq!(letter.raw, data, "a letter keeps the record as it came");
                    assert!(!letter.reason.is_empty());
                }
            }
        }
    }
}

/// `throttle.remember`'s file, as a restarted worker reads it: a limit comes back only
/// positive and finite, and for one sink at most.
pub fn limit_memory(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let sinks = [
        "http http://127.0.0.1:9200/ records",
        "sqlite sqlite://x records",
    ];
    let mut found = 0;
    for sink in sinks {
        if let Some((_, per_second)) =
            crate::control::sink_limit::remembered_limit::RememberedLimit::read(&text, sink, now)
        {
            assert!(per_second.is_finite() && per_second > 0.0, "{per_second}");
            found += 1;
        }
    }
    assert!(found <= 1, "one file, one sink: {text}");
}

/// A Kafka record in the Confluent wire format, as `format = "avro"` and `"protobuf"` read
/// it (header, message indexes, body) against fixed schemas that use every Avro type and a
/// Protobuf message with nested, map, repeated and well-known fields: an answer is valid
/// JSON or a reason, never a panic.
pub fn wire_record(data: &[u8]) {
    use crate::format::{avro::AvroSchema, protobuf::ProtoSchema, wire};
    use std::sync::OnceLock;
    static AVRO: OnceLock<AvroSchema> = OnceLock::new();
    static PROTO: OnceLock<ProtoSchema> = OnceLock::new();
    let avro = AVRO.get_or_init(|| AvroSchema::parse(FUZZ_AVRO, &[]).expect("the schema parses"));
    let proto =
        PROTO.get_or_init(|| ProtoSchema::compile(FUZZ_PROTO, &[]).expect("the schema compiles"));
    let is_json = |text: &str| {
        assert!(
            serde_json::from_str::<serde_json::Value>(text).is_ok(),
            "not JSON: {text}"
        );
    };
    if let Ok((_, body)) = wire::split(data, false)
        && let Ok(text) = avro.to_json(body)
    {
        is_json(&text);
    }
    if let Ok((header, body)) = wire::split(data, true)
        && let Ok(text) = proto.to_json(&header.message_indexes, body)
    {
        is_json(&text);
    }
}

const FUZZ_AVRO: &str = r#"{"type": "record", "name": "R", "fields": [
  {"name": "l", "type": "long"}, {"name": "f", "type": "float"}, {"name": "s", "type": "string"},
  {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 9}},
  {"name": "x", "type": {"type": "fixed", "name": "X", "size": 4, "logicalType": "decimal", "precision": 9, "scale": 2}},
  {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
  {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
  {"name": "day", "type": {"type": "int", "logicalType": "date"}},
  {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
  {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
  {"name": "u", "type": ["null", "string", "R"]},
  {"name": "a", "type": {"type": "array", "items": "double"}},
  {"name": "m", "type": {"type": "map", "values": "boolean"}},
  {"name": "du", "type": {"type": "fixed", "name": "D", "size": 12, "logicalType": "duration"}}
]}"#;

const FUZZ_PROTO: &str = r#"syntax = "proto3";
import "google/protobuf/timestamp.proto";
import "google/protobuf/struct.proto";
message M {
  int64 a = 1; uint64 b = 2; string c = 3; bytes d = 4; double e = 5;
  google.protobuf.Timestamp t = 6; google.protobuf.Struct s = 7;
  repeated N n = 8; map<string, int64> m = 9; K k = 10;
  message N { sint32 x = 1; repeated float y = 2; }
  enum K { Z = 0; O = 1; }
}
message P { M m = 1; }
"#;
