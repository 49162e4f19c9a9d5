//! How a duration is written in the file, for the JSON Schema: humantime's text.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A duration as written in the file: humantime's "200ms", "15s", "1h 30m".
pub struct HumanDuration;

impl JsonSchema for HumanDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A duration: a number and a unit (ns, us, ms, s, m, h, d), e.g. \"200ms\", \"15s\", \"1h 30m\".",
            "examples": ["200ms", "15s", "1h 30m"],
        })
    }
}
