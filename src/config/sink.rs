//! `[sink]`: where records are written — SQLite, PostgreSQL, MySQL, an HTTP endpoint,
//! Elasticsearch — and the checks of the keys every kind reads. What only the HTTP kinds
//! read is in `http_sink`, the endpoints of a balanced sink in `balance`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use super::{
    BalanceConfig, DeadLetterConfig, EndpointConfig, HttpFormat, MOST_BATCH, Problems, SourceKind,
    discovery,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    #[default]
    Sqlite,
    Http,
    Postgres,
    Mysql,
    /// Elasticsearch or OpenSearch through `_bulk` (`[sink.elasticsearch]`).
    Elasticsearch,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    pub kind: SinkKind,
    #[serde(default)]
    pub url: String,
    /// A file holding `url`, so a password stays out of the config file and `ps`.
    pub url_file: Option<PathBuf>,
    /// http, postgres: several endpoints instead of `url`, balanced by `[sink.balance]`.
    #[serde(default)]
    pub urls: Vec<EndpointConfig>,
    #[serde(default)]
    pub balance: BalanceConfig,
    /// Endpoints found while running: `dns+http://` entries of `urls`, a file of URLs.
    #[serde(default)]
    pub discovery: discovery::DiscoveryConfig,
    #[serde(default = "default_table")]
    pub table: String,
    /// JSON pointer to the record key, or `"@key"` for the Kafka message key; absent
    /// means the source position is the key.
    pub key: Option<String>,
    /// "insert" (default): the first version of a key stays. "upsert" (PostgreSQL): the
    /// newest version wins, guarded by `version`.
    #[serde(default)]
    pub mode: crate::sink::upsert::SinkMode,
    /// upsert: what orders a key's versions: "source" (the default; the Kafka offset) or
    /// a JSON pointer to a number or an RFC 3339 timestamp.
    pub version: Option<String>,
    /// upsert: a Kafka tombstone (no value) deletes the key of its message key.
    #[serde(default)]
    pub delete_on_tombstone: bool,
    /// upsert: a JSON pointer whose value `true` (or `"true"`) makes the record a delete.
    pub delete_flag: Option<String>,
    /// upsert with `columns`: the column keeping each row's version (default "version").
    pub version_column: Option<String>,
    /// upsert with `columns`: the boolean column marking a deleted key (default
    /// "deleted"; needed only when deletes are configured).
    pub deleted_column: Option<String>,
    /// Most records written in one statement/transaction.
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// Most bytes of records in one request (their JSON text and keys): a batch that would
    /// carry more is split. A single larger record still goes alone.
    pub max_batch_bytes: Option<u64>,
    /// http: how a batch is encoded in the request body.
    #[serde(default)]
    pub format: HttpFormat,
    /// http: extra request headers; `${VAR}` in a value is read from the environment.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// http: a private CA, a client certificate (PostgreSQL takes libpq's `sslmode`,
    /// `sslrootcert`, `sslcert`, `sslkey` in its URL instead).
    pub tls: Option<crate::tls::TlsConfig>,
    /// http: the longest one request may take before it counts as a transient failure.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(default = "default_sink_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Where records the sink rejects go, for a sink without tables of its own (http).
    pub dead_letters: Option<DeadLetterConfig>,
    /// http: how a 2xx answer says which records were taken (`sink::http::contract`).
    pub response: Option<crate::sink::http::contract::ResponseContract>,
    /// elasticsearch: the index and the bulk action (`sink::elasticsearch::settings`).
    pub elasticsearch: Option<crate::sink::elasticsearch::settings::ElasticsearchSettings>,
    /// PostgreSQL, MySQL: write into an existing table, column → JSON pointer into the
    /// payload (`""` is the whole payload). Absent: the table is created as key, payload,
    /// source.
    pub columns: Option<BTreeMap<String, String>>,
    /// PostgreSQL, MySQL with `columns`: the column that receives the record key; it must
    /// carry a unique index so redelivery is absorbed.
    pub key_column: Option<String>,
    /// PostgreSQL with `columns`: "strict" (default) writes a value only into a column of
    /// its own JSON type; "lenient" also lets PostgreSQL parse scalars (README's table).
    pub coerce: Option<crate::sink::postgres::coerce::Coerce>,
    /// PostgreSQL: SQLSTATEs that mean "slow down" (treated like HTTP 429), e.g. "53300".
    #[serde(default)]
    pub throttle_sqlstates: Vec<String>,
    /// PostgreSQL: connections in the pool; default `concurrency.max + 1`.
    pub max_connections: Option<u32>,
    /// MySQL: error numbers that mean "slow down" (treated like HTTP 429).
    #[serde(default)]
    pub throttle_errors: Vec<u16>,
}

fn default_table() -> String {
    "records".into()
}

fn default_max_batch() -> usize {
    1000
}

fn default_sink_timeout() -> Duration {
    Duration::from_secs(30)
}

impl SinkConfig {
    pub(super) fn validate(&self, source: SourceKind, p: &mut Problems) {
        if let Some(tls) = &self.tls {
            p.check(tls.validate(&crate::tls::SINK_KEYS));
            let https = std::iter::once(self.url.as_str())
                .chain(self.urls.iter().map(EndpointConfig::url))
                .any(|u| u.starts_with("https://"));
            if !https {
                p.add("sink.tls", "applies to https:// URLs; the sink has none");
            }
        }
        self.discovery.validate(self.kind, &self.urls, p);
        if !self.urls.is_empty() || self.discovery.file.is_some() {
            if self.kind == SinkKind::Sqlite && !self.urls.is_empty() {
                p.add("sink.urls", "kind = \"sqlite\" is one local file: set url");
            }
            if !self.url.is_empty() {
                p.add("sink.urls", "set url or urls, not both");
            }
        } else if self.url.trim().is_empty() {
            p.add("sink.url", "must not be empty");
        } else if self.kind == SinkKind::Sqlite && !self.url.starts_with("sqlite:") {
            p.add(
                "sink.url",
                format!(
                    "kind = \"sqlite\" needs a sqlite:// URL, got {:?}",
                    self.url
                ),
            );
        }
        if let SinkKind::Http | SinkKind::Elasticsearch = self.kind {
            self.validate_http(p);
        } else if self.dead_letters.is_some() {
            p.add(
                "sink.dead_letters",
                "only kind = \"http\" uses it; database sinks keep dead letters in sluice_dead_letters",
            );
        }
        crate::sink::postgres::settings::validate(self, p);
        crate::sink::mysql::settings::validate(self, p);
        if let Err(e) = crate::sink::identifier::validate(&self.table) {
            p.add("sink.table", e);
        }
        p.check(crate::sink::http::contract::validate(self));
        p.check(crate::sink::elasticsearch::settings::validate(self));
        if let Some(key) = &self.key
            && !key.starts_with('/')
            && key != crate::sink::upsert::MESSAGE_KEY
        {
            p.add(
                "sink.key",
                format!("{key:?} is not a JSON pointer (it must start with '/', e.g. \"/id\") nor \"@key\" (the Kafka message key)"),
            );
        }
        crate::sink::upsert::validate(self, source, p);
        if let Some(bytes) = self.max_batch_bytes {
            p.count("sink.max_batch_bytes", bytes, 1, u64::from(u32::MAX));
        }
        p.count("sink.max_batch", self.max_batch as u64, 1, MOST_BATCH);
        p.at_most_a_year("sink.balance.decay", self.balance.decay);
        self.balance.validate(p);
    }
}
