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
}

/// A decoded record, ready for the sink.
#[derive(Debug, Clone)]
pub struct Row {
    pub key: String,
    /// Validated JSON text.
    pub payload: String,
    pub origin: String,
}

/// A record that will never be written, with why.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub origin: String,
    pub key: Option<String>,
    pub raw: Vec<u8>,
    pub reason: String,
    pub attempts: u32,
}

impl DeadLetter {
    pub fn from_row(row: &Row, reason: impl Into<String>, attempts: u32) -> Self {
        DeadLetter {
            origin: row.origin.clone(),
            key: Some(row.key.clone()),
            raw: row.payload.clone().into_bytes(),
            reason: reason.into(),
            attempts,
        }
    }
}
