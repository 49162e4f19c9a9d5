//! `SLUICE_*` environment variables: `SLUICE_SECTION__KEY` for every key, one librdkafka
//! property each, and names that look like configuration but are not.

use std::collections::BTreeMap;

use figment::providers::Env;
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use crate::settings::ConfigError;
use crate::sink::balanced::aperture;

/// Every `SLUICE_SECTION__KEY` variable merged into `figment`, one provider each, so an
/// error names the variable. Every key lives in a section, so variables without `__`
/// (SLUICE_LOG) are not configuration; librdkafka's dotted property names cannot be
/// nested keys, so they come in through [`kafka_properties_from_env`].
///
/// figment's `Env` reads `123456` as a number and `true` as a boolean whatever the key, so
/// `SLUICE_TELEMETRY__TOKEN=123456` was refused as "not a string". Here a key whose schema
/// reads only text (a token, a name, a URL, a duration) takes the value exactly as it is
/// written; every other key's value is read as figment reads it (numbers, booleans,
/// `[a, b]` arrays, `{k = v}` tables).
pub(super) fn merge_variables(mut figment: Figment) -> Figment {
    let env = Env::prefixed("SLUICE_")
        .filter(|k| {
            k.as_str().contains("__")
                && !k
                    .as_str()
                    .to_ascii_uppercase()
                    .starts_with(KAFKA_PROPERTY_VARS)
        })
        .split("__");
    let variables: Vec<_> = env.iter().collect();
    if variables.is_empty() {
        return figment;
    }
    let schema = super::schema::json();
    for (key, raw) in variables {
        let path: Vec<&str> = key.as_str().split('.').collect();
        let value = if reads_only_text(&schema, &path) {
            Value::from(raw)
        } else {
            raw.parse()
                .unwrap_or_else(|never: std::convert::Infallible| match never {})
        };
        figment = figment.merge(Variable {
            name: format!(
                "SLUICE_{}",
                key.as_str().to_ascii_uppercase().replace('.', "__")
            ),
            key: key.to_string(),
            value,
        });
    }
    figment
}

/// One environment variable's value at its key.
struct Variable {
    name: String,
    key: String,
    value: Value,
}

impl Provider for Variable {
    fn metadata(&self) -> Metadata {
        Metadata::named(format!("environment variable {}", self.name))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let nested = figment::util::nest(&self.key, self.value.clone());
        Ok(Profile::Default.collect(nested.into_dict().unwrap_or_default()))
    }
}

/// Whether every schema the key at `path` may have reads a string (or nothing, for a key
/// that may be absent), across the kinds of a table (`[sink]`'s kinds) and the variants of
/// a value. A key the schema does not know reads as figment reads it: the load then
/// refuses it by name.
fn reads_only_text(schema: &serde_json::Value, path: &[&str]) -> bool {
    let mut leaves = Vec::new();
    schemas_at(schema, schema, path, &mut leaves);
    let types: Vec<&str> = leaves
        .iter()
        .flat_map(|leaf| match &leaf["type"] {
            serde_json::Value::String(t) => vec![t.as_str()],
            serde_json::Value::Array(ts) => ts.iter().filter_map(|t| t.as_str()).collect(),
            // A schema without a type (and no variants of its own) takes any value.
            _ if !is_combinator(leaf) => vec!["any"],
            _ => vec![],
        })
        .collect();
    types.contains(&"string") && types.iter().all(|t| matches!(*t, "string" | "null"))
}

fn is_combinator(schema: &serde_json::Value) -> bool {
    ["anyOf", "oneOf", "allOf"]
        .iter()
        .any(|k| schema.get(k).is_some())
}

/// The schemas of the value at `path` below `node`: references followed, every variant of
/// an `anyOf`/`oneOf`/`allOf` taken.
fn schemas_at<'a>(
    root: &'a serde_json::Value,
    node: &'a serde_json::Value,
    path: &[&str],
    out: &mut Vec<&'a serde_json::Value>,
) {
    let node = match node["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/definitions/"))
    {
        Some(name) => &root["definitions"][name],
        None => node,
    };
    for combinator in ["anyOf", "oneOf", "allOf"] {
        for variant in node[combinator].as_array().into_iter().flatten() {
            schemas_at(root, variant, path, out);
        }
    }
    match path.split_first() {
        None => out.push(node),
        Some((first, rest)) => {
            if let Some(property) = node["properties"].get(*first) {
                schemas_at(root, property, rest, out);
            } else if node["additionalProperties"].is_object() {
                schemas_at(root, &node["additionalProperties"], rest, out);
            }
        }
    }
}

/// The environment as text. A `SLUICE_*` variable whose name or value is not UTF-8 is
/// refused, naming it: read lossily, a token or a URL would silently be another one.
pub(super) fn variables() -> Result<Vec<(String, String)>, ConfigError> {
    let mut text = Vec::new();
    for (name, value) in std::env::vars_os() {
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => text.push((name, value)),
            (Ok(name), Err(_)) if name.starts_with("SLUICE_") => {
                return Err(ConfigError::invalid(name, "is not UTF-8 text"));
            }
            (Err(name), _) if name.to_string_lossy().starts_with("SLUICE_") => {
                return Err(ConfigError::invalid(
                    name.to_string_lossy().into_owned(),
                    "the variable's name is not UTF-8 text",
                ));
            }
            _ => {}
        }
    }
    Ok(text)
}

/// Environment variables that set one librdkafka property each.
pub(super) const KAFKA_PROPERTY_VARS: &str = "SOURCE__PROPERTIES__";

/// `SLUICE_SOURCE__PROPERTIES__SESSION_TIMEOUT_MS=2000` → `session.timeout.ms = "2000"`:
/// librdkafka's names are dotted and have no underscores, so `_` (or a literal `.`) after
/// the prefix stands for a dot.
pub fn kafka_properties_from_env(
    vars: impl Iterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let prefix = format!("SLUICE_{KAFKA_PROPERTY_VARS}");
    vars.filter_map(|(name, value)| {
        let upper = name.to_ascii_uppercase();
        let rest = upper.strip_prefix(&prefix)?;
        (!rest.is_empty()).then(|| (rest.to_ascii_lowercase().replace('_', "."), value))
    })
    .collect()
}

/// `SLUICE_*` variables that are neither configuration (`__`) nor known settings: most
/// likely a key written with one underscore (`SLUICE_SINK_URL`).
pub fn unknown_variables(names: impl Iterator<Item = String>) -> Vec<String> {
    const KNOWN: &[&str] = &["SLUICE_LOG", aperture::INDEX_VAR, aperture::COUNT_VAR];
    // The test suite's and the benches' own settings.
    const RESERVED_PREFIXES: &[&str] = &["SLUICE_TEST_", "SLUICE_BENCH_"];
    let mut unknown: Vec<String> = names
        .filter(|n| n.starts_with("SLUICE_") && !n.contains("__"))
        .filter(|n| !KNOWN.contains(&n.as_str()))
        .filter(|n| !RESERVED_PREFIXES.iter().any(|p| n.starts_with(p)))
        .collect();
    unknown.sort();
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keys_are_told_from_the_others_by_the_schema() {
        let schema = super::super::schema::json();
        let text = |key: &str| reads_only_text(&schema, &key.split('.').collect::<Vec<_>>());
        for key in [
            "telemetry.token",
            "sink.url",
            "sink.table",
            "leases.pool",
            "source.topic",
            "source.group",
            "rate.tick",
            "sink.headers.authorization",
        ] {
            assert!(text(key), "{key} reads text");
        }
        for key in [
            "rate.records_per_second",
            "retry.max_attempts",
            "source.declare",
            "sink.urls",
            "health.probe",
            "rate",
            "no.such_key",
        ] {
            assert!(!text(key), "{key} does not read text only");
        }
    }

    #[test]
    fn kafka_properties_from_the_environment_turn_underscores_into_dots() {
        let vars = [
            ("SLUICE_SOURCE__PROPERTIES__SESSION_TIMEOUT_MS", "2000"),
            ("SLUICE_SOURCE__PROPERTIES__SASL.MECHANISMS", "PLAIN"),
            ("SLUICE_SINK__URL", "x"),
            ("SLUICE_SOURCE__PROPERTIES__", "empty name"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let props = kafka_properties_from_env(vars.into_iter());
        assert_eq!(
            props,
            BTreeMap::from([
                ("sasl.mechanisms".to_string(), "PLAIN".to_string()),
                ("session.timeout.ms".to_string(), "2000".to_string()),
            ])
        );
    }

    #[test]
    fn single_underscore_variables_are_unknown() {
        let names = [
            "SLUICE_SINK_URL",
            "SLUICE_LOG",
            "SLUICE_SINK__URL",
            "SLUICE_TEST_PG_URL",
            "PATH",
        ]
        .map(String::from);
        assert_eq!(unknown_variables(names.into_iter()), ["SLUICE_SINK_URL"]);
    }
}
