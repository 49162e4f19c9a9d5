//! `[telemetry]`: where /metrics, /healthz, /readyz and the operator controls listen.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::{ConfigError, Problems, read_secret_file};

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// Serve /metrics, /healthz, /readyz and the operator controls here, e.g.
    /// "127.0.0.1:9898"; off when absent.
    pub listen: Option<std::net::SocketAddr>,
    /// The bearer token the operator controls (`sluice ctl`) require; without one, a
    /// listener off loopback serves /metrics and health but refuses the controls (403).
    /// SLUICE_TELEMETRY__TOKEN keeps it out of the file.
    pub token: Option<String>,
    /// A file holding `token`.
    pub token_file: Option<PathBuf>,
}

impl TelemetrySettings {
    /// Fills `token` from `token_file`.
    pub(super) fn read_token_file(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.token_file {
            let current = self.token.clone().unwrap_or_default();
            self.token = Some(read_secret_file(
                "telemetry.token_file",
                "telemetry.token",
                path,
                &current,
            )?);
        }
        Ok(())
    }

    pub(super) fn validate(&self, p: &mut Problems) {
        if self.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            p.add("telemetry.token", "must not be empty");
        }
    }
}
