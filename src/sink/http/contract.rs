//! `[sink.response]`: how an ingest API that answers record by record says which records
//! it took. Many answer a batch with 200 and a per-record verdict inside — Kinesis
//! PutRecords' `Records[i].ErrorCode`, DynamoDB BatchWriteItem's `UnprocessedItems`, Cosmos
//! DB's bulk results — so a 2xx alone does not mean "written".
//!
//! ```toml
//! [sink.response]
//! results = "/Records"                 # the per-record results array
//! status = "/ErrorCode"                # in a result: its code (number or string)
//! message = "/ErrorMessage"            # in a result: text for the dead letter
//! throttled = ["ProvisionedThroughputExceededException"]
//! retry = ["InternalFailure"]
//! ```
//!
//! Without `id`, `results` holds one result per record, in the batch's order. With `id`
//! (a pointer to the record's key inside a result), it lists only some records —
//! DynamoDB's unprocessed items — and every record not listed was taken.
//!
//! A result's code is looked up in `written`, `duplicate`, `throttled`, `retry` and
//! `permanent`; a result without a code is `absent` (default "written": Kinesis marks only
//! failures). A numeric code not listed is read as HTTP status: 2xx written, 409
//! duplicate, 429 throttled, other 4xx permanent, 5xx retry. Any other code not listed
//! is `retry`: retried, then dead-lettered after `retry.max_attempts` — never counted as
//! written.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::Row;
use crate::settings::ConfigError;
use crate::sink::ItemOutcome;

/// How a 2xx answer says which records were taken, for a sink that takes part of a batch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResponseContract {
    /// JSON pointer to the results array in the answer.
    pub results: String,
    /// JSON pointer, inside a result, to the key of the record it is about.
    pub id: Option<String>,
    /// JSON pointer, inside a result, to its code.
    pub status: Option<String>,
    /// JSON pointer, inside a result, to a message for the dead letter.
    pub message: Option<String>,
    /// The outcome of a result that has no code.
    #[serde(default = "written")]
    pub absent: ResultVerdict,
    /// Codes that mean the record was written.
    #[serde(default)]
    pub written: Vec<Code>,
    /// Codes that mean the record was already there.
    #[serde(default)]
    pub duplicate: Vec<Code>,
    /// Codes that mean "slow down".
    #[serde(default)]
    pub throttled: Vec<Code>,
    /// Codes retried, then dead-lettered after `retry.max_attempts`.
    #[serde(default)]
    pub retry: Vec<Code>,
    /// Codes dead-lettered at once.
    #[serde(default)]
    pub permanent: Vec<Code>,
}

fn written() -> ResultVerdict {
    ResultVerdict::Written
}

/// A code as configured: `"ThrottlingException"` or `429`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(untagged)]
pub enum Code {
    Number(u64),
    Text(String),
}

impl Code {
    fn text(&self) -> String {
        match self {
            Code::Number(n) => n.to_string(),
            Code::Text(t) => t.clone(),
        }
    }
}

/// What a result means for its record.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Verdict")]
pub enum ResultVerdict {
    Written,
    Duplicate,
    Throttled,
    Retry,
    Permanent,
}

impl ResponseContract {
    /// The outcome of each row, or why the answer cannot be attributed to them (the write
    /// is then fatal: nothing of it is acknowledged).
    pub fn read(&self, body: &[u8], rows: &[Row]) -> Result<Vec<ItemOutcome>, String> {
        let answer: Value = serde_json::from_slice(body)
            .map_err(|e| format!("the answer is not JSON ({e}); [sink.response] expects it"))?;
        let results = match answer.pointer(&self.results) {
            Some(Value::Array(results)) => results.as_slice(),
            // An unprocessed list that is absent or empty lists nothing.
            None | Some(Value::Null) if self.id.is_some() => &[],
            Some(Value::Object(o)) if self.id.is_some() && o.is_empty() => &[],
            Some(other) => {
                return Err(format!(
                    "the answer's {} is {}, not an array of results",
                    self.results,
                    kind_of(other)
                ));
            }
            None => {
                return Err(format!(
                    "the answer has no {} (sink.response.results)",
                    self.results
                ));
            }
        };
        let Some(id) = &self.id else {
            if results.len() != rows.len() {
                return Err(format!(
                    "the answer lists {} results for {} records",
                    results.len(),
                    rows.len()
                ));
            }
            return Ok(results.iter().map(|r| self.outcome(r)).collect());
        };
        let mut listed: HashMap<String, &Value> = HashMap::with_capacity(results.len());
        for result in results {
            let key = match result.pointer(id) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => return Err(format!("a result has no record key at {id}: {result}")),
            };
            listed.insert(key, result);
        }
        let outcomes: Vec<ItemOutcome> = rows
            .iter()
            .map(|row| match listed.remove(&row.key) {
                Some(result) => self.outcome(result),
                None => ItemOutcome::Written,
            })
            .collect();
        if let Some(stranger) = listed.keys().next() {
            return Err(format!(
                "the answer lists the key {stranger:?}, which the request did not carry"
            ));
        }
        Ok(outcomes)
    }

    fn outcome(&self, result: &Value) -> ItemOutcome {
        let code = self.status.as_ref().and_then(|p| match result.pointer(p) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        });
        let message = self
            .message
            .as_ref()
            .and_then(|p| result.pointer(p))
            .map(|m| match m {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        let verdict = match &code {
            None => self.absent,
            Some(code) => self.verdict(code),
        };
        let why = || match (&code, &message) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => c.clone(),
            (None, Some(m)) => m.clone(),
            (None, None) => "listed as not processed".into(),
        };
        match verdict {
            ResultVerdict::Written => ItemOutcome::Written,
            ResultVerdict::Duplicate => ItemOutcome::Duplicate,
            ResultVerdict::Throttled => ItemOutcome::Throttled(why()),
            ResultVerdict::Retry => ItemOutcome::Failed(why()),
            ResultVerdict::Permanent => ItemOutcome::Rejected(why()),
        }
    }

    fn verdict(&self, code: &str) -> ResultVerdict {
        let lists = [
            (&self.written, ResultVerdict::Written),
            (&self.duplicate, ResultVerdict::Duplicate),
            (&self.throttled, ResultVerdict::Throttled),
            (&self.retry, ResultVerdict::Retry),
            (&self.permanent, ResultVerdict::Permanent),
        ];
        for (codes, verdict) in lists {
            if codes.iter().any(|c| c.text() == code) {
                return verdict;
            }
        }
        match code.parse::<u16>() {
            Ok(200..=299) => ResultVerdict::Written,
            Ok(409) => ResultVerdict::Duplicate,
            Ok(429) => ResultVerdict::Throttled,
            Ok(400..=499) => ResultVerdict::Permanent,
            _ => ResultVerdict::Retry,
        }
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks `[sink.response]`: pointers that are pointers, and no code in two lists.
pub fn validate(contract: Option<&ResponseContract>) -> Result<(), ConfigError> {
    let Some(c) = contract else {
        return Ok(());
    };
    let pointers = [
        ("sink.response.results", Some(&c.results)),
        ("sink.response.id", c.id.as_ref()),
        ("sink.response.status", c.status.as_ref()),
        ("sink.response.message", c.message.as_ref()),
    ];
    for (key, pointer) in pointers {
        if let Some(p) = pointer
            && !(p.is_empty() && key == "sink.response.results" || p.starts_with('/'))
        {
            return Err(ConfigError::invalid(
                key,
                format!("{p:?} is not a JSON pointer (it must start with '/', e.g. \"/Records\")"),
            ));
        }
    }
    if c.status.is_none() && c.id.is_none() {
        return Err(ConfigError::invalid(
            "sink.response.status",
            "set status (each result's code) or id (results list some records by key): with neither, results say nothing",
        ));
    }
    let lists = [
        ("sink.response.written", &c.written),
        ("sink.response.duplicate", &c.duplicate),
        ("sink.response.throttled", &c.throttled),
        ("sink.response.retry", &c.retry),
        ("sink.response.permanent", &c.permanent),
    ];
    let mut seen: HashMap<String, &str> = HashMap::new();
    for (key, codes) in lists {
        for code in codes {
            if let Some(other) = seen.insert(code.text(), key) {
                return Err(ConfigError::invalid(
                    key,
                    format!("{:?} is also in {other}", code.text()),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(keys: &[&str]) -> Vec<Row> {
        keys.iter()
            .map(|k| Row {
                key: k.to_string(),
                payload: "{}".into(),
                ..Default::default()
            })
            .collect()
    }

    fn contract(toml_text: &str) -> ResponseContract {
        use figment::providers::Format;
        figment::Figment::from(figment::providers::Toml::string(toml_text))
            .extract()
            .unwrap()
    }

    /// Kinesis PutRecords: one result per record, failures carry ErrorCode/ErrorMessage.
    #[test]
    fn kinesis_style_per_record_error_codes() {
        let c = contract(
            r#"
            results = "/Records"
            status = "/ErrorCode"
            message = "/ErrorMessage"
            throttled = ["ProvisionedThroughputExceededException", "KMSThrottlingException"]
            retry = ["InternalFailure"]
            permanent = ["ValidationException"]
            "#,
        );
        let answer = r#"{"FailedRecordCount": 3, "Records": [
            {"SequenceNumber": "49543463076548007577105092703039560359975228518395019266", "ShardId": "shardId-000000000000"},
            {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded for shard shardId-000000000001 in stream exampleStreamName under account 111111111111."},
            {"ErrorCode": "InternalFailure", "ErrorMessage": "Internal service failure."},
            {"ErrorCode": "ValidationException", "ErrorMessage": "record too large"},
            {"ErrorCode": "SomethingNew"}
        ], "EncryptionType": "NONE"}"#;
        let out = c
            .read(answer.as_bytes(), &rows(&["a", "b", "c", "d", "e"]))
            .unwrap();
        assert_eq!(out[0], ItemOutcome::Written);
        assert!(
            matches!(&out[1], ItemOutcome::Throttled(r) if r.starts_with("ProvisionedThroughputExceededException: Rate exceeded"))
        );
        assert_eq!(
            out[2],
            ItemOutcome::Failed("InternalFailure: Internal service failure.".into())
        );
        assert_eq!(
            out[3],
            ItemOutcome::Rejected("ValidationException: record too large".into())
        );
        assert_eq!(
            out[4],
            ItemOutcome::Failed("SomethingNew".into()),
            "unknown: retried, never written"
        );
        assert!(
            c.read(answer.as_bytes(), &rows(&["a"]))
                .unwrap_err()
                .contains("5 results for 1")
        );
    }

    /// DynamoDB BatchWriteItem: only the unprocessed requests are listed, by item.
    #[test]
    fn dynamodb_style_unprocessed_items() {
        let c = contract(
            r#"
            results = "/UnprocessedItems/Orders"
            id = "/PutRequest/Item/id/S"
            absent = "throttled"
            "#,
        );
        let answer = r#"{"UnprocessedItems": {"Orders": [
            {"PutRequest": {"Item": {"id": {"S": "b"}, "total": {"N": "9.5"}}}}
        ]}, "ConsumedCapacity": []}"#;
        let out = c.read(answer.as_bytes(), &rows(&["a", "b", "c"])).unwrap();
        assert_eq!(out[0], ItemOutcome::Written);
        assert_eq!(
            out[1],
            ItemOutcome::Throttled("listed as not processed".into())
        );
        assert_eq!(out[2], ItemOutcome::Written);
        // Everything processed: the table's list, or the whole map, is gone.
        for done in [
            r#"{"UnprocessedItems": {}}"#,
            r#"{"UnprocessedItems": {"Orders": []}}"#,
        ] {
            assert_eq!(
                c.read(done.as_bytes(), &rows(&["a", "b"])).unwrap(),
                [ItemOutcome::Written, ItemOutcome::Written]
            );
        }
        let stranger =
            r#"{"UnprocessedItems": {"Orders": [{"PutRequest": {"Item": {"id": {"S": "zz"}}}}]}}"#;
        assert!(
            c.read(stranger.as_bytes(), &rows(&["a"]))
                .unwrap_err()
                .contains("\"zz\"")
        );
    }

    #[test]
    fn http_like_codes_have_defaults() {
        let c = contract("results = \"/items\"\nstatus = \"/status\"\nthrottled = [503]");
        let answer = r#"{"items":[{"status":201},{"status":409},{"status":429},{"status":400},{"status":500},{"status":503},{}]}"#;
        let out = c
            .read(
                answer.as_bytes(),
                &rows(&["1", "2", "3", "4", "5", "6", "7"]),
            )
            .unwrap();
        let labels: Vec<&str> = out.iter().map(ItemOutcome::label).collect();
        assert_eq!(
            labels,
            [
                "written",
                "duplicate",
                "throttled",
                "rejected",
                "failed",
                "throttled",
                "written"
            ]
        );
        assert!(
            c.read(b"not json", &rows(&["1"]))
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(
            c.read(br#"{"x":1}"#, &rows(&["1"]))
                .unwrap_err()
                .contains("no /items")
        );
    }

    #[test]
    fn validation_names_the_key() {
        let sink = |text: &str| Some(contract(text));
        let err = |text: &str| validate(sink(text).as_ref()).unwrap_err().to_string();
        assert!(err("results = \"Records\"\nstatus = \"/s\"").starts_with("sink.response.results"));
        assert!(err("results = \"/r\"").starts_with("sink.response.status"));
        assert!(
            err("results = \"/r\"\nstatus = \"/s\"\nretry = [429]\nthrottled = [\"429\"]")
                .contains("also in")
        );
        assert!(validate(sink("results = \"/r\"\nid = \"/k\"").as_ref()).is_ok());
    }
}
