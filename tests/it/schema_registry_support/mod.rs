//! Helpers for the tests of Kafka values and keys in the Confluent wire format (Avro,
//! Protobuf, JSON Schema through a schema registry): the in-process test registry
//! ([`registry`]), the independent producer (`produce.py`: confluent-kafka's serializers,
//! which register with that registry, and beside the records the JSON sluice must make of
//! each), raw messages for what a serializer would never write, configs, and a field by
//! field comparison of the rows with what was expected.
//!
//! The Python side needs the venv `scripts/services.sh` keeps (it prints
//! `SLUICE_TEST_PYTHON`); without the variable `.venv/bin/python` of the checkout is used.
#![allow(dead_code)]

pub mod registry;

pub use registry::{Auth, Reference, RegistryOptions, TestRegistry};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::kafka_pg_support::{brokers, pg, write_config};

pub fn python() -> PathBuf {
    match std::env::var_os("SLUICE_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"),
    }
}

pub fn produce_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/schema_registry_support/produce.py")
}

/// One run of `produce.py`: records `start .. start + count` of a format, to the topic
/// (or, with [`wire`](Produce::wire), to a file of encoded messages), the expected JSON
/// to `expected`.
#[derive(Debug, Clone)]
pub struct Produce {
    pub registry: String,
    pub topic: String,
    pub format: &'static str,
    pub start: u64,
    pub count: u64,
    pub version: u32,
    pub key_format: &'static str,
    pub partitions: Option<u32>,
    pub proto_schema: &'static str,
    pub credentials: Option<(String, String)>,
    pub register: bool,
    pub wire: Option<PathBuf>,
}

impl Produce {
    pub fn new(registry: &TestRegistry, topic: &str, format: &'static str) -> Produce {
        Produce {
            registry: registry.url(),
            topic: topic.to_string(),
            format,
            start: 1,
            count: 1,
            version: 1,
            key_format: "string",
            partitions: None,
            proto_schema: "text",
            credentials: None,
            register: true,
            wire: None,
        }
    }

    pub fn records(mut self, start: u64, count: u64) -> Self {
        self.start = start;
        self.count = count;
        self
    }

    /// The Avro schema's version: 2 adds `currency` (default "EUR").
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Keys as Avro strings (subject `<topic>-key`) rather than plain UTF-8.
    pub fn avro_keys(mut self) -> Self {
        self.key_format = "avro";
        self
    }

    /// Record i to partition i % n (else the partitioner places it by its key).
    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = Some(n);
        self
    }

    /// Protobuf schemas registered as the serializer sends them: base64 FileDescriptorProto.
    pub fn proto_serialized(mut self) -> Self {
        self.proto_schema = "serialized";
        self
    }

    pub fn credentials(mut self, user: &str, password: &str) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Encoded messages to `path` instead of the topic (see [`read_wire`]).
    pub fn wire(mut self, path: &Path) -> Self {
        self.wire = Some(path.to_path_buf());
        self
    }

    /// Runs the script; the expected JSON of each record goes to `expected` (NDJSON, in
    /// order). Returns how many it delivered (or wrote).
    pub async fn run(&self, expected: &Path) -> u64 {
        let mut cmd = tokio::process::Command::new(python());
        cmd.arg(produce_script())
            .args(["--brokers", &brokers()])
            .args(["--registry", &self.registry])
            .args(["--topic", &self.topic])
            .args(["--format", self.format])
            .args(["--start", &self.start.to_string()])
            .args(["--count", &self.count.to_string()])
            .args(["--version", &self.version.to_string()])
            .args(["--key-format", self.key_format])
            .args(["--proto-schema", self.proto_schema])
            .arg("--expected")
            .arg(expected);
        if let Some(n) = self.partitions {
            cmd.args(["--partitions", &n.to_string()]);
        }
        if let Some((user, password)) = &self.credentials {
            cmd.args(["--registry-user", user, "--registry-password", password]);
        }
        if !self.register {
            cmd.arg("--no-register");
        }
        if let Some(wire) = &self.wire {
            cmd.arg("--wire").arg(wire);
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{} runs (scripts/services.sh installs confluent-kafka in the venv): {e}",
                    python().display()
                )
            });
        assert!(
            out.status.success(),
            "produce.py {self:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout);
        let n: u64 = said.trim().parse().unwrap_or_else(|_| panic!("{said}"));
        assert_eq!(n, self.count, "produce.py delivered {n} of {}", self.count);
        n
    }
}

/// An encoded message as `produce.py --wire` writes it.
#[derive(Debug, Clone)]
pub struct Wire {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub partition: Option<i32>,
}

pub fn read_wire(path: &Path) -> Vec<Wire> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            Wire {
                key: hex::decode(v["key_hex"].as_str().unwrap()).unwrap(),
                value: hex::decode(v["value_hex"].as_str().unwrap()).unwrap(),
                partition: v["partition"].as_i64().map(|p| p as i32),
            }
        })
        .collect()
}

/// A message as sent: (key, partition, value).
pub type RawMessage = (Option<Vec<u8>>, i32, Vec<u8>);

/// Produces raw (key, partition, value) messages in order with a plain producer, no
/// retries (a retry could reorder a partition); every one must be delivered. Blocking:
/// call it from `spawn_blocking`.
pub fn produce_raw(topic: &str, messages: &[RawMessage]) {
    crate::kafka_pg_support::produce_bytes(
        topic,
        messages
            .iter()
            .map(|(key, partition, value)| (key.as_deref(), *partition, Some(value.as_slice()))),
    );
}

/// Sends messages that `produce.py --wire` wrote, each to its partition (or `partition`).
pub async fn send_wire(topic: &str, wire: Vec<Wire>, partition: i32) {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let messages: Vec<_> = wire
            .into_iter()
            .map(|w| (Some(w.key), w.partition.unwrap_or(partition), w.value))
            .collect();
        produce_raw(&topic, &messages);
    })
    .await
    .unwrap();
}

/// A Kafka → PostgreSQL config (as [`write_config`]) whose source reads `value_format`
/// values and `key_format` keys through the registry at `registry_url`; `registry_extra`
/// is added to `[source.schema_registry]` (credentials, rate, timeout).
#[allow(clippy::too_many_arguments)]
pub fn registry_config(
    dir: &Path,
    topic: &str,
    table: &str,
    sink_extra: &str,
    value_format: &str,
    key_format: &str,
    registry_url: &str,
    registry_extra: &str,
    extra: &str,
) -> PathBuf {
    write_config(
        dir,
        topic,
        table,
        sink_extra,
        &format!(
            "{extra}\n\n[source.value]\nformat = \"{value_format}\"\n\n\
             [source.key]\nformat = \"{key_format}\"\n\n\
             [source.schema_registry]\nurl = \"{registry_url}\"\n{registry_extra}\n"
        ),
    )
}

/// The expected JSON of each record, in order, as `produce.py` wrote it (numbers kept as
/// written: serde_json has arbitrary_precision here).
pub fn read_expected(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Every row's payload of `table`, by its `id` (the payload's `/id` as text), as
/// PostgreSQL gives it back (`payload::text`, numbers with every digit).
pub async fn payloads_by_id(table: &str) -> BTreeMap<String, Value> {
    let mut conn = pg().await;
    let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT payload::text FROM {table}"
    )))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut by_id = BTreeMap::new();
    for (text,) in rows {
        let payload: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let id = payload["id"].to_string();
        assert!(
            by_id.insert(id.clone(), payload).is_none(),
            "two rows with id {id} in {table}"
        );
    }
    by_id
}

/// Compares every expected record with the row of its id, field by field; panics with
/// the first differences. Numbers: an expected integer must come back with the same
/// digits, a decimal at a pointer in `decimals` with the same text (every digit of the
/// scale), any other number as the same double (PostgreSQL's jsonb rewrites `1e+16` as
/// `10000000000000000`).
pub fn assert_rows_match(expected: &[Value], rows: &BTreeMap<String, Value>, decimals: &[&str]) {
    let mut differences = Vec::new();
    let mut wrong = 0;
    for want in expected {
        let id = want["id"].to_string();
        let mut here = Vec::new();
        match rows.get(&id) {
            None => here.push(format!("id {id}: no row")),
            Some(got) => diff("", want, got, decimals, &mut here),
        }
        if !here.is_empty() {
            wrong += 1;
            if differences.len() < 30 {
                differences.extend(here.into_iter().map(|d| format!("id {id}: {d}")));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{wrong} of {} records differ from what was produced; the first:\n{}",
        expected.len(),
        differences.join("\n")
    );
    assert_eq!(
        rows.len(),
        expected.len(),
        "rows beyond the records produced"
    );
}

fn is_integer_text(text: &str) -> bool {
    !text.contains(['.', 'e', 'E'])
}

/// The differences between `want` and `got` at the JSON pointer `path`.
pub fn diff(path: &str, want: &Value, got: &Value, decimals: &[&str], out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let p = format!("{path}/{k}");
                match g.get(k) {
                    Some(gv) => diff(&p, wv, gv, decimals, out),
                    None => out.push(format!("{p}: missing, expected {wv}")),
                }
            }
            for (k, gv) in g {
                if !w.contains_key(k) {
                    out.push(format!("{path}/{k}: not expected, got {gv}"));
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                diff(&format!("{path}/{i}"), wv, gv, decimals, out);
            }
        }
        (Value::Number(w), Value::Number(g)) => {
            let (wt, gt) = (w.to_string(), g.to_string());
            let same = wt == gt
                || (!decimals.contains(&path)
                    && !is_integer_text(&wt)
                    && wt.parse::<f64>().ok() == gt.parse::<f64>().ok());
            if !same {
                out.push(format!("{path}: expected {wt}, got {gt}"));
            }
        }
        _ => {
            if want != got {
                out.push(format!("{path}: expected {want}, got {got}"));
            }
        }
    }
}

/// Whether the dead-letter table exists yet (a sink creates it when it opens).
async fn letters_table_exists() -> bool {
    crate::kafka_pg_support::pg_count(
        "SELECT count(*) FROM pg_tables WHERE tablename = 'sluice_dead_letters'",
    )
    .await
        > 0
}

/// How many dead letters a Kafka topic's records became (0 without the table).
pub async fn dead_letter_count(topic: &str) -> usize {
    dead_letters(topic).await.len()
}

/// A dead letter of a Kafka record, as the PostgreSQL sink stores it.
#[derive(Debug, Clone)]
pub struct Letter {
    /// `topic/partition/offset`
    pub position: String,
    pub reason: String,
    /// The message key (decoded, when the key's format decoded).
    pub source_key: Option<Vec<u8>>,
    pub raw: Vec<u8>,
}

/// The dead letters of a Kafka topic's records, by partition and offset.
pub async fn dead_letters(topic: &str) -> Vec<Letter> {
    if !letters_table_exists().await {
        return Vec::new();
    }
    let mut conn = pg().await;
    type Row = (String, String, Option<Vec<u8>>, Vec<u8>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT position, reason, source_key, raw FROM sluice_dead_letters WHERE position LIKE $1",
    )
    .bind(format!("{topic}/%"))
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut letters: Vec<Letter> = rows
        .into_iter()
        .map(|(position, reason, source_key, raw)| Letter {
            position,
            reason,
            source_key,
            raw,
        })
        .collect();
    letters.sort_by_key(|l| offset_order(&l.position));
    letters
}

fn offset_order(position: &str) -> (i64, i64) {
    let mut parts = position.rsplit('/');
    let offset = parts.next().and_then(|o| o.parse().ok()).unwrap_or(-1);
    let partition = parts.next().and_then(|p| p.parse().ok()).unwrap_or(-1);
    (partition, offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn differences(want: &str, got: &str, decimals: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        diff(
            "",
            &serde_json::from_str(want).unwrap(),
            &serde_json::from_str(got).unwrap(),
            decimals,
            &mut out,
        );
        out
    }

    #[test]
    fn decimals_compare_by_their_digits_and_floats_by_their_value() {
        assert!(differences(r#"{"a":1.50}"#, r#"{"a":1.50}"#, &["/a"]).is_empty());
        assert_eq!(
            differences(r#"{"a":1.50}"#, r#"{"a":1.5}"#, &["/a"]).len(),
            1
        );
        assert!(differences(r#"{"r":1e+16}"#, r#"{"r":10000000000000000}"#, &[]).is_empty());
        assert!(differences(r#"{"r":[1.0]}"#, r#"{"r":[1]}"#, &[]).is_empty());
        // An integer keeps every digit: 2^63 + 1 is not the double 2^63.
        assert_eq!(
            differences(
                r#"{"n":9223372036854775809}"#,
                r#"{"n":9.223372036854776e18}"#,
                &[]
            )
            .len(),
            1
        );
        assert_eq!(
            differences(r#"{"f":0.1}"#, r#"{"f":0.10000000149011612}"#, &[]).len(),
            1
        );
    }

    #[test]
    fn missing_and_unexpected_fields_are_named() {
        let d = differences(r#"{"a":1,"b":{"c":null}}"#, r#"{"b":{"d":2},"e":1}"#, &[]);
        assert_eq!(
            d,
            vec![
                "/a: missing, expected 1",
                "/b/c: missing, expected null",
                "/b/d: not expected, got 2",
                "/e: not expected, got 1"
            ]
        );
    }
}
