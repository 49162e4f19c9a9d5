//! `[source]`: what is drained — an NDJSON file, a Kafka topic, an AMQP queue — and the
//! checks of the keys each kind reads.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use super::{MOST_RECORD_BYTES, Problems};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    #[default]
    File,
    Amqp,
    Kafka,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub kind: SourceKind,
    /// File source: NDJSON path, or "-" for stdin.
    pub path: Option<PathBuf>,
    /// File source: where acknowledged progress is kept; default `<path>.sluice-checkpoint`.
    pub checkpoint: Option<PathBuf>,
    /// File source, following: how long a rotated-away file must stay unchanged, once read
    /// to its end, before it counts as finished and the new file at `path` is read.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(default = "default_rotate_wait", with = "humantime_serde")]
    pub rotate_wait: Duration,
    /// A longer record is dead-lettered instead of being held in memory.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
    /// AMQP source: broker URL (`amqp://user:pass@host:5672/vhost`).
    pub url: Option<String>,
    /// AMQP source: a file holding `url`, so its password stays out of the config.
    pub url_file: Option<PathBuf>,
    /// AMQP source: the queue to drain.
    pub queue: Option<String>,
    /// AMQP source (`amqps://`): a private CA, a client certificate.
    pub tls: Option<crate::tls::TlsConfig>,
    /// AMQP source: declare the queue (durable) if it does not exist.
    #[serde(default = "default_true")]
    pub declare: bool,
    /// Kafka source: bootstrap servers, `host:port[,host:port…]`.
    pub brokers: Option<String>,
    /// Kafka source: the topic drained (and `sluice produce`'s destination).
    pub topic: Option<String>,
    /// Kafka source: consumer group; workers in one group share the topic's partitions.
    pub group: Option<String>,
    /// Kafka source: librdkafka properties passed through as they are (TLS, SASL, tuning).
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
    /// Kafka source: how long `--until-empty` waits for the group to assign partitions.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(default = "default_assignment_timeout", with = "humantime_serde")]
    pub assignment_timeout: Duration,
}

fn default_true() -> bool {
    true
}

impl SourceConfig {
    /// What is drained, for people: a file, a topic, a queue.
    pub fn describe(&self) -> String {
        let or_unset = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".into());
        match self.kind {
            SourceKind::File => format!(
                "file {}",
                self.path
                    .as_ref()
                    .map_or("(unset)".into(), |p| p.display().to_string())
            ),
            SourceKind::Kafka => format!("kafka topic {}", or_unset(&self.topic)),
            SourceKind::Amqp => format!("amqp queue {}", or_unset(&self.queue)),
        }
    }

    pub(super) fn validate(&self, p: &mut Problems) {
        match self.kind {
            SourceKind::File => match &self.path {
                None => p.add("source.path", "required for kind = \"file\""),
                Some(path) if path.as_os_str() != "-" && !path.is_file() => p.add(
                    "source.path",
                    format!("input file {} does not exist", path.display()),
                ),
                Some(_) => {}
            },
            SourceKind::Amqp => {
                let url = self.url.as_deref().unwrap_or("");
                if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
                    p.add(
                        "source.url",
                        "kind = \"amqp\" needs an amqp:// or amqps:// URL",
                    );
                }
                if self.queue.as_deref().is_none_or(|q| q.trim().is_empty()) {
                    p.add("source.queue", "required for kind = \"amqp\"");
                }
            }
            SourceKind::Kafka => {}
        }
        if let Some(tls) = &self.tls {
            p.check(tls.validate(&crate::tls::SOURCE_KEYS));
            if !self.url.as_deref().unwrap_or("").starts_with("amqps://") {
                p.add(
                    "source.tls",
                    "applies to an amqps:// URL (TLS); source.url is not one",
                );
            }
            // lapin's TLS has no switch for it; an encrypted connection to anyone is not
            // worth a connector of our own.
            if tls.insecure_skip_verify {
                p.add(
                    "source.tls.insecure_skip_verify",
                    "is not supported for AMQP: set source.tls.ca_file to the CA that signed the broker's certificate",
                );
            }
        }
        crate::source::kafka::settings::validate(self, p);
        p.at_most_a_year("source.rotate_wait", self.rotate_wait);
        p.count(
            "source.max_record_bytes",
            self.max_record_bytes as u64,
            1,
            MOST_RECORD_BYTES,
        );
    }
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

fn default_assignment_timeout() -> Duration {
    Duration::from_secs(60)
}

fn default_rotate_wait() -> Duration {
    Duration::from_secs(5)
}

fn default_max_record_bytes() -> usize {
    1 << 20
}
