//! Dead-letter stores that live apart from the sink, for sinks without tables of their own
//! (http): a database table or an NDJSON file. Like the sink itself, a store must hold a
//! letter durably before its record is acknowledged, and keeps one copy of a letter that
//! is stored twice (a redelivered bad record).
//!
//! Every letter says where it was going (`target`: the sink table, or the HTTP endpoint),
//! so that pipelines sharing one store keep their letters apart, and what the source said
//! about the message besides its payload (its key and headers).

pub mod ndjson;
pub mod settings;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;

use super::{SinkError, WriteOutcome};
use crate::record::{DeadLetter, HeaderValue, SourceContext};
use settings::DeadLetterSettings;

#[async_trait]
pub trait DeadLetterStore: Send + Sync {
    /// `Written` once every letter is durable; `inserted` counts the new ones.
    async fn store(&self, letters: &[DeadLetter]) -> WriteOutcome;
}

/// Opens the configured store for letters bound for `target`, creating its table or file
/// if missing.
pub async fn open(
    config: &DeadLetterSettings,
    target: &str,
) -> Result<Arc<dyn DeadLetterStore>, SinkError> {
    match (&config.url, &config.path) {
        (Some(url), _) if url.starts_with("sqlite:") => {
            Ok(Arc::new(sqlite::SqliteDeadLetters::open(url, target).await?))
        }
        // The seam for PostgreSQL: its sink (built on another branch) owns the
        // `sluice_dead_letters` DDL and insert; a store over that code plugs in here.
        (Some(url), _) if url.starts_with("postgres") => Err(SinkError {
            url: url.clone(),
            message: "a PostgreSQL dead-letter store is not available in this build; use url = \"sqlite://…\" or path = \"….ndjson\"".into(),
            not_now: false,
        }),
        (Some(url), _) => Err(SinkError {
            url: url.clone(),
            message: "unsupported dead-letter store URL".into(),
            not_now: false,
        }),
        (None, Some(path)) => Ok(Arc::new(
            ndjson::NdjsonDeadLetters::open(path, target).await?,
        )),
        (None, None) => Err(SinkError {
            url: String::new(),
            message: "sink.dead_letters needs url or path".into(),
            not_now: false,
        }),
    }
}

/// A message's headers as a JSON array, `[{"name": …, "value": …}]`; bytes that are not
/// UTF-8 are given as `value_hex`, a typed value (an AMQP number, table…) as its JSON.
/// None when the message had no headers.
pub fn headers_json(context: &SourceContext) -> Option<String> {
    if context.headers.is_empty() {
        return None;
    }
    let list: Vec<serde_json::Value> = context
        .headers
        .iter()
        .map(|(name, value)| match value {
            None => serde_json::json!({ "name": name, "value": null }),
            Some(HeaderValue::Json(v)) => serde_json::json!({ "name": name, "value": v }),
            Some(HeaderValue::Bytes(b)) => match std::str::from_utf8(b) {
                Ok(text) => serde_json::json!({ "name": name, "value": text }),
                Err(_) => serde_json::json!({ "name": name, "value_hex": hex::encode(b) }),
            },
        })
        .collect();
    Some(serde_json::Value::Array(list).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_keep_their_order_and_every_byte() {
        let context = SourceContext {
            headers: vec![
                ("trace".into(), Some(b"abc"[..].into())),
                ("bin".into(), Some(b"\xff\x00"[..].into())),
                ("flag".into(), None),
                ("trace".into(), Some(b"again"[..].into())),
                (
                    "n".into(),
                    Some(HeaderValue::Json(serde_json::json!({"a": [1]}))),
                ),
            ],
            ..Default::default()
        };
        assert_eq!(
            headers_json(&context).unwrap(),
            r#"[{"name":"trace","value":"abc"},{"name":"bin","value_hex":"ff00"},{"name":"flag","value":null},{"name":"trace","value":"again"},{"name":"n","value":{"a":[1]}}]"#
        );
        assert_eq!(headers_json(&SourceContext::default()), None);
    }
}
