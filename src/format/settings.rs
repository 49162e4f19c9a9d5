//! `[source.value]`, `[source.key]` and `[source.schema_registry]`: how a Kafka message's
//! value and key are encoded, and where their schemas live.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::{ConfigError, HumanDuration, Problems, read_secret_file};
use crate::tls::{TlsKeys, TlsSettings};

/// How a value or a key is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The bytes as UTF-8 text (a key only: a value must become a JSON document).
    Text,
    /// A JSON document as it is.
    Json,
    /// Avro in the Confluent wire format (or plain Avro bodies with `schema_file`).
    Avro,
    /// Protobuf in the Confluent wire format (message indexes after the schema id).
    Protobuf,
    /// JSON in the Confluent wire format: the JSON after the header, as it is.
    JsonSchema,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Avro => "avro",
            Format::Protobuf => "protobuf",
            Format::JsonSchema => "json_schema",
        }
    }
}

/// `[source.value]` or `[source.key]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FormatSettings {
    /// How the bytes are encoded; without the table, `json` for a value and `text` for a key.
    pub format: Format,
    /// Avro only: the bodies are plain Avro datums written with this schema (`.avsc`), with
    /// no wire-format header and no registry.
    pub schema_file: Option<PathBuf>,
}

impl FormatSettings {
    pub fn value_default() -> Self {
        FormatSettings {
            format: Format::Json,
            schema_file: None,
        }
    }

    pub fn key_default() -> Self {
        FormatSettings {
            format: Format::Text,
            schema_file: None,
        }
    }

    /// Whether records in this format need the registry (a schema id in every record).
    pub fn needs_registry(&self) -> bool {
        match self.format {
            Format::Text | Format::Json => false,
            Format::Avro => self.schema_file.is_none(),
            Format::Protobuf | Format::JsonSchema => true,
        }
    }

    pub(crate) fn validate(&self, table: &'static str, p: &mut Problems) {
        let format_key = if table == "source.value" {
            "source.value.format"
        } else {
            "source.key.format"
        };
        let file_key = if table == "source.value" {
            "source.value.schema_file"
        } else {
            "source.key.schema_file"
        };
        if table == "source.value" && self.format == Format::Text {
            p.add(
                format_key,
                "\"text\" is for keys: a value must become a JSON document (json, avro, protobuf or json_schema)",
            );
        }
        if let Some(path) = &self.schema_file {
            if self.format != Format::Avro {
                p.add(
                    file_key,
                    format!(
                        "a schema file is for format = \"avro\" (plain Avro bodies), not {:?}",
                        self.format.name()
                    ),
                );
            } else if let Err(e) = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))
                .and_then(|text| super::avro::AvroSchema::parse(&text, &[]))
            {
                p.add(file_key, e);
            }
        }
    }
}

/// `[source.schema_registry]`: a Confluent-compatible schema registry (Confluent, Redpanda,
/// Apicurio's ccompat API, Karapace).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistrySettings {
    /// The registry's base URL, or several tried in turn.
    pub url: Urls,
    /// Basic auth (with `password` or `password_file`).
    pub username: Option<String>,
    /// Basic auth's password (SLUICE_SOURCE__SCHEMA_REGISTRY__PASSWORD keeps it out of the file).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub password: String,
    /// A file holding `password`.
    pub password_file: Option<PathBuf>,
    /// A bearer token (or `token_file`), instead of basic auth.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// A file holding `token`.
    pub token_file: Option<PathBuf>,
    /// At most this many registry requests per second (schemas are cached for the
    /// process's life: ids are immutable).
    #[serde(default = "default_requests_per_second")]
    pub requests_per_second: u32,
    /// How long one request may take before it counts as an outage.
    #[schemars(with = "HumanDuration")]
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    #[serde(default)]
    pub tls: TlsSettings,
}

/// One URL or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Urls {
    One(String),
    Many(Vec<String>),
}

impl Urls {
    pub fn list(&self) -> Vec<String> {
        match self {
            Urls::One(u) => vec![u.clone()],
            Urls::Many(v) => v.clone(),
        }
    }
}

fn default_requests_per_second() -> u32 {
    20
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

pub const REGISTRY_TLS_KEYS: TlsKeys = TlsKeys {
    ca_file: "source.schema_registry.tls.ca_file",
    cert_file: "source.schema_registry.tls.cert_file",
    key_file: "source.schema_registry.tls.key_file",
    insecure_skip_verify: "source.schema_registry.tls.insecure_skip_verify",
};

impl RegistrySettings {
    pub(crate) fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = self.password_file.take() {
            self.password = read_secret_file(
                "source.schema_registry.password_file",
                "source.schema_registry.password",
                &path,
                &self.password,
            )?;
        }
        if let Some(path) = self.token_file.take() {
            self.token = read_secret_file(
                "source.schema_registry.token_file",
                "source.schema_registry.token",
                &path,
                &self.token,
            )?;
        }
        Ok(())
    }

    pub(crate) fn register_secrets(&self) {
        for url in self.url.list() {
            crate::redact::register_url_secrets(&url);
        }
        for secret in [&self.password, &self.token] {
            if !secret.is_empty() {
                crate::redact::register_secret(secret);
            }
        }
    }

    pub(crate) fn validate(&self, p: &mut Problems) {
        let urls = self.url.list();
        if urls.is_empty() {
            p.add("source.schema_registry.url", "at least one URL");
        }
        for url in &urls {
            match reqwest::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                Ok(u) => p.add(
                    "source.schema_registry.url",
                    format!("{:?}: must be http:// or https://", u.scheme()),
                ),
                Err(e) => p.add(
                    "source.schema_registry.url",
                    format!("{}: {e}", crate::redact::redact(url)),
                ),
            }
        }
        if !self.token.is_empty() && (self.username.is_some() || !self.password.is_empty()) {
            p.add(
                "source.schema_registry.token",
                "set a bearer token or a username and password, not both",
            );
        }
        if self.username.is_none() && !self.password.is_empty() {
            p.add(
                "source.schema_registry.username",
                "required with source.schema_registry.password",
            );
        }
        if self.requests_per_second == 0 {
            p.add(
                "source.schema_registry.requests_per_second",
                "must be at least 1",
            );
        }
        p.positive_duration("source.schema_registry.timeout", self.timeout);
        p.at_most_a_year("source.schema_registry.timeout", self.timeout);
        if let Err(e) = self.tls.validate(&REGISTRY_TLS_KEYS) {
            p.push(e);
        }
    }
}
