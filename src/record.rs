//! What flows from a source to a sink.

/// Where a record sits in its source: enough to acknowledge it and to resume after it.
///
/// `lane` is a partition (Kafka), 0 for a file or a queue; `[start, end)` is the span the
/// record occupies in that lane (byte range in a file, `offset..offset+1` in Kafka), so
/// the source can advance its committed position only over contiguous acknowledged spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    pub lane: i32,
    pub start: u64,
    pub end: u64,
}

/// One record as pulled, before it is decoded.
#[derive(Debug, Clone)]
pub struct Record {
    pub position: Position,
    /// Human-readable origin stored with the row, e.g. `records.ndjson:17` or `orders/3/1200`.
    pub origin: String,
    /// The key used when `sink.key` is not set (or the source has a better one).
    pub fallback_key: String,
    pub payload: Vec<u8>,
    /// Set when the source cut the payload short because it exceeded the size limit;
    /// holds the record's real length in bytes.
    pub oversize: Option<u64>,
    /// Set when the payload (or key) could not be decoded from its wire format, with why;
    /// the payload is then the bytes as received.
    pub undecodable: Option<String>,
    pub context: SourceContext,
}

/// What the source said about a record besides its payload. Kept with the record so that
/// a dead letter can say which message it was (a Kafka key and headers identify a message
/// to its producer better than an offset does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceContext {
    /// The message key (Kafka), as sent.
    pub key: Option<Vec<u8>>,
    /// Message headers in order (Kafka headers, the AMQP header table); a value as sent,
    /// or None for a header without one.
    pub headers: Vec<(String, Option<HeaderValue>)>,
    /// The message had no value at all (a Kafka tombstone), not merely an empty one.
    pub tombstone: bool,
}

/// A header's value as the source sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// Bytes (Kafka headers, AMQP strings and byte arrays): shown as text, or as hex when
    /// they are not UTF-8.
    Bytes(Vec<u8>),
    /// A typed value (AMQP numbers, booleans, timestamps, tables, arrays) as JSON.
    Json(serde_json::Value),
}

impl From<&[u8]> for HeaderValue {
    fn from(bytes: &[u8]) -> Self {
        HeaderValue::Bytes(bytes.to_vec())
    }
}

/// A decoded record, ready for the sink.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub key: String,
    /// Validated JSON text.
    pub payload: String,
    pub origin: String,
    /// Carried along only for a dead letter, should the sink refuse the row.
    pub context: SourceContext,
    /// Upsert mode: the version that must be newer than the stored one to apply.
    pub version: Option<Version>,
    /// Upsert mode: the record deletes its key (a tombstone, a delete flag).
    pub delete: bool,
}

/// A record that will never be written, with why.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub origin: String,
    pub key: Option<String>,
    pub raw: Vec<u8>,
    pub reason: String,
    pub attempts: u32,
    /// Boxed: most letters carry none, and a decode result stays small.
    pub context: Box<SourceContext>,
}

impl DeadLetter {
    pub fn from_row(row: &Row, reason: impl Into<String>, attempts: u32) -> Self {
        DeadLetter {
            origin: row.origin.clone(),
            key: Some(row.key.clone()),
            raw: row.payload.clone().into_bytes(),
            reason: reason.into(),
            attempts,
            context: Box::new(row.context.clone()),
        }
    }
}

/// What a version is; versions of different kinds are never compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionKind {
    /// The Kafka offset: orders the versions of a key within its partition.
    Source,
    /// A JSON number in the value.
    Number,
    /// An RFC 3339 timestamp in the value, stored as nanoseconds since the epoch.
    Time,
}

impl VersionKind {
    pub fn name(self) -> &'static str {
        match self {
            VersionKind::Source => "source",
            VersionKind::Number => "number",
            VersionKind::Time => "timestamp",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [VersionKind::Source, VersionKind::Number, VersionKind::Time]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// A record's version, as the sink stores and compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub kind: VersionKind,
    /// Exact decimal text, for a `numeric` column (a timestamp as epoch nanoseconds).
    pub numeric: String,
}
