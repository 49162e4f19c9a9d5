//! `sluice produce` into an Avro topic: each NDJSON line encoded with the schema given
//! (`--value-schema`, registered under `<topic>-value` in the configured registry, with
//! the wire-format header) or with `source.value.schema_file` (plain Avro bodies), so a
//! configuration can be rehearsed end to end.

use std::path::Path;

use crate::format::avro::AvroSchema;
use crate::format::registry::SchemaRegistry;
use crate::format::settings::Format;
use crate::format::wire;
use crate::source::kafka::settings::KafkaSettings;

use super::ProduceError;

/// Turns an NDJSON line into the message's value.
pub struct AvroEncoder {
    schema: AvroSchema,
    /// The wire-format header with the registered id; none for plain bodies.
    header: Option<Vec<u8>>,
}

impl AvroEncoder {
    /// The encoder the configuration and `--value-schema` call for; None for JSON values.
    pub async fn open(
        source: &KafkaSettings,
        value_schema: Option<&Path>,
    ) -> Result<Option<Self>, ProduceError> {
        let bad = |why: String| ProduceError::Config(why);
        match (source.value.format, value_schema) {
            (Format::Json, None) => return Ok(None),
            (Format::Avro, _) => {}
            (other, _) => {
                return Err(bad(format!(
                    "sluice produce writes JSON or Avro values, not source.value.format = {:?}",
                    other.name()
                )));
            }
        }
        let read = |path: &Path, key: &str| -> Result<(String, AvroSchema), ProduceError> {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad(format!("{key}: cannot read {}: {e}", path.display())))?;
            let schema = AvroSchema::parse(&text, &[]).map_err(|e| bad(format!("{key}: {e}")))?;
            Ok((text, schema))
        };
        if let Some(file) = &source.value.schema_file {
            if value_schema.is_some() {
                return Err(bad(
                    "source.value.schema_file is set: the values are plain Avro with that schema; drop --value-schema".into(),
                ));
            }
            let (_, schema) = read(file, "source.value.schema_file")?;
            return Ok(Some(AvroEncoder {
                schema,
                header: None,
            }));
        }
        let Some(path) = value_schema else {
            return Err(bad(
                "source.value.format = \"avro\": give the schema to encode with, --value-schema FILE.avsc (registered under <topic>-value)".into(),
            ));
        };
        let (text, schema) = read(path, "--value-schema")?;
        let registry = source.schema_registry.as_ref().ok_or_else(|| {
            bad("source.schema_registry: required to register --value-schema".into())
        })?;
        let registry = SchemaRegistry::new(registry).map_err(bad)?;
        let subject = format!("{}-value", source.topic.as_deref().unwrap_or_default());
        let id = registry
            .register(&subject, &text, "AVRO")
            .await
            .map_err(|e| ProduceError::Queue(format!("registering {}: {e}", path.display())))?;
        tracing::info!(subject, id, "schema registered");
        Ok(Some(AvroEncoder {
            schema,
            header: Some(wire::header(id)),
        }))
    }

    /// The value for one line; Err says why the line does not fit the schema.
    pub fn encode(&self, line: &[u8]) -> Result<Vec<u8>, String> {
        let json: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| format!("malformed JSON: {e}"))?;
        let body = self.schema.encode(&json)?;
        Ok(match &self.header {
            Some(header) => [header.as_slice(), &body].concat(),
            None => body,
        })
    }
}
