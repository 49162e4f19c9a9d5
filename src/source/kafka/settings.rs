//! `[source]` with `kind = "kafka"`: brokers, topic, group, and librdkafka's pass-through
//! properties (the client built from them is `client`). Checked while the configuration
//! loads, so a misspelt property exits 2 instead of failing at the first pull.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::format::settings::{FormatSettings, RegistrySettings};
use crate::settings::{ConfigError, HumanDuration, Problems, read_secret_file};
use crate::source::settings::default_max_record_bytes;

/// `[source]` with `kind = "kafka"`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct KafkaSettings {
    /// Bootstrap servers, `host:port[,host:port…]`.
    pub brokers: Option<String>,
    /// The topic drained (and `sluice produce`'s destination).
    pub topic: Option<String>,
    /// Consumer group; workers in one group share the topic's partitions.
    pub group: Option<String>,
    /// librdkafka properties passed through as they are (TLS, SASL, tuning).
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
    /// How long `--until-empty` waits for the group to assign partitions.
    #[schemars(with = "HumanDuration")]
    #[serde(default = "default_assignment_timeout", with = "humantime_serde")]
    pub assignment_timeout: Duration,
    /// A longer record is dead-lettered instead of being held in memory.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
    /// How message values are encoded (`format = "json"` unless set).
    #[serde(default = "FormatSettings::value_default")]
    pub value: FormatSettings,
    /// How message keys are encoded (`format = "text"` unless set).
    #[serde(default = "FormatSettings::key_default")]
    pub key: FormatSettings,
    /// Where the schemas of `avro`, `protobuf` and `json_schema` records live.
    pub schema_registry: Option<Box<RegistrySettings>>,
}

impl Default for KafkaSettings {
    fn default() -> Self {
        KafkaSettings {
            brokers: None,
            topic: None,
            group: None,
            properties: BTreeMap::new(),
            assignment_timeout: default_assignment_timeout(),
            max_record_bytes: default_max_record_bytes(),
            value: FormatSettings::value_default(),
            key: FormatSettings::key_default(),
            schema_registry: None,
        }
    }
}

fn default_assignment_timeout() -> Duration {
    Duration::from_secs(60)
}

/// A librdkafka property value; TOML numbers and booleans are accepted as they read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PropertyValue {
    Text(String),
    Integer(i64),
    Float(f64),
    Flag(bool),
}

impl std::fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PropertyValue::Text(s) => f.write_str(s),
            PropertyValue::Integer(i) => write!(f, "{i}"),
            PropertyValue::Float(x) => write!(f, "{x}"),
            PropertyValue::Flag(b) => write!(f, "{b}"),
        }
    }
}

/// Properties sluice sets itself; overriding them would break its guarantees or duplicate
/// a key of `[source]`.
const RESERVED: &[(&str, &str)] = &[
    ("bootstrap.servers", "set source.brokers instead"),
    ("group.id", "set source.group instead"),
    (
        "enable.auto.commit",
        "sluice commits only offsets whose records are written or dead-lettered",
    ),
    (
        "enable.auto.offset.store",
        "sluice commits only offsets whose records are written or dead-lettered",
    ),
    (
        "enable.partition.eof",
        "sluice needs end-of-partition events to tell when it is caught up",
    ),
];

impl KafkaSettings {
    /// `"sasl.password_file" = "/run/secrets/kafka"` sets `sasl.password` from the file
    /// (librdkafka's own names have no underscores, so the suffix cannot clash).
    pub(crate) fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        let files: Vec<(String, String)> = self
            .properties
            .iter()
            .filter_map(|(k, v)| Some((k.strip_suffix("_file")?.to_string(), v.to_string())))
            .collect();
        for (name, path) in files {
            if self.properties.contains_key(&name) {
                return Err(ConfigError::invalid(
                    "source.properties",
                    format!("set {name:?} or \"{name}_file\", not both"),
                ));
            }
            let value =
                read_secret_file("source.properties", "", Path::new(&path), "").map_err(|e| {
                    ConfigError::invalid("source.properties", format!("{name}_file: {e}"))
                })?;
            self.properties.remove(&format!("{name}_file"));
            self.properties.insert(name, PropertyValue::Text(value));
        }
        if let Some(registry) = &mut self.schema_registry {
            registry.read_secret_files()?;
        }
        Ok(())
    }

    /// Tells the redactor the values of properties whose names mean a secret.
    pub(crate) fn register_secrets(&self) {
        for (key, value) in &self.properties {
            if crate::redact::is_secret_param(key, true) {
                crate::redact::register_secret(&value.to_string());
            }
        }
        if let Some(registry) = &self.schema_registry {
            registry.register_secrets();
        }
    }

    /// Checks the keys of a Kafka `[source]`, the pass-through properties included.
    pub(crate) fn validate(&self, p: &mut Problems) {
        let source = self;
        let brokers = source.brokers.as_deref().unwrap_or_default();
        if brokers.trim().is_empty() {
            p.add(
                "source.brokers",
                "required for kind = \"kafka\" (host:port[,host:port…])",
            );
        }
        let topic = source.topic.as_deref().unwrap_or_default();
        if let Err(e) = validate_topic(topic) {
            p.add("source.topic", e);
        }
        if source
            .group
            .as_deref()
            .unwrap_or_default()
            .trim()
            .is_empty()
        {
            p.add(
                "source.group",
                "required for kind = \"kafka\": workers sharing a group share the partitions",
            );
        }
        p.positive_duration("source.assignment_timeout", source.assignment_timeout);
        source.value.validate("source.value", p);
        source.key.validate("source.key", p);
        match &source.schema_registry {
            Some(registry) => registry.validate(p),
            None => {
                for (table, f) in [("source.value", &source.value), ("source.key", &source.key)] {
                    if f.needs_registry() {
                        p.add(
                            "source.schema_registry",
                            format!(
                                "required: {table}.format = {:?} reads each record's schema id from it{}",
                                f.format.name(),
                                if f.format == crate::format::settings::Format::Avro {
                                    format!(" (or set {table}.schema_file for plain Avro bodies)")
                                } else {
                                    String::new()
                                }
                            ),
                        );
                    }
                }
            }
        }
        let reserved: Vec<_> = (source.properties.keys())
            .filter_map(|key| RESERVED.iter().find(|(k, _)| k == key))
            .collect();
        for (key, why) in &reserved {
            p.add(
                "source.properties",
                format!("{key:?} cannot be set here: {why}"),
            );
        }
        #[cfg(feature = "kafka")]
        if reserved.is_empty()
            && let Err(e) = super::client::consumer(source).create_native_config()
        {
            p.add("source.properties", e.to_string());
        }
        #[cfg(not(feature = "kafka"))]
        p.add(
            "source.kind",
            crate::settings::not_built("kafka", "the Kafka source"),
        );
    }
}

/// Kafka's own rule: 1–249 characters of `[A-Za-z0-9._-]`, not "." or "..".
fn validate_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("required for kind = \"kafka\"".into());
    }
    let legal = topic
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !legal || topic.len() > 249 || topic == "." || topic == ".." {
        return Err(format!(
            "{topic:?} is not a Kafka topic name (1-249 of letters, digits, '.', '_', '-')"
        ));
    }
    Ok(())
}

#[cfg(all(test, feature = "kafka"))]
pub(crate) mod tests {
    use super::*;

    /// A complete Kafka source, for tests to change one key of.
    pub(crate) fn kafka() -> KafkaSettings {
        KafkaSettings {
            brokers: Some("127.0.0.1:9092".into()),
            topic: Some("orders".into()),
            group: Some("sluice".into()),
            assignment_timeout: std::time::Duration::from_secs(60),
            ..Default::default()
        }
    }

    pub(crate) fn checked(source: &KafkaSettings) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        source.validate(&mut p);
        p.into_result()
    }

    fn key_of(err: ConfigError) -> String {
        match err {
            ConfigError::Invalid { key, .. } => key.into_owned(),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn missing_and_malformed_keys_are_named() {
        let mut s = kafka();
        s.brokers = None;
        assert_eq!(key_of(checked(&s).unwrap_err()), "source.brokers");
        let mut s = kafka();
        s.topic = Some("orders; drop".into());
        assert_eq!(key_of(checked(&s).unwrap_err()), "source.topic");
        let mut s = kafka();
        s.group = Some(" ".into());
        assert_eq!(key_of(checked(&s).unwrap_err()), "source.group");
    }

    #[test]
    fn reserved_and_unknown_properties_are_refused() {
        let mut s = kafka();
        s.properties
            .insert("enable.auto.commit".into(), PropertyValue::Flag(true));
        assert_eq!(key_of(checked(&s).unwrap_err()), "source.properties");
        let mut s = kafka();
        s.properties
            .insert("no.such.property".into(), PropertyValue::Integer(1));
        assert_eq!(key_of(checked(&s).unwrap_err()), "source.properties");
    }

    /// librdkafka is built with TLS (and so SASL SCRAM): these are accepted, not
    /// "not available at build time".
    #[test]
    fn sasl_over_tls_is_accepted() {
        let mut s = kafka();
        for (key, value) in [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "sluice"),
            ("sasl.password", "not-a-real-one"),
            ("ssl.endpoint.identification.algorithm", "https"),
        ] {
            s.properties
                .insert(key.into(), PropertyValue::Text(value.into()));
        }
        checked(&s).unwrap();
        s.properties.insert(
            "sasl.mechanism".into(),
            PropertyValue::Text("SCRAM-SHA-256".into()),
        );
        checked(&s).unwrap();
        s.properties
            .insert("sasl.mechanism".into(), PropertyValue::Text("PLAIN".into()));
        checked(&s).unwrap();
    }
}
