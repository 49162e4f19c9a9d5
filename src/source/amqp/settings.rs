//! `[source]` with `kind = "amqp"`: the broker, the queue, and the connection's TLS.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::{ConfigError, Problems, read_secret_file};
use crate::source::settings::default_max_record_bytes;
use crate::tls::TlsSettings;

/// The longest name AMQP 0-9-1 carries (a short string): a queue, a message id.
pub const MOST_NAME_BYTES: usize = 255;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AmqpSettings {
    /// Broker URL (`amqp://user:pass@host:5672/vhost`).
    pub url: Option<String>,
    /// A file holding `url`, so its password stays out of the config.
    pub url_file: Option<PathBuf>,
    /// The queue to drain.
    pub queue: Option<String>,
    /// For an `amqps://` URL: a private CA, a client certificate.
    pub tls: Option<TlsSettings>,
    /// Declare the queue (durable) if it does not exist.
    #[serde(default = "declare_by_default")]
    pub declare: bool,
    /// A longer record is dead-lettered instead of being held in memory.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
}

impl Default for AmqpSettings {
    fn default() -> Self {
        AmqpSettings {
            url: None,
            url_file: None,
            queue: None,
            tls: None,
            declare: declare_by_default(),
            max_record_bytes: default_max_record_bytes(),
        }
    }
}

fn declare_by_default() -> bool {
    true
}

impl AmqpSettings {
    pub(crate) fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.url_file {
            let current = self.url.clone().unwrap_or_default();
            self.url = Some(read_secret_file(
                "source.url_file",
                "source.url",
                path,
                &current,
            )?);
        }
        Ok(())
    }

    pub(crate) fn validate(&self, p: &mut Problems) {
        #[cfg(not(feature = "amqp"))]
        p.add(
            "source.kind",
            crate::settings::not_built("amqp", "the AMQP source"),
        );
        let url = self.url.as_deref().unwrap_or("");
        if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
            p.add(
                "source.url",
                "kind = \"amqp\" needs an amqp:// or amqps:// URL",
            );
        }
        match self.queue.as_deref() {
            None => p.add("source.queue", "required for kind = \"amqp\""),
            Some(q) if q.trim().is_empty() => p.add("source.queue", "required for kind = \"amqp\""),
            // AMQP 0-9-1 carries a queue name as a short string.
            Some(q) if q.len() > MOST_NAME_BYTES => p.add(
                "source.queue",
                format!(
                    "is {} bytes long; AMQP names hold at most {MOST_NAME_BYTES}",
                    q.len()
                ),
            ),
            Some(_) => {}
        }
        if let Some(tls) = &self.tls {
            p.check(tls.validate(&crate::tls::SOURCE_KEYS));
            if !url.starts_with("amqps://") {
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
    }
}
