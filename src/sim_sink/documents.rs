//! What the emulator stored under each key, when asked to keep it (`--keep-documents`):
//! for checking that what landed is what was sent, value for value. Off by default: a
//! rehearsal of millions of records would hold them all in memory.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::lock::lock;

/// One stored document: the key it is stored under and the record as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub key: String,
    /// `--bulk`: the index it went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// `/ingest`: the envelope's `source` (where the record came from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub record: Value,
}

#[derive(Debug, Default)]
pub struct Documents {
    by_key: Mutex<BTreeMap<String, Stored>>,
}

impl Documents {
    /// Stores `doc` unless its key is stored (a deduplicating endpoint, a `create`).
    pub fn keep_first(&self, doc: Stored) {
        lock(&self.by_key).entry(doc.key.clone()).or_insert(doc);
    }

    /// Stores `doc` over what its key held (an `index` action).
    pub fn replace(&self, doc: Stored) {
        lock(&self.by_key).insert(doc.key.clone(), doc);
    }

    /// Every document, by key.
    pub fn all(&self) -> Vec<Stored> {
        lock(&self.by_key).values().cloned().collect()
    }
}
