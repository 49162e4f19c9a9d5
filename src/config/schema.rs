//! `sluice config schema`: the JSON Schema of the configuration file, derived from the same
//! serde types that read it, so an editor (Taplo, Even Better TOML) completes and checks
//! `sluice.toml` with the keys, defaults and doc comments sluice itself uses.
//!
//! Every type derives its schema beside its definition; the two of `control/`, which
//! knows nothing of the schema, are described in `sink::balanced::schema`.

use schemars::generate::SchemaSettings;

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
    closed_kinds(&mut value, "SourceSettings", Some("file"));
    closed_kinds(&mut value, "SinkSettings", None);
    value
}

/// A table whose `kind` picks its keys (`[source]`, `[sink]`) is derived as the keys
/// every kind reads beside one `allOf` reference per kind, which no editor can close
/// against unknown keys. Each kind becomes one closed object with the common keys, its own
/// and `kind`; `kind` may be left out for `default_kind`, as the loader reads it. `kind`
/// tells them apart, so they are `anyOf`: a fragment without it (an example in the book) still
/// matches every kind whose keys it uses.
fn closed_kinds(schema: &mut serde_json::Value, name: &str, default_kind: Option<&str>) {
    use serde_json::{Value, json};
    let definitions = schema["definitions"].clone();
    let table = &mut schema["definitions"][name];
    let common = table
        .as_object_mut()
        .and_then(|t| t.remove("properties"))
        .unwrap_or_else(|| json!({}));
    let common_required = table
        .as_object_mut()
        .and_then(|t| t.remove("required"))
        .unwrap_or_else(|| json!([]));
    let Some(kinds) = table.as_object_mut().and_then(|t| t.remove("oneOf")) else {
        return;
    };
    table["anyOf"] = kinds;
    for kind in table["anyOf"].as_array_mut().into_iter().flatten() {
        let own = kind["allOf"][0]["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/definitions/"))
            .map_or(Value::Null, |r| definitions[r].clone());
        let tag = kind["properties"]["kind"].clone();
        let is_default = default_kind.is_some_and(|d| tag["enum"] == json!([d]));
        let Value::Object(object) = kind else {
            continue;
        };
        object.remove("allOf");
        let mut properties = common.clone();
        for (key, value) in own["properties"].as_object().into_iter().flatten() {
            properties[key] = value.clone();
        }
        properties["kind"] = tag;
        object.insert("properties".into(), properties);
        let mut required: Vec<Value> = common_required.as_array().cloned().unwrap_or_default();
        required.extend(own["required"].as_array().cloned().unwrap_or_default());
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

#[cfg(test)]
mod tests {
    use super::*;

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
