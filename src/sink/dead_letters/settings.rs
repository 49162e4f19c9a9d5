//! `[sink.dead_letters]`: a dead-letter store apart from the sink, for the kinds without
//! tables of their own (HTTP, Elasticsearch).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::Problems;

/// A database (`url`) or an NDJSON file (`path`).
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterSettings {
    /// `sqlite://…`; the table is `sluice_dead_letters`.
    pub url: Option<String>,
    /// An NDJSON file, appended to.
    pub path: Option<PathBuf>,
}

impl DeadLetterSettings {
    pub(crate) fn validate(&self, p: &mut Problems) {
        match (&self.url, &self.path) {
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
