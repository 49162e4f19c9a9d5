//! One driver per sink kind: how to point the worker at it, how to read back what landed
//! (rows and dead letters), and what the sink documents it cannot hold (docs/sinks.md: "What each
//! sink cannot hold exactly").

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use sluice::sim_sink::{SimSink, SimSinkSettings};
use sluice::sink::settings::SinkKind;
use sqlx::Connection;

/// A stored dead letter: the raw record and its reason.
pub struct Letter {
    pub raw: Vec<u8>,
    pub reason: String,
}

pub trait Driver {
    fn kind(&self) -> SinkKind;
    /// The `[sink]` keys (and tables after them) that write `table`.
    fn sink(&self, table: &str) -> String;
    /// key → the stored record's text.
    fn rows(&self, dir: &Path, table: &str) -> BTreeMap<String, String>;
    fn letters(&self, dir: &Path, table: &str) -> Vec<Letter>;
    /// A record this sink documents it cannot hold: what its dead letter's reason says.
    fn refuses(&self, key: &str, record: &Value) -> Option<&'static str>;
    /// The record is stored as its text, byte for byte (else as a JSON value).
    fn keeps_text(&self) -> bool;
    /// Numbers are stored as their exact value, not their text (`numeric`, jsonb).
    fn numbers_by_value(&self) -> bool {
        false
    }
    fn clean_up(&self, _table: &str) {}
}

/// The driver of every kind: a kind without one does not compile.
pub fn driver_for(kind: SinkKind) -> Box<dyn Driver> {
    match kind {
        SinkKind::Sqlite => Box::new(Sqlite),
        SinkKind::Postgres => Box::new(Postgres),
        SinkKind::Mysql => Box::new(Mysql),
        SinkKind::Http => Box::new(Emulated::start(false)),
        SinkKind::Elasticsearch => Box::new(Emulated::start(true)),
    }
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Nesting depth: a scalar is 0, an array or object one more than its deepest member.
pub fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

pub fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

pub struct Sqlite;

impl Driver for Sqlite {
    fn kind(&self) -> SinkKind {
        SinkKind::Sqlite
    }
    fn sink(&self, table: &str) -> String {
        format!("kind = \"sqlite\"\nurl = \"sqlite://out.db\"\ntable = \"{table}\"")
    }
    fn rows(&self, dir: &Path, table: &str) -> BTreeMap<String, String> {
        let url = format!("sqlite://{}", dir.join("out.db").display());
        if !dir.join("out.db").exists() {
            return BTreeMap::new();
        }
        block_on(async {
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let sql = format!("SELECT key, payload FROM \"{table}\"");
            sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(sql))
                .fetch_all(&mut c)
                .await
                .unwrap_or_default()
                .into_iter()
                .collect()
        })
    }
    fn letters(&self, dir: &Path, table: &str) -> Vec<Letter> {
        let url = format!("sqlite://{}", dir.join("out.db").display());
        block_on(async {
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query_as::<_, (Vec<u8>, String)>(
                "SELECT raw, reason FROM sluice_dead_letters WHERE target = ?",
            )
            .bind(table)
            .fetch_all(&mut c)
            .await
            .unwrap()
            .into_iter()
            .map(|(raw, reason)| Letter { raw, reason })
            .collect()
        })
    }
    fn refuses(&self, _key: &str, _record: &Value) -> Option<&'static str> {
        None
    }
    fn keeps_text(&self) -> bool {
        true
    }
}

pub fn pg_url() -> String {
    super::common::pg_url()
}

pub struct Postgres;

impl Driver for Postgres {
    fn kind(&self) -> SinkKind {
        SinkKind::Postgres
    }
    fn sink(&self, table: &str) -> String {
        format!(
            "kind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"",
            pg_url()
        )
    }
    fn rows(&self, _dir: &Path, table: &str) -> BTreeMap<String, String> {
        block_on(async {
            let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
            let sql = format!("SELECT key, payload::text FROM \"{table}\"");
            sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(sql))
                .fetch_all(&mut c)
                .await
                .unwrap_or_default()
                .into_iter()
                .collect()
        })
    }
    fn letters(&self, _dir: &Path, table: &str) -> Vec<Letter> {
        block_on(async {
            let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
            sqlx::query_as::<_, (Vec<u8>, String)>(
                "SELECT raw, reason FROM sluice_dead_letters WHERE target = $1",
            )
            .bind(table)
            .fetch_all(&mut c)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|(raw, reason)| Letter { raw, reason })
            .collect()
        })
    }
    fn refuses(&self, key: &str, record: &Value) -> Option<&'static str> {
        if key.contains('\0') {
            return Some("0x00");
        }
        if has_nul(record) {
            return Some("unsupported Unicode escape");
        }
        // A btree entry holds at most a third of a page (2704 bytes at 8 KiB).
        (key.len() > 2704).then_some("index row")
    }
    fn keeps_text(&self) -> bool {
        false
    }
    fn numbers_by_value(&self) -> bool {
        true
    }
    fn clean_up(&self, table: &str) {
        block_on(async {
            let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
            let sql = format!(
                "DROP TABLE IF EXISTS \"{table}\"; DELETE FROM sluice_dead_letters WHERE target = '{table}'; \
                 DELETE FROM sluice_version_kinds WHERE target = '{table}'"
            );
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut c)
                .await;
        });
    }
}

pub fn mysql_url() -> String {
    std::env::var("SLUICE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://sluice:sluice@127.0.0.1:3306/sluice_test".into())
}

pub struct Mysql;

impl Driver for Mysql {
    fn kind(&self) -> SinkKind {
        SinkKind::Mysql
    }
    fn sink(&self, table: &str) -> String {
        format!(
            "kind = \"mysql\"\nurl = \"{}\"\ntable = \"{table}\"",
            mysql_url()
        )
    }
    fn rows(&self, _dir: &Path, table: &str) -> BTreeMap<String, String> {
        block_on(async {
            let mut c = sqlx::MySqlConnection::connect(&mysql_url()).await.unwrap();
            let sql = format!("SELECT CAST(`key` AS CHAR), CAST(payload AS CHAR) FROM `{table}`");
            sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(sql))
                .fetch_all(&mut c)
                .await
                .unwrap_or_default()
                .into_iter()
                .collect()
        })
    }
    fn letters(&self, _dir: &Path, table: &str) -> Vec<Letter> {
        block_on(async {
            let mut c = sqlx::MySqlConnection::connect(&mysql_url()).await.unwrap();
            sqlx::query_as::<_, (Vec<u8>, String)>(
                "SELECT raw, reason FROM sluice_dead_letters WHERE target = ?",
            )
            .bind(table)
            .fetch_all(&mut c)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|(raw, reason)| Letter { raw, reason })
            .collect()
        })
    }
    fn refuses(&self, key: &str, record: &Value) -> Option<&'static str> {
        if key.chars().count() > 255 {
            return Some("1406");
        }
        // MariaDB's JSON (a CHECK of JSON_VALID) takes at most 31 levels of nesting.
        (depth(record) > 31).then_some("4025")
    }
    fn keeps_text(&self) -> bool {
        true
    }
    fn clean_up(&self, table: &str) {
        block_on(async {
            let mut c = sqlx::MySqlConnection::connect(&mysql_url()).await.unwrap();
            let drop = format!("DROP TABLE IF EXISTS `{table}`");
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                .execute(&mut c)
                .await;
            let _ = sqlx::query("DELETE FROM sluice_dead_letters WHERE target = ?")
                .bind(table)
                .execute(&mut c)
                .await;
        });
    }
}

/// The HTTP sink against `sim-sink` (deduplicating by key), or Elasticsearch against
/// `sim-sink --bulk`, in this process, keeping what it stores.
pub struct Emulated {
    bulk: bool,
    rt: tokio::runtime::Runtime,
    sim: SimSink,
}

impl Emulated {
    pub fn start(bulk: bool) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let sim = rt
            .block_on(SimSink::start(SimSinkSettings {
                bulk,
                keep_documents: true,
                ..SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 1_000_000.0)
            }))
            .unwrap();
        Emulated { bulk, rt, sim }
    }
}

impl Driver for Emulated {
    fn kind(&self) -> SinkKind {
        if self.bulk {
            SinkKind::Elasticsearch
        } else {
            SinkKind::Http
        }
    }
    fn sink(&self, table: &str) -> String {
        let _ = table;
        if self.bulk {
            format!(
                "kind = \"elasticsearch\"\nurl = \"{}\"\n\n[sink.elasticsearch]\nindex = \"{table}\"\n\n\
                 [sink.dead_letters]\npath = \"dead.ndjson\"",
                self.sim.base_url()
            )
        } else {
            format!(
                "kind = \"http\"\nurl = \"{}\"\n\n[sink.dead_letters]\npath = \"dead.ndjson\"",
                self.sim.ingest_url()
            )
        }
    }
    fn rows(&self, _dir: &Path, _table: &str) -> BTreeMap<String, String> {
        let _guard = self.rt.enter();
        self.sim
            .documents()
            .into_iter()
            .map(|d| (d.key, d.record.to_string()))
            .collect()
    }
    fn letters(&self, dir: &Path, _table: &str) -> Vec<Letter> {
        let Ok(text) = std::fs::read_to_string(dir.join("dead.ndjson")) else {
            return Vec::new();
        };
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let raw = match (&v["raw"], &v["raw_hex"]) {
                    (Value::String(s), _) => s.clone().into_bytes(),
                    (_, Value::String(h)) => hex_decode(h),
                    _ => Vec::new(),
                };
                Letter {
                    raw,
                    reason: v["reason"].as_str().unwrap_or_default().to_string(),
                }
            })
            .collect()
    }
    fn refuses(&self, key: &str, _record: &Value) -> Option<&'static str> {
        (self.bulk && key.len() > 512).then_some("at most 512")
    }
    fn keeps_text(&self) -> bool {
        false
    }
}

fn hex_decode(h: &str) -> Vec<u8> {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}
