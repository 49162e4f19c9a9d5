//! `sluice config schema`: the JSON Schema of the configuration file, derived from the same
//! serde types that read it, so an editor (Taplo, Even Better TOML) completes and checks
//! `sluice.toml` with the keys, defaults and doc comments sluice itself uses.
//!
//! Two settings types live in `control/`, which knows nothing of the schema (the
//! balancer's strategy and aperture mode); their shape is written out here once, and the
//! tests below hold each copy to the type it describes.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Deserialize;

use super::Config;
pub use crate::settings::HumanDuration;

/// The configuration's JSON Schema (draft 7, the draft editors' TOML tools read).
pub fn json() -> serde_json::Value {
    let mut schema = SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<Config>();
    schema.insert("title".into(), "sluice configuration".into());
    schema.insert(
        "description".into(),
        "sluice.toml: a source, a sink, and how fast the sink may be written to. Every key can also be set by a SLUICE_SECTION__KEY environment variable.".into(),
    );
    let mut value = schema.to_value();
    single_enums(&mut value);
    closed_kinds(&mut value, "SourceSettings", "file");
    value
}

/// A table whose `kind` picks its keys (`[source]`) is derived as one `allOf` reference
/// per kind beside the `kind` property, which no editor can close against unknown keys.
/// Each kind becomes one closed object with its own keys and `kind`; `kind` may be left
/// out for `default_kind`, as the loader reads it.
fn closed_kinds(schema: &mut serde_json::Value, name: &str, default_kind: &str) {
    use serde_json::{Value, json};
    let definitions = schema["definitions"].clone();
    let Some(kinds) = schema["definitions"][name]["oneOf"].as_array_mut() else {
        return;
    };
    for kind in kinds {
        let reference = kind["allOf"][0]["$ref"].as_str().unwrap_or_default();
        let Some(own) = reference
            .strip_prefix("#/definitions/")
            .map(|r| &definitions[r])
        else {
            continue;
        };
        let tag = kind["properties"]["kind"].clone();
        let is_default = tag["enum"] == json!([default_kind]);
        let Value::Object(object) = kind else {
            continue;
        };
        object.remove("allOf");
        let mut properties = own["properties"].clone();
        properties["kind"] = tag;
        object.insert("properties".into(), properties);
        let mut required: Vec<Value> = own["required"].as_array().cloned().unwrap_or_default();
        if !is_default {
            required.push("kind".into());
        }
        object.insert("required".into(), Value::Array(required));
        object.insert("additionalProperties".into(), Value::Bool(false));
    }
}

/// `{"const": x}` → `{"enum": [x]}`: the same constraint in the words of draft 4, which
/// older Taplo releases read (they ignore `const`, and a `oneOf` of documented enum
/// variants would then match every variant at once).
fn single_enums(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(constant) = map.get("const").filter(|c| !c.is_object()).cloned() {
                map.remove("const");
                map.insert("enum".into(), serde_json::Value::Array(vec![constant]));
            }
            map.values_mut().for_each(single_enums);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(single_enums),
        _ => {}
    }
}

/// The schema as printed: indented JSON and a final newline.
pub fn text() -> String {
    let mut text = serde_json::to_string_pretty(&json()).expect("a schema is plain JSON");
    text.push('\n');
    text
}

// `control/` is pure and knows nothing of the schema, so its two enums that the file
// names are described here, and a test holds each copy to what the real type reads.
// Every other type derives its own schema beside its definition.

// `control::balance::balancer::Strategy` as written.
/// How each write picks one of the sink's endpoints.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "Strategy")]
pub enum Strategy {
    /// Each endpoint in turn.
    RoundRobin,
    /// The endpoint with the fewest requests in flight.
    LeastLoaded,
    /// The less loaded of two endpoints picked at random.
    P2c,
    /// The faster of two endpoints picked at random, by peak-EWMA latency (the default).
    P2cEwma,
    /// P2C by requests in flight within a subset sized by load (`aperture`).
    Aperture,
}

// `control::balance::aperture::Mode` as written.
/// How the aperture's subset of endpoints is chosen.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "ApertureMode")]
pub enum ApertureMode {
    /// The first endpoints of an order of this worker's own (a seeded shuffle): workers
    /// pick independently, so some endpoints may serve more workers than others.
    Random,
    /// An arc of the ring by the worker's index and the number of workers.
    Deterministic,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Each value a copy above accepts, the type it describes accepts too.
    fn both_read<Copy: for<'de> Deserialize<'de>, Real: for<'de> Deserialize<'de>>(v: Value) {
        assert!(serde_json::from_value::<Copy>(v.clone()).is_ok(), "{v}");
        assert!(serde_json::from_value::<Real>(v.clone()).is_ok(), "{v}");
    }

    fn variants<T: JsonSchema>() -> Vec<Value> {
        let schema = schemars::schema_for!(T).to_value();
        let mut names = Vec::new();
        for one in schema["oneOf"].as_array().into_iter().flatten() {
            names.extend(one["enum"].as_array().into_iter().flatten().cloned());
            names.extend(one.get("const").cloned());
        }
        names.extend(schema["enum"].as_array().into_iter().flatten().cloned());
        assert!(!names.is_empty(), "{schema}");
        names
    }

    #[test]
    fn the_copies_name_what_the_real_types_read() {
        use crate::control::balance::{aperture::Mode, balancer::Strategy as Real};
        for name in variants::<Strategy>() {
            both_read::<Strategy, Real>(name);
        }
        for name in variants::<ApertureMode>() {
            both_read::<ApertureMode, Mode>(name);
        }
    }

    #[test]
    fn the_schema_is_draft_7_and_describes_every_section() {
        let schema = json();
        assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
        let sections = schema["properties"].as_object().unwrap();
        for section in [
            "source",
            "sink",
            "rate",
            "retry",
            "concurrency",
            "shutdown",
            "throttle",
            "leases",
            "telemetry",
            "health",
            "redact",
        ] {
            assert!(sections.contains_key(section), "{section} missing");
        }
        assert_eq!(schema["additionalProperties"], false);
        assert!(
            !schema.to_string().contains("\"const\""),
            "draft 4 readers ignore const"
        );
    }
}
