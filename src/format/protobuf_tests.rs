use super::*;
use prost_reflect::prost::Message;
use prost_reflect::{MapKey, Value};

const ORDER: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "address.proto";

message Order {
  int64 id = 1;
  uint64 big = 2;
  string name = 3;
  google.protobuf.Timestamp at = 4;
  google.protobuf.Int32Value count = 5;
  Status status = 6;
  Address ship_to = 7;
  repeated int32 lines = 8;
  map<string, int64> tags = 9;
  bytes blob = 10;
  Address bill_to = 11;
  float ratio = 12;
  message Line { int32 qty = 1; }
  enum Status { NEW = 0; PAID = 1; }
}
"#;

const ADDRESS: &str = r#"
syntax = "proto3";
package shop;
message Address { string zip = 1; }
"#;

fn schema() -> ProtoSchema {
    ProtoSchema::compile(ORDER, &[("address.proto".into(), ADDRESS.into())]).unwrap()
}

/// Encodes a message from field values set one by one, independently of the JSON we write.
fn encode(schema: &ProtoSchema, indexes: &[usize], fields: Vec<(&str, Value)>) -> Vec<u8> {
    let desc = schema.message(indexes).unwrap();
    let mut message = DynamicMessage::new(desc);
    for (name, value) in fields {
        message.set_field_by_name(name, value);
    }
    message.encode_to_vec()
}

fn nested(schema: &ProtoSchema, name: &str, fields: Vec<(&str, Value)>) -> Value {
    let desc = schema.pool.get_message_by_name(name).unwrap();
    let mut message = DynamicMessage::new(desc);
    for (name, value) in fields {
        message.set_field_by_name(name, value);
    }
    Value::Message(message)
}

#[test]
fn the_canonical_mapping_with_exact_integers_and_proto_names() {
    let schema = schema();
    let at = nested(
        &schema,
        "google.protobuf.Timestamp",
        vec![
            ("seconds", Value::I64(1_700_000_000)),
            ("nanos", Value::I32(123_000_000)),
        ],
    );
    let count = nested(
        &schema,
        "google.protobuf.Int32Value",
        vec![("value", Value::I32(7))],
    );
    let ship_to = nested(
        &schema,
        "shop.Address",
        vec![("zip", Value::String("90-001".into()))],
    );
    let body = encode(
        &schema,
        &[0],
        vec![
            ("id", Value::I64(9_007_199_254_740_993)),
            ("big", Value::U64(u64::MAX)),
            ("name", Value::String("Zoë".into())),
            ("at", at),
            ("count", count),
            ("status", Value::EnumNumber(1)),
            ("ship_to", ship_to),
            ("lines", Value::List(vec![Value::I32(1), Value::I32(2)])),
            (
                "tags",
                Value::Map([(MapKey::String("a".into()), Value::I64(1))].into()),
            ),
            ("blob", Value::Bytes(vec![0, 1, 2, 255].into())),
            ("ratio", Value::F32(1.1)),
        ],
    );
    let text = schema.to_json(&[0], &body).unwrap();
    assert_eq!(
        text,
        r#"{"at":"2023-11-14T22:13:20.123Z","big":18446744073709551615,"blob":"AAEC/w==","count":7,"id":9007199254740993,"lines":[1,2],"name":"Zoë","ratio":1.1,"ship_to":{"zip":"90-001"},"status":"PAID","tags":{"a":1}}"#
    );
    // Unset: scalars at their defaults, message fields left out.
    let text = schema.to_json(&[0], &[]).unwrap();
    assert_eq!(
        text,
        r#"{"big":0,"blob":"","id":0,"lines":[],"name":"","ratio":0.0,"status":"NEW","tags":{}}"#
    );
}

#[test]
fn message_indexes_select_nested_types() {
    let schema = schema();
    // Order's nested types, as the descriptor lists them: the map field's entry type
    // (TagsEntry) first, then Line.
    let body = encode(&schema, &[0, 1], vec![("qty", Value::I32(3))]);
    assert_eq!(schema.to_json(&[0, 1], &body).unwrap(), r#"{"qty":3}"#);
    assert!(
        schema
            .to_json(&[1], &body)
            .unwrap_err()
            .contains("not in the schema")
    );
    assert!(
        schema
            .to_json(&[0, 5], &body)
            .unwrap_err()
            .contains("not in the schema")
    );
}

#[test]
fn a_base64_file_descriptor_is_a_schema_too() {
    let compiled = schema();
    let file = compiled.pool.get_file_by_name(&compiled.file).unwrap();
    let encoded = base64::engine::general_purpose::STANDARD
        .encode(file.file_descriptor_proto().encode_to_vec());
    let address = compiled.pool.get_file_by_name("address.proto").unwrap();
    let address = base64::engine::general_purpose::STANDARD
        .encode(address.file_descriptor_proto().encode_to_vec());
    let again = ProtoSchema::compile(&encoded, &[("address.proto".into(), address)]).unwrap();
    let body = encode(&compiled, &[0], vec![("id", Value::I64(5))]);
    let text = again.to_json(&[0], &body).unwrap();
    assert!(text.contains(r#""id":5,"#), "{text}");
}

#[test]
fn garbage_does_not_decode_and_a_bad_schema_does_not_compile() {
    let schema = schema();
    let err = schema.to_json(&[0], &[0xff, 0xff, 0xff]).unwrap_err();
    assert!(
        err.contains("does not decode as Protobuf shop.Order"),
        "{err}"
    );
    let err = ProtoSchema::compile("syntax = \"proto3\"; message {", &[]).unwrap_err();
    assert!(err.contains("not a Protobuf schema"), "{err}");
    let err = ProtoSchema::compile(ORDER, &[]).unwrap_err();
    assert!(err.contains("address.proto"), "{err}");
}

#[test]
fn a_map_field_reads_the_same_every_time() {
    let schema = schema();
    let tags: std::collections::HashMap<MapKey, Value> = (0..50)
        .map(|i| (MapKey::String(format!("k{i}")), Value::I64(i)))
        .collect();
    let body = encode(&schema, &[0], vec![("tags", Value::Map(tags))]);
    let first = schema.to_json(&[0], &body).unwrap();
    for _ in 0..20 {
        assert_eq!(schema.to_json(&[0], &body).unwrap(), first);
    }
    assert!(
        first.contains(r#""tags":{"k0":0,"k1":1,"k10":10,"#),
        "{first}"
    );
}
