//! Dead-letter stores that live apart from the sink, for sinks without tables of their own
//! (http): a database table or an NDJSON file. Like the sink itself, a store must hold a
//! letter durably before its record is acknowledged, and keeps one copy of a letter that
//! is stored twice (a redelivered bad record).

pub mod ndjson;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;

use super::{SinkError, WriteOutcome};
use crate::config::DeadLetterConfig;
use crate::record::DeadLetter;

#[async_trait]
pub trait DeadLetterStore: Send + Sync {
    /// `Written` once every letter is durable; `inserted` counts the new ones.
    async fn store(&self, letters: &[DeadLetter]) -> WriteOutcome;
}

/// Opens the configured store, creating its table or file if missing.
pub async fn open(config: &DeadLetterConfig) -> Result<Arc<dyn DeadLetterStore>, SinkError> {
    match (&config.url, &config.path) {
        (Some(url), _) if url.starts_with("sqlite:") => {
            Ok(Arc::new(sqlite::SqliteDeadLetters::open(url).await?))
        }
        // The seam for PostgreSQL: its sink (built on another branch) owns the
        // `sluice_dead_letters` DDL and insert; a store over that code plugs in here.
        (Some(url), _) if url.starts_with("postgres") => Err(SinkError {
            url: url.clone(),
            message: "a PostgreSQL dead-letter store is not available in this build; use url = \"sqlite://…\" or path = \"….ndjson\"".into(),
        }),
        (Some(url), _) => Err(SinkError {
            url: url.clone(),
            message: "unsupported dead-letter store URL".into(),
        }),
        (None, Some(path)) => Ok(Arc::new(ndjson::NdjsonDeadLetters::open(path).await?)),
        (None, None) => Err(SinkError {
            url: String::new(),
            message: "sink.dead_letters needs url or path".into(),
        }),
    }
}
