//! What only the HTTP sinks (`kind = "http"`, `"elasticsearch"`) read: how a batch is
//! encoded, where rejected records go, and the checks of their URLs, headers and timeout.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{EndpointConfig, Problems, SinkConfig, discovery};

/// How an http sink encodes a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HttpFormat {
    /// One JSON array of `{"key", "source", "record"}` objects.
    #[default]
    JsonArray,
    /// One such object per line (`application/x-ndjson`).
    Ndjson,
}

/// A dead-letter store apart from the sink: a database (`url`) or an NDJSON file (`path`).
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// `sqlite://…` (or `postgres://…`); the table is `sluice_dead_letters`.
    pub url: Option<String>,
    /// An NDJSON file, appended to.
    pub path: Option<PathBuf>,
}

impl SinkConfig {
    pub(super) fn validate_http(&self, p: &mut Problems) {
        let (key, urls): (&'static str, Vec<&str>) =
            if self.urls.is_empty() && self.discovery.file.is_none() {
                ("sink.url", vec![self.url.as_str()])
            } else {
                (
                    "sink.urls",
                    self.urls.iter().map(EndpointConfig::url).collect(),
                )
            };
        let resolved = |u: &&str| u.starts_with(discovery::DNS_PREFIX);
        for text in urls.into_iter().filter(|u| !resolved(u)) {
            match reqwest::Url::parse(text) {
                Err(e) => p.add(key, format!("{text:?} is not a URL: {e}")),
                Ok(url) if !matches!(url.scheme(), "http" | "https") => p.add(
                    key,
                    format!("kind = \"http\" needs an http(s):// URL, got {text:?}"),
                ),
                Ok(_) => {}
            }
        }
        p.positive_duration("sink.timeout", self.timeout);
        if let Err(e) =
            crate::sink::http::headers::build(&self.headers, |name| std::env::var(name).ok())
        {
            p.add("sink.headers", e.to_string());
        }
        // reqwest sends a URL's user:password as Basic auth in place of a configured
        // Authorization header, silently: one of them would be ignored.
        let authorization = self
            .headers
            .keys()
            .any(|h| h.eq_ignore_ascii_case("authorization"));
        let credentials = std::iter::once(self.url.as_str())
            .chain(self.urls.iter().map(EndpointConfig::url))
            .filter_map(|u| reqwest::Url::parse(u).ok())
            .any(|u| !u.username().is_empty() || u.password().is_some());
        if authorization && credentials {
            p.add(
                "sink.headers",
                "Authorization is set and the sink URL carries user:password@, which would replace it: keep one",
            );
        }
        let Some(dl) = &self.dead_letters else {
            p.add(
                "sink.dead_letters",
                "required for kind = \"http\": set url = \"sqlite://…\" or path = \"….ndjson\"",
            );
            return;
        };
        match (&dl.url, &dl.path) {
            (Some(url), None) if url.starts_with("postgres:") || url.starts_with("postgresql:") => {
                p.add(
                    "sink.dead_letters.url",
                    "a PostgreSQL dead-letter store is not available in this build; use url = \"sqlite://…\" or path = \"….ndjson\"",
                )
            }
            (Some(url), None) if !url.starts_with("sqlite:") => p.add(
                "sink.dead_letters.url",
                format!("needs a sqlite:// URL, got {url:?}"),
            ),
            (None, Some(path)) if path.as_os_str().is_empty() => {
                p.add("sink.dead_letters.path", "must not be empty")
            }
            (Some(_), None) | (None, Some(_)) => {}
            _ => p.add(
                "sink.dead_letters",
                "set exactly one of url (a database) or path (an NDJSON file)",
            ),
        }
    }
}
