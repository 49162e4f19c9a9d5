//! Secrets in the configuration: `*_file` keys that keep them out of the file and `ps`,
//! and telling the redactor every one, so no log line, message or metric shows it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Config;
use crate::settings::ConfigError;
use crate::settings::read_secret_file as read;

/// What else counts as a secret in what sluice shows (logs, messages, metrics).
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedactSettings {
    /// Query parameters whose values are masked, besides the built-in names (password,
    /// token, key, secret, sig, signature, apikey, access_token, …).
    #[serde(default)]
    pub query_params: Vec<String>,
}

impl Config {
    /// Fills `*_file` keys from their files (secrets kept out of the config and `ps`).
    pub(super) fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        self.sink.read_secret_files()?;
        self.source.read_secret_files()?;
        if let Some(l) = &mut self.leases
            && let Some(path) = &l.store_file
        {
            l.store = read("leases.store_file", "leases.store", path, &l.store)?;
        }
        self.telemetry.read_token_file()?;
        for probe in &mut self.health.probe {
            probe.read_url_file()?;
        }
        Ok(())
    }

    /// Tells the redactor every secret this configuration holds, so no output shows one.
    pub(super) fn register_secrets(&self) {
        use crate::redact::{register_secret, register_secret_param, register_url_secrets};
        for name in &self.redact.query_params {
            register_secret_param(name);
        }
        let urls = [
            Some(self.sink.url.as_str()),
            self.leases.as_ref().map(|l| l.store.as_str()),
            self.sink.dead_letters().and_then(|d| d.url.as_deref()),
        ];
        for url in urls.into_iter().flatten() {
            register_url_secrets(url);
        }
        for endpoint in &self.sink.urls {
            register_url_secrets(endpoint.url());
        }
        for probe in &self.health.probe {
            for url in probe.url.iter().chain(&probe.replicas) {
                register_url_secrets(url);
            }
        }
        if let Some(token) = &self.telemetry.token {
            register_secret(token);
        }
        let headers = self
            .sink
            .headers()
            .map(|h| crate::sink::http::headers::build(h, |v| std::env::var(v).ok()));
        if let Some(Ok(headers)) = headers {
            for value in headers.values().filter_map(|v| v.to_str().ok()) {
                register_secret(value);
                // "Bearer xyz": the token alone may be printed by someone else.
                if let Some((_, token)) = value.split_once(' ') {
                    register_secret(token);
                }
            }
        }
        self.source.register_secrets();
    }
}
