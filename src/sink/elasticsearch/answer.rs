//! Reading a `_bulk` answer (HTTP 2xx) item by item. The items come in the order of the
//! actions; each is `{"<action>": {"_index", "_id", "status", "result", "error": {"type",
//! "reason"}}}`. Each item must name the document its action sent — its `_id`, and no other
//! index of the request — or the answer is misplaced (a proxy or an imitation server that
//! reorders items) and nothing of it is believed.
//!
//! | item | outcome |
//! |---|---|
//! | 2xx, `result` "created" | written |
//! | 2xx, `result` "updated" or "noop" (`op = "index"` over an existing id) | duplicate |
//! | 409 on `create` (the id exists) | duplicate |
//! | 429, or an `es_rejected_execution_exception` / `rejected_execution_exception` (a full write queue) | throttled: sent again |
//! | 404 `index_not_found_exception`, with `{/pointer}` in the index | rejected: this record's index does not exist (and is not created), the others land |
//! | 404 with a fixed index | the write is fatal: no record can ever land |
//! | other 4xx (`mapper_parsing_exception`, `document_parsing_exception`, 409 on `index`, 413, …) | rejected: dead-lettered with the type and reason |
//! | 401, 403 (`security_exception`, `cluster_block_exception`) | the write is fatal: a missing right or a read-only index is not the records' fault |
//! | 500 | failed: retried, dead-lettered after `retry.max_attempts` only if other records were taken meanwhile |
//! | 502, 503, 504, … (`unavailable_shards_exception`) | unavailable: the record's shard is down, retried without limit |
//!
//! As Logstash's Elasticsearch output does: 400 and 404 go to the dead letters, 409 is an
//! existing document, 429 and 5xx are retried; a 500 alone is not retried forever (one
//! document may crash a node's ingest) but blamed only on evidence.
//!
//! `"errors": false` without items means every item was taken.

use serde::Deserialize;
use serde_json::Value;

use super::body::DocumentTarget;
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
    #[serde(default, rename = "_index")]
    index: Option<String>,
    #[serde(default, rename = "_id")]
    id: Option<String>,
    status: u16,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    error: Option<Value>,
}

/// How the request was built, as far as its answer's reading needs.
#[derive(Debug, Clone, Copy)]
pub struct Sent<'a> {
    pub op: BulkOp,
    /// The document of each action, in order.
    pub targets: &'a [DocumentTarget],
    /// The index template names no field: every record goes to the same index.
    pub fixed_index: bool,
}

/// Why an answer cannot be used.
#[derive(Debug, PartialEq)]
pub enum Unusable {
    /// It cannot be matched to the documents sent: believe none of it.
    Misplaced(String),
    /// It says no record can be written (a missing right, a missing fixed index).
    Fatal(String),
}

/// The outcome of each document sent.
pub fn read(body: &[u8], sent: Sent<'_>) -> Result<Vec<ItemOutcome>, Unusable> {
    let misplaced = |why: String| Unusable::Misplaced(why);
    let answer: Answer = serde_json::from_slice(body).map_err(|e| {
        misplaced(format!(
            "the _bulk answer cannot be read ({e}): is sink.url an Elasticsearch or OpenSearch cluster?"
        ))
    })?;
    let Some(items) = answer.items else {
        if answer.errors {
            return Err(misplaced(
                "the _bulk answer reports errors but lists no items".into(),
            ));
        }
        return Ok(vec![ItemOutcome::Written; sent.targets.len()]);
    };
    if items.len() != sent.targets.len() {
        return Err(misplaced(format!(
            "the _bulk answer lists {} items for {} actions",
            items.len(),
            sent.targets.len()
        )));
    }
    items
        .into_iter()
        .zip(sent.targets)
        .enumerate()
        .map(|(i, (item, target))| {
            let item = item
                .into_values()
                .next()
                .ok_or_else(|| misplaced("a _bulk answer item names no action".into()))?;
            check_place(&item, i, target, sent.targets).map_err(misplaced)?;
            outcome(item, sent)
        })
        .collect()
}

/// Item `i` must name the `_id` its action sent, and not another index of the request. (An
/// index it names that the request did not is the alias's or data stream's backing index.)
fn check_place(
    item: &Item,
    i: usize,
    target: &DocumentTarget,
    all: &[DocumentTarget],
) -> Result<(), String> {
    let Some(id) = &item.id else {
        return Err(format!(
            "_bulk answer item {i} has no _id: it cannot be matched to the document sent"
        ));
    };
    if *id != target.id {
        return Err(format!(
            "_bulk answer item {i} is about _id {id:?}, but action {i} sent {:?}: the items are not in the order of the actions",
            target.id
        ));
    }
    if let Some(index) = &item.index
        && *index != target.index
        && all.iter().any(|t| t.index == *index)
    {
        return Err(format!(
            "_bulk answer item {i} is about index {index:?}, but action {i} wrote to {:?}",
            target.index
        ));
    }
    Ok(())
}

fn outcome(item: Item, sent: Sent<'_>) -> Result<ItemOutcome, Unusable> {
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
        409 if sent.op == BulkOp::Create => ItemOutcome::Duplicate,
        429 => ItemOutcome::Throttled(why()),
        401 | 403 => return Err(Unusable::Fatal(why())),
        404 if sent.fixed_index => {
            return Err(Unusable::Fatal(format!(
                "{} (sink.elasticsearch.index names no field: every record goes there)",
                why()
            )));
        }
        400..=499 => ItemOutcome::Rejected(why()),
        500 => ItemOutcome::Failed(why()),
        501..=599 => ItemOutcome::Unavailable(why()),
        status => {
            return Err(Unusable::Misplaced(format!(
                "a _bulk answer item has status {status}, not a document's answer"
            )));
        }
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

    fn targets(index: &str, ids: &[&str]) -> Vec<DocumentTarget> {
        ids.iter()
            .map(|id| DocumentTarget {
                index: index.into(),
                id: (*id).into(),
            })
            .collect()
    }

    fn sent(op: BulkOp, targets: &[DocumentTarget]) -> Sent<'_> {
        Sent {
            op,
            targets,
            fixed_index: false,
        }
    }

    fn six() -> Vec<DocumentTarget> {
        targets("orders", &["1", "2", "3", "4", "5", "6"])
    }

    fn misplaced(result: Result<Vec<ItemOutcome>, Unusable>) -> String {
        match result {
            Err(Unusable::Misplaced(why)) => why,
            other => panic!("not misplaced: {other:?}"),
        }
    }

    #[test]
    fn mixed_items_each_get_their_outcome() {
        let items = read(MIXED.as_bytes(), sent(BulkOp::Create, &six())).unwrap();
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
            matches!(&items[4], ItemOutcome::Unavailable(r) if r.contains("unavailable_shards_exception")),
            "a shard that is down is waited for: {:?}",
            items[4]
        );
        assert_eq!(
            items[5],
            ItemOutcome::Duplicate,
            "index over an existing id"
        );
    }

    #[test]
    fn a_conflict_is_a_duplicate_only_for_create() {
        let items = read(MIXED.as_bytes(), sent(BulkOp::Index, &six())).unwrap();
        assert!(matches!(&items[1], ItemOutcome::Rejected(r) if r.contains("version_conflict")));
    }

    #[test]
    fn opensearch_names_the_rejection_without_the_es_prefix() {
        let body = r#"{"took":3,"errors":true,"items":[
          {"index":{"_index":"movies","_id":"tt1979320","status":429,"error":{"type":"rejected_execution_exception","reason":"rejected execution of coordinating operation [coordinating_and_primary_bytes=0, replica_bytes=0, all_bytes=0, coordinating_operation_bytes=1048 max_coordinating_and_primary_bytes=536870912]"}}},
          {"index":{"_index":"movies","_id":"tt1392214","_version":1,"result":"created","forced_refresh":false,"_shards":{"total":2,"successful":1,"failed":0},"_seq_no":1,"_primary_term":1,"status":201}}
        ]}"#;
        let t = targets("movies", &["tt1979320", "tt1392214"]);
        let items = read(body.as_bytes(), sent(BulkOp::Index, &t)).unwrap();
        assert!(matches!(&items[0], ItemOutcome::Throttled(_)));
        assert_eq!(items[1], ItemOutcome::Written);
    }

    #[test]
    fn no_errors_is_the_fast_path() {
        let body = r#"{"took":30,"errors":false,"items":[
          {"create":{"_index":"test","_id":"3","_version":1,"result":"created","_shards":{"total":2,"successful":1,"failed":0},"status":201,"_seq_no":1,"_primary_term":2}},
          {"index":{"_index":"test","_id":"1","_version":1,"result":"created","_shards":{"total":2,"successful":1,"failed":0},"status":201,"_seq_no":0,"_primary_term":1}}
        ]}"#;
        let t = targets("test", &["3", "1"]);
        assert_eq!(
            read(body.as_bytes(), sent(BulkOp::Create, &t)).unwrap(),
            [ItemOutcome::Written, ItemOutcome::Written]
        );
        // filter_path=errors leaves no items: nothing failed.
        let t = targets("test", &["a", "b", "c"]);
        assert_eq!(
            read(br#"{"errors":false}"#, sent(BulkOp::Create, &t)).unwrap(),
            [
                ItemOutcome::Written,
                ItemOutcome::Written,
                ItemOutcome::Written
            ]
        );
    }

    /// A proxy or an imitation server that answers the items in another order would have
    /// each outcome settle another document: the answer is believed for none.
    #[test]
    fn items_out_of_the_order_of_the_actions_are_misplaced() {
        let mut swapped = six();
        swapped.swap(2, 3);
        let why = misplaced(read(MIXED.as_bytes(), sent(BulkOp::Create, &swapped)));
        assert!(
            why.contains("item 2 is about _id \"3\", but action 2 sent \"4\""),
            "{why}"
        );
        let no_id = r#"{"errors":true,"items":[{"create":{"_index":"orders","status":429}}]}"#;
        let t = targets("orders", &["1"]);
        assert!(misplaced(read(no_id.as_bytes(), sent(BulkOp::Create, &t))).contains("no _id"));
    }

    /// Daily indexes: the same id in two indexes is two documents. An index the request did
    /// not name is the backing index of an alias or a data stream, as Elasticsearch answers.
    #[test]
    fn an_item_naming_another_index_of_the_request_is_misplaced() {
        let t = vec![
            DocumentTarget {
                index: "orders-2026.01.01".into(),
                id: "7".into(),
            },
            DocumentTarget {
                index: "orders-2026.01.02".into(),
                id: "7".into(),
            },
        ];
        let answer = |a: &str, b: &str| {
            format!(
                r#"{{"errors":false,"items":[{{"create":{{"_index":"{a}","_id":"7","status":201}}}},{{"create":{{"_index":"{b}","_id":"7","status":201}}}}]}}"#
            )
        };
        let body = answer("orders-2026.01.02", "orders-2026.01.01");
        assert!(misplaced(read(body.as_bytes(), sent(BulkOp::Create, &t))).contains("index"));
        let body = answer(".ds-orders-2026.01.01-000001", "orders-000002");
        assert_eq!(
            read(body.as_bytes(), sent(BulkOp::Create, &t)).unwrap(),
            [ItemOutcome::Written, ItemOutcome::Written]
        );
    }

    #[test]
    fn answers_that_cannot_be_attributed_are_misplaced() {
        let t = targets("orders", &["1"]);
        assert!(
            misplaced(read(b"<html>OK</html>", sent(BulkOp::Create, &t)))
                .contains("cannot be read")
        );
        assert!(
            misplaced(read(br#"{"errors":true}"#, sent(BulkOp::Create, &t))).contains("no items")
        );
        let mut seven = six();
        seven.push(DocumentTarget {
            index: "orders".into(),
            id: "7".into(),
        });
        assert!(
            misplaced(read(MIXED.as_bytes(), sent(BulkOp::Create, &seven)))
                .contains("6 items for 7")
        );
    }

    /// With `{/day}` in the index, a record whose day has no index is that record's
    /// problem; with a fixed index, every record would meet the same 404.
    #[test]
    fn a_missing_index_is_the_records_fault_unless_every_record_goes_there() {
        let missing = r#"{"errors":true,"items":[
          {"create":{"_index":"orders-2026.01.01","_id":"1","status":201,"result":"created"}},
          {"create":{"_index":"orders-1999.13.40","_id":"2","status":404,
            "error":{"type":"index_not_found_exception","reason":"no such index [orders-1999.13.40]","index":"orders-1999.13.40"}}}]}"#;
        let t = vec![
            DocumentTarget {
                index: "orders-2026.01.01".into(),
                id: "1".into(),
            },
            DocumentTarget {
                index: "orders-1999.13.40".into(),
                id: "2".into(),
            },
        ];
        let items = read(missing.as_bytes(), sent(BulkOp::Create, &t)).unwrap();
        assert_eq!(items[0], ItemOutcome::Written);
        assert_eq!(
            items[1],
            ItemOutcome::Rejected(
                "HTTP 404 index_not_found_exception: no such index [orders-1999.13.40]".into()
            )
        );
        let fixed = Sent {
            fixed_index: true,
            ..sent(BulkOp::Create, &t)
        };
        assert!(matches!(
            read(missing.as_bytes(), fixed),
            Err(Unusable::Fatal(why)) if why.contains("names no field")
        ));
        let forbidden = r#"{"errors":true,"items":[{"create":{"_index":"orders","_id":"1","status":403,
          "error":{"type":"cluster_block_exception","reason":"index [orders] blocked by: [FORBIDDEN/8/index write (api)];"}}}]}"#;
        let t = targets("orders", &["1"]);
        assert!(matches!(
            read(forbidden.as_bytes(), sent(BulkOp::Create, &t)),
            Err(Unusable::Fatal(why)) if why.contains("cluster_block_exception")
        ));
    }

    #[test]
    fn a_500_for_an_item_is_judged_on_evidence_other_5xx_are_waited_for() {
        let body = r#"{"errors":true,"items":[
          {"index":{"_index":"o","_id":"1","status":500,"error":{"type":"null_pointer_exception","reason":"boom"}}},
          {"index":{"_index":"o","_id":"2","status":502,"error":"bad gateway"}},
          {"index":{"_index":"o","_id":"3","status":504,"error":"timeout"}}]}"#;
        let t = targets("o", &["1", "2", "3"]);
        let items = read(body.as_bytes(), sent(BulkOp::Index, &t)).unwrap();
        assert_eq!(
            items,
            [
                ItemOutcome::Failed("HTTP 500 null_pointer_exception: boom".into()),
                ItemOutcome::Unavailable("HTTP 502 bad gateway".into()),
                ItemOutcome::Unavailable("HTTP 504 timeout".into()),
            ]
        );
    }
}
