//! `sim-sink --bulk`: the emulator answering as Elasticsearch/OpenSearch `_bulk` does.
//! The capacity bucket is the write queue: each document takes a slot; the documents of a
//! request beyond the free slots get 429 `es_rejected_execution_exception` inside the 200
//! answer, as a cluster whose write thread pool queue is full answers; documents carrying
//! `reject_field` get 400 `mapper_parsing_exception` and take no slot; a `create` whose id
//! is stored gets 409, an `index` over one is `updated`; `refuse_share` of the documents
//! get the same 429 at random, whatever the room (a busy node among idle ones).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::documents::Stored;
use super::overload::Answer;
use super::server::SinkState;
use crate::lock::lock;

/// One action of the request: its name, index, id and source.
struct Action {
    op: String,
    index: String,
    id: String,
    source: Value,
}

pub async fn bulk(State(s): State<Arc<SinkState>>, body: Bytes) -> Response {
    let Some(in_progress) = s.begin().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "outage").into_response();
    };
    let now = s.now();
    let actions = match parse(&body) {
        Ok(actions) => actions,
        Err(reason) => {
            s.ledger().malformed();
            let kind = if reason.starts_with("Validation Failed") {
                "action_request_validation_exception"
            } else {
                "illegal_argument_exception"
            };
            let error = json!({"error": {"type": kind, "reason": reason}, "status": 400});
            return (StatusCode::BAD_REQUEST, Json(error)).into_response();
        }
    };
    s.ledger()
        .received(now, actions.len() as u64, body.len() as u64);
    let mapped: Vec<bool> = actions
        .iter()
        .map(|a| {
            s.reject_field()
                .is_none_or(|field| a.source.get(field).is_none())
        })
        .collect();
    let unlucky: Vec<bool> = mapped.iter().map(|m| *m && s.refused_at_random()).collect();
    let wanted = mapped.iter().filter(|m| **m).count() - unlucky.iter().filter(|u| **u).count();
    let mut free = lock(s.capacity()).take_up_to(wanted as u64, now);
    let mut items = Vec::with_capacity(actions.len());
    let (mut refused, mut unmapped) = (0, 0);
    for ((action, mapped), unlucky) in actions.iter().zip(mapped).zip(unlucky) {
        let status = if !mapped {
            unmapped += 1;
            let reason = format!(
                "failed to parse field [{}] of type [long] in document with id '{}'",
                s.reject_field().unwrap_or_default(),
                action.id
            );
            item(
                action,
                400,
                json!({"type": "mapper_parsing_exception", "reason": reason}),
            )
        } else if free == 0 || unlucky {
            refused += 1;
            let reason = "rejected execution of coordinating operation on EsThreadPoolExecutor[name = sim/write, queue capacity = full]";
            item(
                action,
                429,
                json!({"type": "es_rejected_execution_exception", "reason": reason}),
            )
        } else {
            free -= 1;
            let (inserted, _) = s.ledger().accept(now, 0, [action.id.as_str()]);
            if let Some(documents) = s.documents() {
                let doc = Stored {
                    key: action.id.clone(),
                    index: Some(action.index.clone()),
                    source: None,
                    record: action.source.clone(),
                };
                match (inserted, action.op.as_str()) {
                    (1, _) => documents.keep_first(doc),
                    (_, "index") => documents.replace(doc),
                    _ => {}
                }
            }
            match (inserted, action.op.as_str()) {
                (1, _) => stored(action, 201, "created"),
                (_, "create") => item(
                    action,
                    409,
                    json!({"type": "version_conflict_engine_exception",
                        "reason": format!("[{}]: version conflict, document already exists", action.id)}),
                ),
                _ => stored(action, 200, "updated"),
            }
        };
        items.push(status);
    }
    if refused > 0 {
        s.ledger().throttled(now, refused);
    }
    s.ledger().unmapped(unmapped);
    // The concurrency limit (--defer-above, --drop-above) is /ingest's; here only the
    // answer's time is modelled.
    if let Answer::Take(delay) | Answer::Defer(delay) = s.overload_answer(in_progress.concurrency) {
        tokio::time::sleep(delay).await;
    }
    Json(json!({"took": 1, "errors": refused + unmapped > 0 || items.iter().any(|i| i.get("error").is_some()), "items": items}))
        .into_response()
}

fn item(action: &Action, status: u16, error: Value) -> Value {
    json!({ action.op.as_str(): {"_index": action.index, "_id": action.id, "status": status, "error": error} })
}

fn stored(action: &Action, status: u16, result: &str) -> Value {
    json!({ action.op.as_str(): {"_index": action.index, "_id": action.id, "_version": 1,
        "result": result, "_shards": {"total": 1, "successful": 1, "failed": 0}, "status": status} })
}

/// Action lines and their sources; only `create` and `index` (what sluice sends).
fn parse(body: &[u8]) -> Result<Vec<Action>, String> {
    let mut lines = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace));
    let mut actions = Vec::new();
    while let Some(line) = lines.next() {
        let meta: Value =
            serde_json::from_slice(line).map_err(|e| format!("unreadable action line: {e}"))?;
        let Some((op, target)) = meta.as_object().and_then(|o| o.iter().next()) else {
            return Err("an action line must be an object naming one action".into());
        };
        if op != "create" && op != "index" {
            return Err(format!("action [{op}] is not emulated"));
        }
        let field = |name: &str| target.get(name).and_then(Value::as_str).map(String::from);
        let id = field("_id").ok_or("an action without _id")?;
        if id.len() > 512 {
            return Err(format!(
                "Validation Failed: 1: id [{id}] is too long, must be no longer than 512 bytes but was: {};",
                id.len()
            ));
        }
        let index = field("_index").ok_or("an action without _index")?;
        let source = lines
            .next()
            .ok_or_else(|| format!("the action for [{id}] has no source line"))?;
        let source = serde_json::from_slice(source)
            .map_err(|e| format!("unreadable source of [{id}]: {e}"))?;
        actions.push(Action {
            op: op.clone(),
            index,
            id,
            source,
        });
    }
    Ok(actions)
}
