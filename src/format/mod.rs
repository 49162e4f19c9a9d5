//! Kafka values and keys in the Confluent wire format (a magic byte, a schema id, the
//! encoded body), decoded to the JSON every record becomes: Avro, Protobuf and JSON
//! Schema through a schema registry, or Avro with a fixed schema file. A record that
//! cannot be decoded is a dead letter with the reason; a registry that cannot answer is an
//! outage that holds the records back.

pub mod avro;
mod avro_from_json;
pub mod protobuf;
pub mod registry;
pub mod schemas;
pub mod settings;
pub mod wire;

use serde_json::Value;

use crate::record::Record;
use avro::AvroSchema;
use registry::{RegistryError, SchemaRegistry};
use schemas::{Schema, Schemas};
use settings::{Format, FormatSettings, RegistrySettings};

/// Decodes the value and the key of each message as the configuration says.
pub struct MessageDecoder {
    value: FormatSettings,
    key: FormatSettings,
    value_file: Option<AvroSchema>,
    key_file: Option<AvroSchema>,
    schemas: Option<Schemas>,
}

/// The two halves of a message, for messages that name which failed.
#[derive(Clone, Copy)]
enum Part {
    Value,
    Key,
}

impl MessageDecoder {
    /// None when there is nothing to decode (JSON values, text keys).
    pub fn new(
        value: &FormatSettings,
        key: &FormatSettings,
        registry: Option<&RegistrySettings>,
    ) -> Result<Option<Self>, String> {
        if value.format == Format::Json && key.format == Format::Text {
            return Ok(None);
        }
        let file = |f: &FormatSettings, name: &str| -> Result<Option<AvroSchema>, String> {
            match &f.schema_file {
                None => Ok(None),
                Some(path) => std::fs::read_to_string(path)
                    .map_err(|e| format!("{name}: cannot read {}: {e}", path.display()))
                    .and_then(|text| {
                        AvroSchema::parse(&text, &[]).map_err(|e| format!("{name}: {e}"))
                    })
                    .map(Some),
            }
        };
        let schemas = match registry {
            Some(settings) => Some(Schemas::new(SchemaRegistry::new(settings)?)),
            None if value.needs_registry() || key.needs_registry() => {
                return Err(
                    "source.schema_registry: required by the value's or the key's format".into(),
                );
            }
            None => None,
        };
        Ok(Some(MessageDecoder {
            value_file: file(value, "source.value.schema_file")?,
            key_file: file(key, "source.key.schema_file")?,
            value: value.clone(),
            key: key.clone(),
            schemas,
        }))
    }

    /// Asks the registry, if there is one, whether it takes the credentials.
    pub async fn check_registry(&self) -> Result<(), RegistryError> {
        match &self.schemas {
            Some(schemas) => schemas.registry().check().await,
            None => Ok(()),
        }
    }

    /// Replaces the record's value (and key) with their JSON, or marks the record
    /// undecodable with why. Err: the registry is down or refuses; the record is as it was.
    pub async fn decode(&mut self, record: &mut Record) -> Result<(), RegistryError> {
        // The key first: a dead letter for either keeps the value's bytes as received.
        let received_key = record.context.key.clone();
        if self.key.format != Format::Text
            && let Some(key) = record.context.key.as_deref().filter(|k| !k.is_empty())
        {
            match self.json_of(Part::Key, key).await? {
                Ok(json) => record.context.key = Some(key_text(&json).into_bytes()),
                Err(why) => {
                    record.undecodable = Some(format!("message key: {why}"));
                    return Ok(());
                }
            }
        }
        if record.oversize.is_none()
            && !record.context.tombstone
            && self.value.format != Format::Json
        {
            match self.json_of(Part::Value, &record.payload).await {
                Ok(Ok(json)) => record.payload = json.into_bytes(),
                Ok(Err(why)) => record.undecodable = Some(why),
                Err(e) => {
                    // Decoded again, key included, when the registry answers.
                    record.context.key = received_key;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    async fn json_of(
        &mut self,
        part: Part,
        bytes: &[u8],
    ) -> Result<Result<String, String>, RegistryError> {
        let (settings, file) = match part {
            Part::Value => (&self.value, &self.value_file),
            Part::Key => (&self.key, &self.key_file),
        };
        let format = settings.format;
        if let Some(schema) = file {
            return Ok(schema.to_json(bytes));
        }
        if format == Format::Json {
            return Ok(std::str::from_utf8(bytes)
                .map_err(|_| "not UTF-8 text, so not JSON".to_string())
                .and_then(|text| {
                    serde_json::from_str::<Value>(text)
                        .map(|_| text.to_string())
                        .map_err(|e| format!("malformed JSON: {e}"))
                }));
        }
        let (header, body) = match wire::split(bytes, format == Format::Protobuf) {
            Ok(split) => split,
            Err(why) => return Ok(Err(why)),
        };
        let schemas = self
            .schemas
            .as_mut()
            .expect("a registry for wire-format records");
        let schema = match schemas.get(header.schema_id).await? {
            Ok(schema) => schema,
            Err(why) => return Ok(Err(why)),
        };
        let id = header.schema_id;
        Ok(match (format, schema.as_ref()) {
            (Format::Avro, Schema::Avro(avro)) => avro.to_json(body),
            (Format::Protobuf, Schema::Protobuf(proto)) => {
                proto.to_json(&header.message_indexes, body)
            }
            (Format::JsonSchema, Schema::Json) => std::str::from_utf8(body)
                .map_err(|_| "the JSON body is not UTF-8".to_string())
                .and_then(|text| {
                    serde_json::from_str::<Value>(text)
                        .map(|_| text.trim().to_string())
                        .map_err(|e| format!("malformed JSON after the wire-format header: {e}"))
                }),
            (format, schema) => Err(format!(
                "schema id {id} is a {} schema, but source.{}.format = {:?}",
                schema.kind(),
                match part {
                    Part::Value => "value",
                    Part::Key => "key",
                },
                format.name()
            )),
        }
        .map_err(|why| {
            if why.starts_with("schema id") {
                why
            } else {
                format!("schema id {id}: {why}")
            }
        }))
    }
}

/// A decoded key as the sink keys by it: a string's text, anything else its JSON.
fn key_text(json: &str) -> String {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::String(s)) => s,
        _ => json.to_string(),
    }
}
