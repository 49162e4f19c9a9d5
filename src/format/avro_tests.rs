use super::*;
use apache_avro::Decimal;
use apache_avro::types::Value as V;
use apache_avro::writer::datum::GenericDatumWriter;
use serde_json::Value as Json;

const SCHEMA: &str = r#"{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "small", "type": "int"},
    {"name": "ratio", "type": "float"},
    {"name": "share", "type": "double"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 18}},
    {"name": "cents", "type": {"type": "fixed", "name": "Cents", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 2}},
    {"name": "whole", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "clock_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "ship_to", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "street", "type": "string"}, {"name": "zip", "type": "string"}]}},
    {"name": "bill_to", "type": ["null", "Address"]},
    {"name": "lines", "type": {"type": "array", "items": "int"}},
    {"name": "tags", "type": {"type": "map", "values": "long"}},
    {"name": "blob", "type": "bytes"},
    {"name": "flag", "type": "boolean"}
  ]}"#;

fn encode(schema: &AvroSchema, value: V) -> Vec<u8> {
    GenericDatumWriter::builder(schema.schema)
        .build()
        .unwrap()
        .write_value_to_vec(value)
        .unwrap()
}

fn order(amount: i128, note: Option<&str>) -> V {
    V::Record(vec![
        ("id".into(), V::Long(9_007_199_254_740_993)),
        ("small".into(), V::Int(-7)),
        ("ratio".into(), V::Float(1.1)),
        ("share".into(), V::Double(0.1)),
        (
            "amount".into(),
            V::Decimal(Decimal::from(amount.to_be_bytes().to_vec())),
        ),
        (
            "cents".into(),
            V::Decimal(Decimal::from((-5_i64).to_be_bytes().to_vec())),
        ),
        ("whole".into(), V::Decimal(Decimal::from(vec![0x01, 0x00]))),
        ("at".into(), V::TimestampMillis(1_700_000_000_123)),
        ("at_us".into(), V::TimestampMicros(-1)),
        ("local".into(), V::LocalTimestampMillis(0)),
        ("day".into(), V::Date(19_000)),
        ("clock".into(), V::TimeMillis(3_723_004)),
        ("clock_us".into(), V::TimeMicros(1)),
        (
            "uid".into(),
            V::Uuid("6f1c0e5e-3c5b-4b8e-9d0a-1f2e3d4c5b6a".parse().unwrap()),
        ),
        ("status".into(), V::Enum(1, "PAID".into())),
        (
            "note".into(),
            match note {
                Some(n) => V::Union(1, Box::new(V::String(n.into()))),
                None => V::Union(0, Box::new(V::Null)),
            },
        ),
        (
            "ship_to".into(),
            V::Record(vec![
                ("street".into(), V::String("Łódzka 5".into())),
                ("zip".into(), V::String("90-001".into())),
            ]),
        ),
        ("bill_to".into(), V::Union(0, Box::new(V::Null))),
        ("lines".into(), V::Array(vec![V::Int(1), V::Int(2)])),
        (
            "tags".into(),
            V::Map([("b".to_string(), V::Long(2)), ("a".to_string(), V::Long(1))].into()),
        ),
        ("blob".into(), V::Bytes(vec![0, 1, 2, 255])),
        ("flag".into(), V::Boolean(true)),
    ])
}

#[test]
fn every_type_maps_as_documented() {
    let schema = AvroSchema::parse(SCHEMA, &[]).unwrap();
    // 20 significant digits before the point, 18 after: 12345678901234567890.123456789012345678
    let amount: i128 = 12_345_678_901_234_567_890_123_456_789_012_345_678;
    let text = schema
        .to_json(&encode(&schema, order(amount, Some("fragile"))))
        .unwrap();
    // A map's keys in order, whatever the order the datum held them in.
    assert!(text.contains(r#""tags":{"a":1,"b":2}"#), "{text}");
    let expected = r#"{"id":9007199254740993,"small":-7,"ratio":1.1,"share":0.1,"amount":12345678901234567890.123456789012345678,"cents":-0.05,"whole":256,"at":"2023-11-14T22:13:20.123Z","at_us":"1969-12-31T23:59:59.999999Z","local":"1970-01-01T00:00:00.000","day":"2022-01-08","clock":"01:02:03.004","clock_us":"00:00:00.000001","uid":"6f1c0e5e-3c5b-4b8e-9d0a-1f2e3d4c5b6a","status":"PAID","note":"fragile","ship_to":{"street":"Łódzka 5","zip":"90-001"},"bill_to":null,"lines":[1,2],"tags":{"a":1,"b":2},"blob":"AAEC/w==","flag":true}"#;
    // Compared as JSON (keys in any order; numbers by their exact text).
    let parse = |t: &str| serde_json::from_str::<Json>(t).unwrap();
    assert_eq!(parse(&text), parse(expected));
    let text = schema.to_json(&encode(&schema, order(-5, None))).unwrap();
    let value: Json = serde_json::from_str(&text).unwrap();
    assert_eq!(value["amount"].to_string(), "-0.000000000000000005");
    assert_eq!(value["note"], Json::Null);
}

#[test]
fn a_truncated_or_overlong_body_does_not_decode() {
    let schema = AvroSchema::parse(SCHEMA, &[]).unwrap();
    let body = encode(&schema, order(1, None));
    let cut = schema.to_json(&body[..body.len() - 3]).unwrap_err();
    assert!(
        cut.contains("does not decode with its Avro schema"),
        "{cut}"
    );
    let mut long = body.clone();
    long.push(0);
    assert!(schema.to_json(&long).unwrap_err().contains("1 bytes left"));
}

#[test]
fn a_referenced_schema_resolves_by_name() {
    let address = r#"{"type":"record","name":"Address","namespace":"shop","fields":[{"name":"zip","type":"string"}]}"#;
    let order = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"to","type":"shop.Address"}]}"#;
    let schema = AvroSchema::parse(order, &[address.to_string()]).unwrap();
    // The string "1": its length zigzag-encoded (2), then the byte.
    assert_eq!(schema.to_json(&[2, b'1']).unwrap(), r#"{"to":{"zip":"1"}}"#);
}

#[test]
fn decimals_keep_every_digit() {
    assert_eq!(scaled("12345", 2), "123.45");
    assert_eq!(scaled("5", 3), "0.005");
    assert_eq!(scaled("-5", 3), "-0.005");
    assert_eq!(scaled("-12345", 0), "-12345");
    assert_eq!(scaled("0", 2), "0.00");
}

#[test]
fn floats_without_a_json_number_are_strings() {
    let text = |x: f64| {
        let mut out = Vec::new();
        write_float(&mut out, x, &x);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(text(f64::NAN), "\"NaN\"");
    assert_eq!(text(f64::NEG_INFINITY), "\"-Infinity\"");
    assert_eq!(text(0.1), "0.1");
    // Very large and very small doubles are JSON numbers too.
    for x in [1e300, -2.5e-300] {
        assert_eq!(text(x).parse::<f64>().unwrap(), x);
        serde_json::from_str::<serde_json::Number>(&text(x)).unwrap();
    }
}

#[test]
fn json_encodes_back_to_the_same_datum() {
    let schema = AvroSchema::parse(SCHEMA, &[]).unwrap();
    let amount: i128 = -12_345_678_901_234_567_890_123_456_789_012_345_678;
    let body = encode(&schema, order(amount, Some("x")));
    let json: Json = serde_json::from_str(&schema.to_json(&body).unwrap()).unwrap();
    let again = schema.encode(&json).unwrap();
    assert_eq!(
        schema.to_json(&again).unwrap(),
        schema.to_json(&body).unwrap()
    );
    // A decimal with more places than the scale, a missing field without a default.
    let mut bad = json.clone();
    bad["cents"] = serde_json::from_str("1.005").unwrap();
    assert!(schema.encode(&bad).unwrap_err().contains("/cents"));
    let mut bad = json.clone();
    bad.as_object_mut().unwrap().remove("id");
    assert!(schema.encode(&bad).unwrap_err().contains("/id: missing"));
    // A missing field with a default takes it.
    let mut short = json;
    short.as_object_mut().unwrap().remove("note");
    let text = schema.to_json(&schema.encode(&short).unwrap()).unwrap();
    assert!(text.contains(r#""note":null"#), "{text}");
}
