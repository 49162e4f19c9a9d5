//! Elasticsearch and OpenSearch through `_bulk`: one NDJSON request per batch, each record
//! an `create` (or `index`) action with its key as `_id`, so a redelivered record meets
//! its own document ([`body`]). The cluster answers 200 even when it refused some items —
//! a full write queue (429), a mapping error (400), an existing id (409) — so the answer
//! is read item by item ([`answer`]) and only the items it did not take are sent again.
//! The transport (headers, TLS, redirects, timeouts, dead letters) is the HTTP sink's.

pub mod answer;
pub mod body;
pub mod settings;
