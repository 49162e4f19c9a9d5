//! `SLUICE_*` environment variables beyond the `SLUICE_SECTION__KEY` figment reads: one
//! librdkafka property each, and names that look like configuration but are not.

use std::collections::BTreeMap;

use crate::sink::balanced::aperture;

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
