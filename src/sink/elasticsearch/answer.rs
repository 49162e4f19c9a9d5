//! Reading a `_bulk` answer (HTTP 2xx) item by item. The items come in the order of the
//! actions; each is `{"<action>": {"status": …, "result": …, "error": {"type", "reason"}}}`.
//!
//! | item | outcome |
//! |---|---|
//! | 2xx, `result` "created" | written |
//! | 2xx, `result` "updated" or "noop" (`op = "index"` over an existing id) | duplicate |
//! | 409 on `create` (the id exists) | duplicate |
//! | 429, or an `es_rejected_execution_exception` / `rejected_execution_exception` (a full write queue) | throttled: sent again |
//! | 5xx (`unavailable_shards_exception`, …) | failed: retried with backoff, dead-lettered after `retry.max_attempts` |
//! | 401, 403, 404 (`security_exception`, `index_not_found_exception`) | the write is fatal: a missing index or right is not the records' fault |
//! | other 4xx (`mapper_parsing_exception`, `document_parsing_exception`, …) | rejected: dead-lettered with the type and reason |
//!
//! `"errors": false` means every item was taken.

use serde::Deserialize;
use serde_json::Value;

use super::settings::BulkOp;
use crate::sink::ItemOutcome;

#[derive(Deserialize)]
struct Answer {
    errors: bool,
    #[serde(default)]
    items: Option<Vec<std::collections::BTreeMap<String, Item>>>,
}

#[derive(Deserialize)]
struct Item {
    status: u16,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    error: Option<Value>,
}

/// The outcome of each of `sent` items, or why the whole write must stop.
pub fn read(body: &[u8], op: BulkOp, sent: usize) -> Result<Vec<ItemOutcome>, String> {
    let answer: Answer = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the _bulk answer cannot be read ({e}): is sink.url an Elasticsearch or OpenSearch cluster?"
        )
    })?;
    let Some(items) = answer.items else {
        if answer.errors {
            return Err("the _bulk answer reports errors but lists no items".into());
        }
        return Ok(vec![ItemOutcome::Written; sent]);
    };
    if items.len() != sent {
        return Err(format!(
            "the _bulk answer lists {} items for {sent} actions",
            items.len()
        ));
    }
    items
        .into_iter()
        .map(|item| {
            let item = item
                .into_values()
                .next()
                .ok_or("a _bulk answer item names no action")?;
            outcome(item, op)
        })
        .collect()
}

fn outcome(item: Item, op: BulkOp) -> Result<ItemOutcome, String> {
    let kind = item
        .error
        .as_ref()
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let why = || describe(item.status, item.error.as_ref());
    Ok(match item.status {
        200..=299 => match item.result.as_deref() {
            Some("updated" | "noop") => ItemOutcome::Duplicate,
            _ => ItemOutcome::Written,
        },
        _ if kind.ends_with("rejected_execution_exception") => ItemOutcome::Throttled(why()),
        409 if op == BulkOp::Create => ItemOutcome::Duplicate,
        429 => ItemOutcome::Throttled(why()),
        401 | 403 | 404 => return Err(why()),
        400..=499 => ItemOutcome::Rejected(why()),
        _ => ItemOutcome::Failed(why()),
    })
}

/// "HTTP 400 mapper_parsing_exception: failed to parse field [n] …", with the cause when
/// the reason alone does not say which value.
fn describe(status: u16, error: Option<&Value>) -> String {
    let mut text = format!("HTTP {status}");
    match error {
        Some(Value::String(s)) => {
            text.push(' ');
            text.push_str(s);
        }
        Some(e) => {
            let field =
                |e: &Value, name: &str| e.get(name).and_then(Value::as_str).map(String::from);
            if let Some(kind) = field(e, "type") {
                text.push(' ');
                text.push_str(&kind);
            }
            if let Some(reason) = field(e, "reason") {
                text.push_str(": ");
                text.push_str(&reason);
            }
            if let Some(cause) = e.get("caused_by") {
                let kind = field(cause, "type").unwrap_or_default();
                let reason = field(cause, "reason").unwrap_or_default();
                text.push_str(&format!(" (caused by {kind}: {reason})"));
            }
        }
        None => {}
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shapes from the Elasticsearch bulk API reference ("Example with failed actions")
    /// and OpenSearch's, with the item errors these clusters give for a full write queue,
    /// a mapping error and an existing id.
    const MIXED: &str = r#"{
      "took": 486,
      "errors": true,
      "items": [
        {"create": {"_index": "orders", "_id": "1", "_version": 1, "result": "created",
          "_shards": {"total": 2, "successful": 1, "failed": 0}, "_seq_no": 0, "_primary_term": 1,
          "status": 201}},
        {"create": {"_index": "orders", "_id": "2", "status": 409,
          "error": {"type": "version_conflict_engine_exception",
            "reason": "[2]: version conflict, document already exists (current version [1])",
            "index_uuid": "aAsFqTI0Tc2W0LCWgPNrOA", "shard": "0", "index": "orders"}}},
        {"create": {"_index": "orders", "_id": "3", "status": 429,
          "error": {"type": "es_rejected_execution_exception",
            "reason": "rejected execution of org.elasticsearch.transport.TransportService$7@85be457 on EsThreadPoolExecutor[name = node-1/write, queue capacity = 200, org.elasticsearch.common.util.concurrent.EsThreadPoolExecutor@538c9d8a[Running, pool size = 16, active threads = 16, queued tasks = 200, completed tasks = 685]]"}}},
        {"create": {"_index": "orders", "_id": "4", "status": 400,
          "error": {"type": "mapper_parsing_exception",
            "reason": "failed to parse field [total] of type [long] in document with id '4'. Preview of field's value: 'abc'",
            "caused_by": {"type": "illegal_argument_exception", "reason": "For input string: \"abc\""}}}},
        {"create": {"_index": "orders", "_id": "5", "status": 503,
          "error": {"type": "unavailable_shards_exception",
            "reason": "[orders][0] primary shard is not active Timeout: [1m]"}}},
        {"index": {"_index": "orders", "_id": "6", "_version": 2, "result": "updated", "status": 200}}
      ]
    }"#;

    #[test]
    fn mixed_items_each_get_their_outcome() {
        let items = read(MIXED.as_bytes(), BulkOp::Create, 6).unwrap();
        assert_eq!(items[0], ItemOutcome::Written);
        assert_eq!(items[1], ItemOutcome::Duplicate);
        assert!(
            matches!(&items[2], ItemOutcome::Throttled(r) if r.starts_with("HTTP 429 es_rejected_execution_exception: rejected execution")),
            "{:?}",
            items[2]
        );
        assert_eq!(
            items[3],
            ItemOutcome::Rejected(
                "HTTP 400 mapper_parsing_exception: failed to parse field [total] of type [long] in document with id '4'. Preview of field's value: 'abc' (caused by illegal_argument_exception: For input string: \"abc\")".into()
            )
        );
        assert!(
            matches!(&items[4], ItemOutcome::Failed(r) if r.contains("unavailable_shards_exception"))
        );
        assert_eq!(
            items[5],
            ItemOutcome::Duplicate,
            "index over an existing id"
        );
    }

    #[test]
    fn a_conflict_is_a_duplicate_only_for_create() {
        let items = read(MIXED.as_bytes(), BulkOp::Index, 6).unwrap();
        assert!(matches!(&items[1], ItemOutcome::Rejected(r) if r.contains("version_conflict")));
    }

    #[test]
    fn opensearch_names_the_rejection_without_the_es_prefix() {
        let body = r#"{"took":3,"errors":true,"items":[
          {"index":{"_index":"movies","_id":"tt1979320","status":429,"error":{"type":"rejected_execution_exception","reason":"rejected execution of coordinating operation [coordinating_and_primary_bytes=0, replica_bytes=0, all_bytes=0, coordinating_operation_bytes=1048 max_coordinating_and_primary_bytes=536870912]"}}},
          {"index":{"_index":"movies","_id":"tt1392214","_version":1,"result":"created","forced_refresh":false,"_shards":{"total":2,"successful":1,"failed":0},"_seq_no":1,"_primary_term":1,"status":201}}
        ]}"#;
        let items = read(body.as_bytes(), BulkOp::Index, 2).unwrap();
        assert!(matches!(&items[0], ItemOutcome::Throttled(_)));
        assert_eq!(items[1], ItemOutcome::Written);
    }

    #[test]
    fn no_errors_is_the_fast_path() {
        let body = r#"{"took":30,"errors":false,"items":[
          {"create":{"_index":"test","_id":"3","_version":1,"result":"created","_shards":{"total":2,"successful":1,"failed":0},"status":201,"_seq_no":1,"_primary_term":2}},
          {"index":{"_index":"test","_id":"1","_version":1,"result":"created","_shards":{"total":2,"successful":1,"failed":0},"status":201,"_seq_no":0,"_primary_term":1}}
        ]}"#;
        assert_eq!(
            read(body.as_bytes(), BulkOp::Create, 2).unwrap(),
            [ItemOutcome::Written, ItemOutcome::Written]
        );
        // filter_path=errors leaves no items: nothing failed.
        assert_eq!(
            read(br#"{"errors":false}"#, BulkOp::Create, 3).unwrap(),
            [
                ItemOutcome::Written,
                ItemOutcome::Written,
                ItemOutcome::Written
            ]
        );
    }

    #[test]
    fn answers_that_cannot_be_attributed_stop_the_write() {
        assert!(
            read(b"<html>OK</html>", BulkOp::Create, 1)
                .unwrap_err()
                .contains("cannot be read")
        );
        assert!(
            read(br#"{"errors":true}"#, BulkOp::Create, 1)
                .unwrap_err()
                .contains("no items")
        );
        assert!(
            read(MIXED.as_bytes(), BulkOp::Create, 7)
                .unwrap_err()
                .contains("6 items for 7")
        );
        let missing_index = r#"{"errors":true,"items":[{"create":{"_index":"nope","_id":"1","status":404,
          "error":{"type":"index_not_found_exception","reason":"no such index [nope]","index":"nope"}}}]}"#;
        assert!(
            read(missing_index.as_bytes(), BulkOp::Create, 1)
                .unwrap_err()
                .contains("index_not_found_exception")
        );
    }
}
