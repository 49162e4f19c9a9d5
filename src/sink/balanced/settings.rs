//! `[sink.balance]` and `sink.urls`: a sink served by several endpoints, and how each
//! write picks one.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{aperture, schema};
use crate::control::balance::balancer::Strategy;
use crate::settings::{HumanDuration, Problems};

/// One endpoint of a sink served by several hosts: a URL, or a URL with its zone and the
/// name metrics show it by (`host:port` when unnamed; never the URL).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EndpointSettings {
    Url(String),
    Zoned {
        url: String,
        zone: Option<String>,
        name: Option<String>,
    },
}

impl EndpointSettings {
    pub fn url(&self) -> &str {
        match self {
            EndpointSettings::Url(u) | EndpointSettings::Zoned { url: u, .. } => u,
        }
    }

    pub fn zone(&self) -> Option<&str> {
        match self {
            EndpointSettings::Url(_) => None,
            EndpointSettings::Zoned { zone, .. } => zone.as_deref(),
        }
    }

    /// The label metrics and readiness show: the configured name, else `host:port`.
    pub fn label(&self) -> String {
        match self {
            EndpointSettings::Zoned {
                name: Some(name), ..
            } => name.clone(),
            _ => crate::redact::endpoint_label(self.url()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BalanceSettings {
    #[schemars(with = "schema::StrategySchema")]
    pub strategy: crate::control::balance::balancer::Strategy,
    /// This worker's zone: endpoints of other zones are used only when none here is up.
    pub zone: Option<String>,
    /// How fast the peak-EWMA latency forgets a slow answer.
    #[schemars(with = "HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub decay: Duration,
    /// `strategy = "aperture"`: the subset's bounds, load band and mode.
    pub aperture: aperture::ApertureSettings,
}

impl Default for BalanceSettings {
    fn default() -> Self {
        BalanceSettings {
            strategy: Default::default(),
            zone: None,
            decay: Duration::from_secs(10),
            aperture: Default::default(),
        }
    }
}

impl BalanceSettings {
    pub(crate) fn validate(&self, p: &mut Problems) {
        let b = self;
        if b.strategy != Strategy::Aperture {
            if b.aperture != aperture::ApertureSettings::default() {
                p.add(
                    "sink.balance.aperture",
                    "applies only with strategy = \"aperture\"",
                );
            }
            return;
        }
        if b.zone.is_some() {
            p.add(
                "sink.balance.zone",
                "is not combined with strategy = \"aperture\" (the subset would cut across zones)",
            );
        }
        b.aperture.validate(&|v| std::env::var(v).ok(), p);
    }
}
