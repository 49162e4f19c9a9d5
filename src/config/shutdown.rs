//! `[shutdown]`: how long the work in flight may take to finish on SIGINT/SIGTERM.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use crate::settings::Problems;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownSettings {
    /// How long in-flight batches may take to finish after SIGINT/SIGTERM.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
}

impl Default for ShutdownSettings {
    fn default() -> Self {
        ShutdownSettings {
            grace: Duration::from_secs(30),
        }
    }
}

impl ShutdownSettings {
    pub(super) fn validate(&self, p: &mut Problems) {
        p.at_most_a_year("shutdown.grace", self.grace);
    }
}
