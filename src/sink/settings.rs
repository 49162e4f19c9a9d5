//! `[sink]`: where records are written. The keys every kind reads are here — where the
//! sink is (`url`, `urls` and their balancing), what is written (`table`, `key`, `mode`)
//! and how much at once; `kind` picks a backend whose own keys, defaults and checks live
//! beside it (`http::settings`, `postgres::settings`, `mysql::settings`,
//! `elasticsearch::settings`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::balanced::settings::{BalanceSettings, EndpointSettings};
use super::dead_letters::settings::DeadLetterSettings;
use super::discovery::settings::{DNS_PREFIX, DiscoverySettings};
use super::elasticsearch::settings::ElasticsearchSettings;
use super::http::settings::{HttpSettings, HttpTransport};
use super::mysql::settings::MysqlSettings;
use super::postgres::settings::PostgresSettings;
use super::upsert::SinkMode;
use crate::settings::bounds::MOST_BATCH;
use crate::settings::{ConfigError, Problems, read_secret_file};
use crate::source::settings::SourceKind;
use crate::tls::TlsSettings;

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

/// The `[sink]` table.
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
pub struct SinkSettings {
    /// Where the sink is: `sqlite://…`, `postgres://…`, `mysql://…`, `http(s)://…`
    /// (http, elasticsearch); or `url_file`, or several `urls`.
    #[serde(default)]
    pub url: String,
    /// A file holding `url`, so a password stays out of the config file and `ps`.
    pub url_file: Option<PathBuf>,
    /// http, elasticsearch, postgres: several endpoints instead of `url`, balanced by
    /// `[sink.balance]`.
    #[serde(default)]
    pub urls: Vec<EndpointSettings>,
    #[serde(default)]
    pub balance: BalanceSettings,
    /// Endpoints found while running: `dns+http://` entries of `urls`, a file of URLs.
    #[serde(default)]
    pub discovery: DiscoverySettings,
    /// The table rows go to (created if missing, unless mapped by `[sink.columns]`).
    #[serde(default = "default_table")]
    pub table: String,
    /// JSON pointer to the record key, or `"@key"` for the Kafka message key; absent
    /// means the source position is the key.
    pub key: Option<String>,
    /// "insert" (default): the first version of a key stays. "upsert" (PostgreSQL): the
    /// newest version wins, guarded by `version`.
    #[serde(default)]
    pub mode: SinkMode,
    /// upsert: what orders a key's versions: "source" (the default; the Kafka offset) or
    /// a JSON pointer to a number or an RFC 3339 timestamp.
    pub version: Option<String>,
    /// upsert: a Kafka tombstone (no value) deletes the key of its message key.
    #[serde(default)]
    pub delete_on_tombstone: bool,
    /// upsert: a JSON pointer whose value `true` (or `"true"`) makes the record a delete.
    pub delete_flag: Option<String>,
    /// Most records written in one statement/transaction.
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// Most bytes of records in one request (their JSON text and keys): a batch that would
    /// carry more is split. A single larger record still goes alone.
    pub max_batch_bytes: Option<u64>,
    /// The backend `kind` names, with the keys only it reads.
    #[serde(flatten)]
    pub backend: SinkBackend,
}

/// What `kind` picks, each with its own keys.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SinkBackend {
    /// A local SQLite file (`url = "sqlite://…"`).
    #[default]
    Sqlite,
    /// An HTTP ingest endpoint that takes a batch per request.
    Http(HttpSettings),
    /// PostgreSQL.
    Postgres(PostgresSettings),
    /// MySQL or MariaDB.
    Mysql(MysqlSettings),
    /// Elasticsearch or OpenSearch through `_bulk`.
    Elasticsearch(ElasticsearchSettings),
}

fn default_table() -> String {
    "records".into()
}

fn default_max_batch() -> usize {
    1000
}

/// The keys of `[sink]` that name several endpoints and how to balance them.
const BALANCED_KEYS: &[&str] = &["urls", "balance", "discovery"];

impl SinkKind {
    pub const ALL: [SinkKind; 5] = [
        SinkKind::Sqlite,
        SinkKind::Http,
        SinkKind::Postgres,
        SinkKind::Mysql,
        SinkKind::Elasticsearch,
    ];

    /// Whether a sink of this kind can be several endpoints (`urls`, `[sink.balance]`,
    /// `[sink.discovery]`): SQLite is one local file, MySQL one server.
    pub fn balances(self) -> bool {
        matches!(
            self,
            SinkKind::Http | SinkKind::Elasticsearch | SinkKind::Postgres
        )
    }
}

impl SinkBackend {
    pub fn kind(&self) -> SinkKind {
        match self {
            SinkBackend::Sqlite => SinkKind::Sqlite,
            SinkBackend::Http(_) => SinkKind::Http,
            SinkBackend::Postgres(_) => SinkKind::Postgres,
            SinkBackend::Mysql(_) => SinkKind::Mysql,
            SinkBackend::Elasticsearch(_) => SinkKind::Elasticsearch,
        }
    }

    /// The keys `kind` reads besides those every kind reads, from the types that read them.
    pub fn keys(kind: SinkKind) -> Vec<String> {
        match kind {
            SinkKind::Sqlite => Vec::new(),
            SinkKind::Http => crate::settings::keys_of::<HttpSettings>(),
            SinkKind::Postgres => crate::settings::keys_of::<PostgresSettings>(),
            SinkKind::Mysql => crate::settings::keys_of::<MysqlSettings>(),
            SinkKind::Elasticsearch => crate::settings::keys_of::<ElasticsearchSettings>(),
        }
    }
}

impl SinkSettings {
    /// A sink of `backend`'s kind at `url`, every other key at its default.
    pub fn new(url: impl Into<String>, backend: SinkBackend) -> Self {
        SinkSettings {
            url: url.into(),
            table: default_table(),
            max_batch: default_max_batch(),
            backend,
            ..SinkSettings::default()
        }
    }

    pub fn kind(&self) -> SinkKind {
        self.backend.kind()
    }

    /// The keys of `[sink]` a sink of `kind` reads besides `kind`, from the types that
    /// read them: those of every kind (but where several endpoints are only for a kind
    /// that balances them), then its backend's own.
    pub fn keys(kind: SinkKind) -> Vec<String> {
        let mut keys = crate::settings::keys_of::<SinkSettings>();
        keys.retain(|k| k != "kind" && (kind.balances() || !BALANCED_KEYS.contains(&k.as_str())));
        keys.extend(SinkBackend::keys(kind));
        keys
    }

    pub fn http(&self) -> Option<&HttpSettings> {
        match &self.backend {
            SinkBackend::Http(s) => Some(s),
            _ => None,
        }
    }

    pub fn postgres(&self) -> Option<&PostgresSettings> {
        match &self.backend {
            SinkBackend::Postgres(s) => Some(s),
            _ => None,
        }
    }

    pub fn mysql(&self) -> Option<&MysqlSettings> {
        match &self.backend {
            SinkBackend::Mysql(s) => Some(s),
            _ => None,
        }
    }

    /// `[sink.columns]`: the existing table's columns (PostgreSQL, MySQL).
    pub fn columns(&self) -> Option<&BTreeMap<String, String>> {
        match &self.backend {
            SinkBackend::Postgres(s) => s.columns.as_ref(),
            SinkBackend::Mysql(s) => s.columns.as_ref(),
            _ => None,
        }
    }

    /// The column that receives the record key.
    pub fn key_column(&self) -> &str {
        let set = match &self.backend {
            SinkBackend::Postgres(s) => s.key_column.as_deref(),
            SinkBackend::Mysql(s) => s.key_column.as_deref(),
            _ => None,
        };
        set.unwrap_or("key")
    }

    /// What the HTTP kinds read of the connection.
    pub fn transport(&self) -> Option<&HttpTransport> {
        match &self.backend {
            SinkBackend::Http(s) => Some(&s.transport),
            SinkBackend::Elasticsearch(s) => Some(&s.transport),
            _ => None,
        }
    }

    /// Where rejected records go, for a sink without tables of its own (HTTP kinds).
    pub fn dead_letters(&self) -> Option<&DeadLetterSettings> {
        self.transport()?.dead_letters.as_ref()
    }

    /// The HTTP kinds' TLS table (PostgreSQL takes libpq's `ssl*` in its URL).
    pub fn tls(&self) -> Option<&TlsSettings> {
        self.transport()?.tls.as_ref()
    }

    /// The HTTP kinds' extra request headers.
    pub fn headers(&self) -> Option<&BTreeMap<String, String>> {
        self.transport().map(|t| &t.headers)
    }

    /// Every URL the sink is reached at: `url`, or each of `urls`.
    pub fn endpoint_urls(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.url.as_str())
            .filter(|u| !u.is_empty())
            .chain(self.urls.iter().map(EndpointSettings::url))
    }

    /// Fills `url` from `url_file`.
    pub fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.url_file {
            self.url = read_secret_file("sink.url_file", "sink.url", path, &self.url)?;
        }
        Ok(())
    }

    pub fn validate(&self, source: SourceKind, p: &mut Problems) {
        let kind = self.kind();
        if let Some(tls) = self.tls() {
            p.check(tls.validate(&crate::tls::SINK_KEYS));
            if !self.endpoint_urls().any(|u| u.starts_with("https://")) {
                p.add("sink.tls", "applies to https:// URLs; the sink has none");
            }
        }
        self.discovery.validate(kind, &self.urls, p);
        if !self.urls.is_empty() || self.discovery.file.is_some() {
            if !self.url.is_empty() {
                p.add("sink.urls", "set url or urls, not both");
            }
        } else if self.url.trim().is_empty() {
            p.add("sink.url", "must not be empty");
        }
        self.validate_backend(p);
        if let Err(e) = super::identifier::validate(&self.table) {
            p.add("sink.table", e);
        }
        if let Some(key) = &self.key
            && !key.starts_with('/')
            && key != super::upsert::MESSAGE_KEY
        {
            p.add(
                "sink.key",
                format!("{key:?} is not a JSON pointer (it must start with '/', e.g. \"/id\") nor \"@key\" (the Kafka message key)"),
            );
        }
        super::upsert::validate(self, source, p);
        if let Some(bytes) = self.max_batch_bytes {
            p.count("sink.max_batch_bytes", bytes, 1, u64::from(u32::MAX));
        }
        p.count("sink.max_batch", self.max_batch as u64, 1, MOST_BATCH);
        p.at_most_a_year("sink.balance.decay", self.balance.decay);
        self.balance.validate(p);
    }

    /// The checks of the backend's own keys, the URLs among them.
    fn validate_backend(&self, p: &mut Problems) {
        match &self.backend {
            SinkBackend::Sqlite => {
                if !self.urls.is_empty() {
                    p.add("sink.urls", "kind = \"sqlite\" is one local file: set url");
                } else if !self.url.trim().is_empty() && !self.url.starts_with("sqlite:") {
                    p.add(
                        "sink.url",
                        format!(
                            "kind = \"sqlite\" needs a sqlite:// URL, got {:?}",
                            self.url
                        ),
                    );
                }
            }
            SinkBackend::Http(s) => s.validate(self, p),
            SinkBackend::Postgres(s) => s.validate(self, p),
            SinkBackend::Mysql(s) => s.validate(self, p),
            SinkBackend::Elasticsearch(s) => s.validate(self, p),
        }
    }

    /// Whether `url` may be one of this sink's endpoints: the checks every entry of
    /// `sink.urls` passed when the configuration loaded, for an endpoint found while
    /// running (a line of `sink.discovery.file`). `Err` says why not.
    pub fn check_endpoint(&self, url: &str) -> Result<(), String> {
        if url.starts_with(DNS_PREFIX) {
            return Err("dns+ names are resolved from sink.urls only".into());
        }
        let mut one = self.clone();
        one.url.clear();
        one.urls = vec![EndpointSettings::Url(url.to_string())];
        one.discovery = Default::default();
        let mut p = Problems::default();
        one.validate_backend(&mut p);
        let problems = match p.into_result() {
            Ok(()) => return Ok(()),
            Err(ConfigError::Several(all)) => all,
            Err(one) => vec![one],
        };
        let about_urls: Vec<String> = problems
            .into_iter()
            .filter_map(|e| match e {
                ConfigError::Invalid { key, message } if key == "sink.urls" => Some(message),
                _ => None,
            })
            .collect();
        if about_urls.is_empty() {
            Ok(())
        } else {
            Err(about_urls.join("; "))
        }
    }
}
