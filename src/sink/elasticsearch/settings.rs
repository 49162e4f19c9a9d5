//! `[sink.elasticsearch]`: where documents go and how they are written.
//!
//! ```toml
//! [sink]
//! kind = "elasticsearch"
//! url = "https://search.example:9200"   # the cluster; requests go to <url>/_bulk
//! key = "/id"                           # the document _id
//! [sink.elasticsearch]
//! index = "orders-{/day}"               # "{pointer}" is read from each record
//! op = "create"                         # or "index"
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::{ConfigError, Problems};
use crate::sink::http::settings::HttpTransport;
use crate::sink::settings::SinkSettings;

/// `[sink]` with `kind = "elasticsearch"`: the connection's keys, as an HTTP sink reads
/// them, and `[sink.elasticsearch]`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[schemars(rename = "ElasticsearchSink")]
pub struct ElasticsearchSettings {
    /// The index and the bulk action (required).
    pub elasticsearch: Option<BulkSettings>,
    #[serde(flatten)]
    pub transport: HttpTransport,
}

impl ElasticsearchSettings {
    pub(crate) fn validate(&self, sink: &SinkSettings, p: &mut Problems) {
        self.transport.validate(sink, p);
        p.check(validate(self.elasticsearch.as_ref()));
    }
}

/// The index records are written to, and the bulk action each is sent with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ElasticsearchSettings")]
pub struct BulkSettings {
    /// The target index (or data stream, or alias). `{/pointer}` in it is replaced by that
    /// field of each record, for date-suffixed indexes; a record without it, or whose
    /// value is not a string or a number, is dead-lettered.
    pub index: String,
    /// The bulk action each record is sent with.
    #[serde(default)]
    pub op: BulkOp,
}

/// The bulk action each record is sent with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BulkOp {
    /// Fails with 409 if the id exists: a redelivered record is counted as a duplicate,
    /// and the stored document is left alone. Data streams take only this.
    #[default]
    Create,
    /// Adds or replaces: a redelivered record overwrites its document (counted as a
    /// duplicate when the answer says `updated`).
    Index,
}

impl BulkOp {
    pub fn name(self) -> &'static str {
        match self {
            BulkOp::Create => "create",
            BulkOp::Index => "index",
        }
    }
}

/// One piece of an index name: literal text or a JSON pointer into the record.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Pointer(String),
}

/// Splits `index` into literal text and `{/pointer}` parts.
pub fn parse_index(index: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = index;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(Part::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("{index:?}: \"{{\" without a closing \"}}\""))?;
        let pointer = &after[..close];
        if !pointer.starts_with('/') {
            return Err(format!(
                "{index:?}: {{{pointer}}} is not a JSON pointer (it must start with '/', e.g. {{/day}})"
            ));
        }
        parts.push(Part::Pointer(pointer.to_string()));
        rest = &after[close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("{index:?}: \"}}\" without an opening \"{{\""));
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_string()));
    }
    Ok(parts)
}

/// Checks `[sink.elasticsearch]`: present, with an index name that can be built.
fn validate(settings: Option<&BulkSettings>) -> Result<(), ConfigError> {
    let Some(settings) = settings else {
        return Err(ConfigError::invalid(
            "sink.elasticsearch.index",
            "required for kind = \"elasticsearch\" (e.g. index = \"orders\")",
        ));
    };
    if settings.index.trim().is_empty() {
        return Err(ConfigError::invalid(
            "sink.elasticsearch.index",
            "must not be empty",
        ));
    }
    let parts = parse_index(&settings.index)
        .map_err(|e| ConfigError::invalid("sink.elasticsearch.index", e))?;
    let literal: String = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            Part::Pointer(_) => None,
        })
        .collect();
    // Elasticsearch refuses these in any index name; better said now than per record.
    if let Some(c) = literal
        .chars()
        .find(|c| c.is_ascii_uppercase() || "\\/*?\"<>| ,#:".contains(*c))
    {
        return Err(ConfigError::invalid(
            "sink.elasticsearch.index",
            format!(
                "{:?}: an index name cannot hold {c:?} (lowercase, no \\ / * ? \" < > | space , # :)",
                settings.index
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_templates() {
        assert_eq!(
            parse_index("orders").unwrap(),
            [Part::Text("orders".into())]
        );
        assert_eq!(
            parse_index("logs-{/day}-{/region/code}").unwrap(),
            [
                Part::Text("logs-".into()),
                Part::Pointer("/day".into()),
                Part::Text("-".into()),
                Part::Pointer("/region/code".into()),
            ]
        );
        assert!(
            parse_index("logs-{day}")
                .unwrap_err()
                .contains("JSON pointer")
        );
        assert!(parse_index("logs-{/day").unwrap_err().contains("closing"));
        assert!(parse_index("logs-}").unwrap_err().contains("opening"));
    }

    fn sink(index: Option<&str>) -> Option<BulkSettings> {
        index.map(|index| BulkSettings {
            index: index.into(),
            op: BulkOp::Create,
        })
    }

    #[test]
    fn validation_names_the_key() {
        let err = |s: Option<BulkSettings>| validate(s.as_ref()).unwrap_err().to_string();
        assert!(err(sink(None)).contains("sink.elasticsearch.index"));
        assert!(err(sink(Some("Orders"))).contains("'O'"));
        assert!(err(sink(Some(" "))).contains("must not be empty"));
        assert!(validate(sink(Some("logs-{/Day}")).as_ref()).is_ok());
    }
}
