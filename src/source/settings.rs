//! `[source]`: what is drained. The table's `kind` picks one backend, and each backend owns
//! its keys, their defaults and their checks beside its code (`file::settings`,
//! `amqp::settings`, `kafka::settings`); this only names the kinds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::amqp::settings::AmqpSettings;
use super::file::settings::FileSettings;
use super::kafka::settings::KafkaSettings;
use crate::settings::{ConfigError, Problems};
use crate::tls::TlsSettings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    #[default]
    File,
    Amqp,
    Kafka,
}

impl SourceKind {
    pub const ALL: [SourceKind; 3] = [SourceKind::File, SourceKind::Amqp, SourceKind::Kafka];
}

/// The `[source]` table; without `kind` it is a file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SourceSettings {
    /// An NDJSON file (or stdin), read once or followed.
    File(FileSettings),
    /// An AMQP 0-9-1 queue (RabbitMQ).
    Amqp(AmqpSettings),
    /// A Kafka topic, shared by a consumer group.
    Kafka(KafkaSettings),
}

impl Default for SourceSettings {
    fn default() -> Self {
        SourceSettings::File(FileSettings::default())
    }
}

impl SourceSettings {
    pub fn kind(&self) -> SourceKind {
        match self {
            SourceSettings::File(_) => SourceKind::File,
            SourceSettings::Amqp(_) => SourceKind::Amqp,
            SourceSettings::Kafka(_) => SourceKind::Kafka,
        }
    }

    /// What is drained, for people: a file, a topic, a queue.
    pub fn describe(&self) -> String {
        let or_unset = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".into());
        match self {
            SourceSettings::File(s) => format!(
                "file {}",
                s.path
                    .as_ref()
                    .map_or("(unset)".into(), |p| p.display().to_string())
            ),
            SourceSettings::Kafka(s) => format!("kafka topic {}", or_unset(&s.topic)),
            SourceSettings::Amqp(s) => format!("amqp queue {}", or_unset(&s.queue)),
        }
    }

    pub fn validate(&self, p: &mut Problems) {
        match self {
            SourceSettings::File(s) => s.validate(p),
            SourceSettings::Amqp(s) => s.validate(p),
            SourceSettings::Kafka(s) => s.validate(p),
        }
        p.count(
            "source.max_record_bytes",
            self.max_record_bytes() as u64,
            1,
            crate::settings::bounds::MOST_RECORD_BYTES,
        );
    }

    /// A longer record is dead-lettered instead of being held in memory.
    pub fn max_record_bytes(&self) -> usize {
        match self {
            SourceSettings::File(s) => s.max_record_bytes,
            SourceSettings::Amqp(s) => s.max_record_bytes,
            SourceSettings::Kafka(s) => s.max_record_bytes,
        }
    }

    /// The connection's TLS settings, for the kind that takes them as a table (AMQP; Kafka
    /// takes librdkafka's properties).
    pub fn tls(&self) -> Option<&TlsSettings> {
        match self {
            SourceSettings::Amqp(s) => s.tls.as_ref(),
            _ => None,
        }
    }

    pub fn file(&self) -> Option<&FileSettings> {
        match self {
            SourceSettings::File(s) => Some(s),
            _ => None,
        }
    }

    pub fn amqp(&self) -> Option<&AmqpSettings> {
        match self {
            SourceSettings::Amqp(s) => Some(s),
            _ => None,
        }
    }

    pub fn kafka(&self) -> Option<&KafkaSettings> {
        match self {
            SourceSettings::Kafka(s) => Some(s),
            _ => None,
        }
    }

    /// Fills `*_file` keys from their files.
    pub fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        match self {
            SourceSettings::File(_) => Ok(()),
            SourceSettings::Amqp(s) => s.read_secret_files(),
            SourceSettings::Kafka(s) => s.read_secret_files(),
        }
    }

    /// Tells the redactor the secrets this source's settings hold.
    pub fn register_secrets(&self) {
        match self {
            SourceSettings::File(_) => {}
            SourceSettings::Amqp(s) => {
                if let Some(url) = &s.url {
                    crate::redact::register_url_secrets(url);
                }
            }
            SourceSettings::Kafka(s) => s.register_secrets(),
        }
    }

    /// The keys of `[source]` that `kind` reads (besides `kind` itself), from the same
    /// types that read them.
    pub fn keys(kind: SourceKind) -> Vec<String> {
        match kind {
            SourceKind::File => crate::settings::keys_of::<FileSettings>(),
            SourceKind::Amqp => crate::settings::keys_of::<AmqpSettings>(),
            SourceKind::Kafka => crate::settings::keys_of::<KafkaSettings>(),
        }
    }
}

/// Every source holds a record in memory whole up to this size (1 MiB).
pub(crate) fn default_max_record_bytes() -> usize {
    1 << 20
}
