//! `[sink.discovery]`: endpoints found while the worker runs — the addresses a
//! `dns+http://name:port/path` entry of `sink.urls` resolves to, and the URLs a file lists
//! — looked at again every `interval`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::{HumanDuration, Problems};
use crate::sink::balanced::settings::EndpointSettings;
use crate::sink::settings::SinkKind;

/// The scheme prefix of a `sink.urls` entry whose name is resolved to endpoints.
pub const DNS_PREFIX: &str = "dns+";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoverySettings {
    /// How often names are resolved again and the file read again (Finagle's DNS
    /// resolver's default).
    #[schemars(with = "HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// A file of endpoint URLs, one a line (`#` starts a comment).
    pub file: Option<PathBuf>,
    /// The DNS server asked for `dns+` names (`ip:port`); absent: the system's
    /// (`/etc/resolv.conf`).
    pub nameserver: Option<SocketAddr>,
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        DiscoverySettings {
            interval: Duration::from_secs(5),
            file: None,
            nameserver: None,
        }
    }
}

impl DiscoverySettings {
    pub fn validate(&self, kind: SinkKind, urls: &[EndpointSettings], p: &mut Problems) {
        p.positive_duration("sink.discovery.interval", self.interval);
        let dns: Vec<&str> = urls
            .iter()
            .map(EndpointSettings::url)
            .filter(|u| u.starts_with(DNS_PREFIX))
            .collect();
        if !matches!(kind, SinkKind::Http | SinkKind::Elasticsearch) && !dns.is_empty() {
            p.add(
                "sink.urls",
                "dns+http:// names are resolved for HTTP sinks only",
            );
        }
        for url in &dns {
            match reqwest::Url::parse(&url[DNS_PREFIX.len()..]) {
                Ok(u) if u.scheme() == "http" && u.host_str().is_some() => {}
                Ok(_) => p.add(
                    "sink.urls",
                    format!("{url:?}: only dns+http://name:port/path is resolved (an https certificate would not name the addresses)"),
                ),
                Err(e) => p.add("sink.urls", format!("{url:?} is not a URL: {e}")),
            }
        }
        if dns.is_empty() && self.file.is_none() && *self != DiscoverySettings::default() {
            p.add(
                "sink.discovery",
                "applies to dns+http:// entries of sink.urls or a file: there is neither",
            );
        }
        if kind == SinkKind::Sqlite && self.file.is_some() {
            p.add(
                "sink.discovery.file",
                "kind = \"sqlite\" is one local file: set url",
            );
        }
        if let Some(file) = &self.file
            && !file.is_file()
        {
            p.add(
                "sink.discovery.file",
                format!("{} does not exist", file.display()),
            );
        }
    }
}
