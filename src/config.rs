//! Configuration: TOML file, then `SLUICE_*` environment variables (`__` = nesting), then
//! command-line flags. Everything is validated before anything starts, so a typo exits 2
//! with the key named instead of failing half-way through a drain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::control::balance::balancer::Strategy;

pub mod aperture;
pub mod discovery;
pub mod health;
mod problems;
pub mod schema;
pub use health::HealthConfig;
pub use problems::Problems;
#[cfg(test)]
pub use problems::only_key;

/// The slowest rate (and smallest lease capacity) taken: one record in about 17 minutes.
/// Slower, the wait for one record outgrows any clock.
pub const LEAST_RATE: f64 = 0.001;
/// The most records in one batch.
pub const MOST_BATCH: u64 = 1_000_000;
/// The longest record a source holds in memory: 1 GiB.
pub const MOST_RECORD_BYTES: u64 = 1 << 30;
/// The most batches in flight at once.
pub const MOST_IN_FLIGHT: u64 = 10_000;
/// The most latency samples an adaptive limit judges at once.
pub const MOST_WINDOW: u64 = 100_000;
/// Where an adaptive concurrency limit starts unless told.
const DEFAULT_INITIAL_LIMIT: usize = 4;

pub use crate::config_origin::ConfigOrigin;

/// A configuration that cannot be used; always names the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} not found")]
    MissingFile(PathBuf),
    #[error("{0}")]
    Parse(String),
    #[error("{key}: {message}")]
    Invalid { key: &'static str, message: String },
    /// More than one problem, each naming its key.
    #[error("{}", problems::list(.0))]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    pub(crate) fn invalid(key: &'static str, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub source: SourceConfig,
    pub sink: SinkConfig,
    #[serde(default)]
    pub rate: RateConfig,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub concurrency: ConcurrencyConfig,
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    #[serde(default)]
    pub throttle: ThrottleConfig,
    /// Share one sink's capacity among workers; without it the rate is static.
    pub leases: Option<LeasesConfig>,
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Database-health probes that hold or stop the writes (`[[health.probe]]`).
    #[serde(default)]
    pub health: HealthConfig,
    /// Whether `rate.records_per_second` was set rather than defaulted.
    #[serde(skip)]
    rate_set: bool,
    #[serde(default)]
    pub redact: RedactConfig,
}

/// What else counts as a secret in what sluice shows (logs, messages, metrics).
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedactConfig {
    /// Query parameters whose values are masked, besides the built-in names (password,
    /// token, key, secret, sig, signature, apikey, access_token, …).
    #[serde(default)]
    pub query_params: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Serve /metrics, /healthz, /readyz and the operator controls here, e.g.
    /// "127.0.0.1:9898"; off when absent.
    pub listen: Option<std::net::SocketAddr>,
    /// The bearer token the operator controls (`sluice ctl`) require; without one, a
    /// listener off loopback serves /metrics and health but refuses the controls (403).
    /// SLUICE_TELEMETRY__TOKEN keeps it out of the file.
    pub token: Option<String>,
    /// A file holding `token`.
    pub token_file: Option<PathBuf>,
}

impl TelemetryConfig {
    fn validate(&self, p: &mut Problems) {
        if self.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            p.add("telemetry.token", "must not be empty");
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LeasesConfig {
    /// Where leases live: a `postgres://` URL; or `"kafka"`: the capacity follows the
    /// consumer group's assignment (capacity × assigned / topic partitions), no store.
    #[serde(default)]
    pub store: String,
    /// A file holding `store` (a URL with a password stays out of the config and `ps`).
    pub store_file: Option<PathBuf>,
    /// The shared capacity's name; workers with the same pool share it.
    #[serde(default)]
    pub pool: String,
    /// Records per second the sink takes in total.
    pub capacity: f64,
    /// The capacity is cut into this many equal leases.
    #[serde(default)]
    pub partitions: u32,
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde", default = "default_lease_ttl")]
    pub ttl: Duration,
    /// Records per second this worker may use without a lease.
    #[serde(default)]
    pub reserved: f64,
    /// Leases are given back after this long without demand.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde", default = "default_idle_grace")]
    pub idle_grace: Duration,
}

impl Config {
    /// The worker's own ceiling on a leased or shared rate: `rate.records_per_second` when it
    /// was set. Without `[leases]` that rate is simply the worker's rate.
    pub fn rate_ceiling(&self) -> Option<f64> {
        self.rate_set.then_some(self.rate.records_per_second)
    }
}

impl LeasesConfig {
    /// The capacity is divided by the Kafka group's assignment, not by leases in a store.
    pub fn by_assignment(&self) -> bool {
        self.store == "kafka"
    }

    fn validate(&self, source: SourceKind, p: &mut Problems) {
        if !(self.capacity.is_finite() && self.capacity >= LEAST_RATE) {
            p.add(
                "leases.capacity",
                format!(
                    "must be a number of at least {LEAST_RATE}, got {}",
                    self.capacity
                ),
            );
        }
        if !(self.reserved.is_finite() && self.reserved >= 0.0) {
            p.add(
                "leases.reserved",
                format!("must be zero or more, got {}", self.reserved),
            );
        }
        p.at_most_a_year("leases.idle_grace", self.idle_grace);
        if self.by_assignment() {
            if source != SourceKind::Kafka {
                p.add(
                    "leases.store",
                    "\"kafka\" divides the capacity by a Kafka group's assignment: it needs kind = \"kafka\" in [source]",
                );
            }
            return;
        }
        if !(self.store.starts_with("postgres://") || self.store.starts_with("postgresql://")) {
            p.add("leases.store", "must be a postgres:// URL or \"kafka\"");
        } else {
            p.check(crate::sink::postgres::tls::validate_url(
                &self.store,
                "leases.store",
            ));
        }
        // Partitions are numbered with PostgreSQL integers.
        p.count(
            "leases.partitions",
            u64::from(self.partitions),
            1,
            i32::MAX as u64,
        );
        if self.ttl < Duration::from_secs(1) {
            p.add("leases.ttl", "must be at least 1s");
        }
        p.at_most_a_year("leases.ttl", self.ttl);
    }
}

fn default_lease_ttl() -> Duration {
    Duration::from_secs(15)
}

fn default_idle_grace() -> Duration {
    Duration::from_secs(5)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    #[default]
    File,
    Amqp,
    Kafka,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub kind: SourceKind,
    /// File source: NDJSON path, or "-" for stdin.
    pub path: Option<PathBuf>,
    /// File source: where acknowledged progress is kept; default `<path>.sluice-checkpoint`.
    pub checkpoint: Option<PathBuf>,
    /// File source, following: how long a rotated-away file must stay unchanged, once read
    /// to its end, before it counts as finished and the new file at `path` is read.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(default = "default_rotate_wait", with = "humantime_serde")]
    pub rotate_wait: Duration,
    /// A longer record is dead-lettered instead of being held in memory.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
    /// AMQP source: broker URL (`amqp://user:pass@host:5672/vhost`).
    pub url: Option<String>,
    /// AMQP source: a file holding `url`, so its password stays out of the config.
    pub url_file: Option<PathBuf>,
    /// AMQP source: the queue to drain.
    pub queue: Option<String>,
    /// AMQP source (`amqps://`): a private CA, a client certificate.
    pub tls: Option<crate::tls::TlsConfig>,
    /// AMQP source: declare the queue (durable) if it does not exist.
    #[serde(default = "default_true")]
    pub declare: bool,
    /// Kafka source: bootstrap servers, `host:port[,host:port…]`.
    pub brokers: Option<String>,
    /// Kafka source: the topic drained (and `sluice produce`'s destination).
    pub topic: Option<String>,
    /// Kafka source: consumer group; workers in one group share the topic's partitions.
    pub group: Option<String>,
    /// Kafka source: librdkafka properties passed through as they are (TLS, SASL, tuning).
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
    /// Kafka source: how long `--until-empty` waits for the group to assign partitions.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(default = "default_assignment_timeout", with = "humantime_serde")]
    pub assignment_timeout: Duration,
}

fn default_true() -> bool {
    true
}

impl SourceConfig {
    /// What is drained, for people: a file, a topic, a queue.
    pub fn describe(&self) -> String {
        let or_unset = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".into());
        match self.kind {
            SourceKind::File => format!(
                "file {}",
                self.path
                    .as_ref()
                    .map_or("(unset)".into(), |p| p.display().to_string())
            ),
            SourceKind::Kafka => format!("kafka topic {}", or_unset(&self.topic)),
            SourceKind::Amqp => format!("amqp queue {}", or_unset(&self.queue)),
        }
    }
}

/// A librdkafka property value; TOML numbers and booleans are accepted as they read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PropertyValue {
    Text(String),
    Integer(i64),
    Float(f64),
    Flag(bool),
}

impl std::fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PropertyValue::Text(s) => f.write_str(s),
            PropertyValue::Integer(i) => write!(f, "{i}"),
            PropertyValue::Float(x) => write!(f, "{x}"),
            PropertyValue::Flag(b) => write!(f, "{b}"),
        }
    }
}

fn default_assignment_timeout() -> Duration {
    Duration::from_secs(60)
}

fn default_rotate_wait() -> Duration {
    Duration::from_secs(5)
}

fn default_max_record_bytes() -> usize {
    1 << 20
}

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
    #[schemars(with = "Option<schema::ResponseContract>")]
    pub response: Option<crate::sink::http::contract::ResponseContract>,
    /// elasticsearch: the index and the bulk action (`sink::elasticsearch::settings`).
    #[schemars(with = "Option<schema::ElasticsearchSettings>")]
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

/// One endpoint of a sink served by several hosts: a URL, or a URL with its zone and the
/// name metrics show it by (`host:port` when unnamed; never the URL).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EndpointConfig {
    Url(String),
    Zoned {
        url: String,
        zone: Option<String>,
        name: Option<String>,
    },
}

impl EndpointConfig {
    pub fn url(&self) -> &str {
        match self {
            EndpointConfig::Url(u) | EndpointConfig::Zoned { url: u, .. } => u,
        }
    }

    pub fn zone(&self) -> Option<&str> {
        match self {
            EndpointConfig::Url(_) => None,
            EndpointConfig::Zoned { zone, .. } => zone.as_deref(),
        }
    }

    /// The label metrics and readiness show: the configured name, else `host:port`.
    pub fn label(&self) -> String {
        match self {
            EndpointConfig::Zoned {
                name: Some(name), ..
            } => name.clone(),
            _ => crate::redact::endpoint_label(self.url()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BalanceConfig {
    #[schemars(with = "schema::Strategy")]
    pub strategy: crate::control::balance::balancer::Strategy,
    /// This worker's zone: endpoints of other zones are used only when none here is up.
    pub zone: Option<String>,
    /// How fast the peak-EWMA latency forgets a slow answer.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub decay: Duration,
    /// `strategy = "aperture"`: the subset's bounds, load band and mode.
    pub aperture: aperture::ApertureConfig,
}

impl Default for BalanceConfig {
    fn default() -> Self {
        BalanceConfig {
            strategy: Default::default(),
            zone: None,
            decay: Duration::from_secs(10),
            aperture: Default::default(),
        }
    }
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

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RateConfig {
    /// This worker's ceiling, records per second. With `[leases]` it caps what the leases
    /// give only when it was set (file, environment or `--rate`), not by its default.
    pub records_per_second: f64,
    /// Granularity of the cadence: up to `records_per_second × tick` per tick.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub tick: Duration,
}

impl Default for RateConfig {
    fn default() -> Self {
        RateConfig {
            records_per_second: 1000.0,
            tick: Duration::from_millis(200),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub min_delay: Duration,
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
    pub factor: f64,
    /// Attempts at a record before it is dead-lettered with the last error.
    pub max_attempts: u32,
    /// Retries may number at most this share of the first attempts in `budget_window`…
    #[serde(default = "default_budget_ratio")]
    pub budget_ratio: f64,
    /// …plus this many per second, so a quiet worker can still retry.
    #[serde(default = "default_budget_min_per_second")]
    pub budget_min_per_second: f64,
    #[schemars(with = "schema::HumanDuration")]
    #[serde(default = "default_budget_window", with = "humantime_serde")]
    pub budget_window: Duration,
}

fn default_budget_ratio() -> f64 {
    0.2
}

fn default_budget_min_per_second() -> f64 {
    1.0
}

fn default_budget_window() -> Duration {
    Duration::from_secs(10)
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            factor: 2.0,
            max_attempts: 8,
            budget_ratio: default_budget_ratio(),
            budget_min_per_second: default_budget_min_per_second(),
            budget_window: default_budget_window(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConcurrencyAlgorithm {
    #[default]
    Fixed,
    Aimd,
    Vegas,
    Gradient2,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConcurrencyConfig {
    pub algorithm: ConcurrencyAlgorithm,
    /// Most batches in flight at once (the limit itself with `fixed`).
    pub max: usize,
    /// Where an adaptive limit starts (between `min` and `max`); unset: 4, or the nearest
    /// of `min` and `max` when 4 is outside them.
    pub initial: Option<usize>,
    /// An adaptive limit's floor.
    pub min: usize,
    /// aimd: the latency the judged percentile must stay under.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub target_latency: Duration,
    /// aimd: the percentile of the window judged (0.95 = p95).
    pub percentile: f64,
    /// aimd: samples per judgement (at least `2 / (1 − percentile)`: 40 at p95).
    pub window: usize,
    /// aimd: added while under target and used; multiplied by on a miss or a drop.
    pub increase: f64,
    pub backoff_ratio: f64,
    /// vegas, gradient2: share of a new estimate taken each time (1.0 = all).
    pub smoothing: f64,
    /// gradient2: how much slower than the long-term average is still fine.
    pub tolerance: f64,
    /// gradient2: writes allowed to queue at the sink.
    pub queue: f64,
    /// Adaptive algorithms: a write still running while the writes in flight exceed twice
    /// the limit (or twice what the sink lately answered in good time) is cut after 4
    /// typical round trips (at least 1 s), and writes sent again after no answer wait for
    /// a place under the limit; `false` leaves every write to `sink.timeout`.
    pub cut_overdue: bool,
}

impl Default for ConcurrencyConfig {
    fn default() -> Self {
        ConcurrencyConfig {
            algorithm: ConcurrencyAlgorithm::Fixed,
            max: 4,
            initial: None,
            min: 1,
            target_latency: Duration::from_millis(200),
            percentile: 0.95,
            window: 10,
            increase: 1.0,
            backoff_ratio: 0.9,
            smoothing: 0.2,
            tolerance: 1.5,
            queue: 1.0,
            cut_overdue: true,
        }
    }
}

impl ConcurrencyConfig {
    /// Whether overdue writes are cut: only a limit that adapts can act on the drop.
    pub fn cuts_overdue(&self) -> bool {
        self.cut_overdue && self.algorithm != ConcurrencyAlgorithm::Fixed
    }

    /// Where an adaptive limit starts.
    pub fn initial(&self) -> usize {
        self.initial
            .unwrap_or(DEFAULT_INITIAL_LIMIT.max(self.min).min(self.max))
    }

    fn validate(&self, p: &mut Problems) {
        p.count("concurrency.max", self.max as u64, 1, MOST_IN_FLIGHT);
        p.count("concurrency.min", self.min as u64, 1, MOST_IN_FLIGHT);
        if self.min > self.max {
            p.add(
                "concurrency.min",
                format!(
                    "must not exceed concurrency.max ({} > {})",
                    self.min, self.max
                ),
            );
        }
        if let Some(initial) = self.initial
            && !(self.min..=self.max).contains(&initial)
        {
            p.add(
                "concurrency.initial",
                format!(
                    "must be between concurrency.min and concurrency.max ({}..={}), got {initial}",
                    self.min, self.max
                ),
            );
        }
        p.positive_duration("concurrency.target_latency", self.target_latency);
        if !(self.percentile.is_finite() && self.percentile > 0.0 && self.percentile <= 1.0) {
            p.add(
                "concurrency.percentile",
                format!("must be in (0, 1], got {}", self.percentile),
            );
        } else if self.percentile < 1.0 && 2.0 / (1.0 - self.percentile) > MOST_WINDOW as f64 {
            // Judging a percentile p takes at least 2 / (1 − p) samples.
            p.add(
                "concurrency.percentile",
                format!(
                    "judging it would take more than {MOST_WINDOW} samples: at most {} (or 1)",
                    1.0 - 2.0 / MOST_WINDOW as f64
                ),
            );
        }
        p.count("concurrency.window", self.window as u64, 1, MOST_WINDOW);
        p.within(
            "concurrency.increase",
            self.increase,
            0.0,
            MOST_IN_FLIGHT as f64,
        );
        if !(self.backoff_ratio.is_finite() && self.backoff_ratio > 0.0 && self.backoff_ratio < 1.0)
        {
            p.add(
                "concurrency.backoff_ratio",
                format!(
                    "must be between 0 and 1 (exclusive), got {}",
                    self.backoff_ratio
                ),
            );
        }
        if !(self.smoothing.is_finite() && self.smoothing > 0.0 && self.smoothing <= 1.0) {
            p.add(
                "concurrency.smoothing",
                format!("must be in (0, 1], got {}", self.smoothing),
            );
        }
        p.within("concurrency.tolerance", self.tolerance, 1.0, 100.0);
        p.within("concurrency.queue", self.queue, 0.0, MOST_IN_FLIGHT as f64);
    }

    /// The limit this configuration describes; `validate` has held `min ≤ initial ≤ max`.
    pub fn build(&self) -> Box<dyn crate::control::limit::ConcurrencyLimit> {
        use crate::control::limit::{aimd, fixed, gradient2, vegas};
        let initial = self.initial();
        match self.algorithm {
            ConcurrencyAlgorithm::Fixed => Box::new(fixed::FixedLimit(self.max)),
            ConcurrencyAlgorithm::Aimd => Box::new(aimd::AimdLimit::new(
                initial,
                self.min,
                self.max,
                self.increase,
                self.backoff_ratio,
                self.target_latency,
                self.percentile,
                self.window,
            )),
            ConcurrencyAlgorithm::Vegas => Box::new(vegas::VegasLimit::new(
                initial,
                self.min,
                self.max,
                self.smoothing,
                rand::random(),
            )),
            ConcurrencyAlgorithm::Gradient2 => Box::new(gradient2::Gradient2Limit::new(
                initial,
                self.min,
                self.max,
                self.smoothing,
                self.tolerance,
                self.queue,
            )),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// How long in-flight batches may take to finish after SIGINT/SIGTERM.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            grace: Duration::from_secs(30),
        }
    }
}

/// How an http sink encodes a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HttpFormat {
    /// One JSON array of `{"key", "source", "record"}` objects.
    #[default]
    JsonArray,
    /// One such object per line (`application/x-ndjson`).
    Ndjson,
}

/// A dead-letter store apart from the sink: a database (`url`) or an NDJSON file (`path`).
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// `sqlite://…` (or `postgres://…`); the table is `sluice_dead_letters`.
    pub url: Option<String>,
    /// An NDJSON file, appended to.
    pub path: Option<PathBuf>,
}

/// How the worker learns what the sink takes and holds under it (see `control::sink_limit`),
/// and how it pauses when the sink says so.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ThrottleConfig {
    /// The share of a learned limit the worker holds.
    pub hold: f64,
    /// After an outage the worker resumes at this share of its rate (and climbs back
    /// within half a second); a throttle with nothing measured cuts the rate to this share.
    pub beta: f64,
    /// The rate never drops below this share of the configured rate.
    pub min_multiplier: f64,
    /// Quiet time between probes above a learned limit.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub probe_every: Duration,
    /// A probe sends this multiple of the learned limit, for one second.
    pub probe_gain: f64,
    /// A Retry-After pause is stretched by a random share of itself, up to this.
    pub pause_jitter: f64,
    /// The longest pause on a throttle that does not say how long (503 without
    /// Retry-After): how late the worker may notice that a sink which was down is back.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub max_pause: Duration,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            hold: 0.97,
            beta: 0.7,
            min_multiplier: 0.05,
            probe_every: Duration::from_secs(10),
            probe_gain: 1.05,
            pause_jitter: 0.2,
            max_pause: Duration::from_millis(500),
        }
    }
}

/// Values given on the command line; they win over the file and the environment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sink_url: Option<String>,
}

impl Config {
    /// Reads `path`, applies `SLUICE_*` variables and the flags, and validates the result.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        Self::load_from(&ConfigOrigin::file(path), overrides)
    }

    /// Reads the configuration `origin` names (a file or the built-in default), applies
    /// `SLUICE_*` variables and the flags, and validates the result.
    pub fn load_from(origin: &ConfigOrigin, overrides: &Overrides) -> Result<Config, ConfigError> {
        let base = match origin.path() {
            Some(path) if !path.is_file() => {
                return Err(ConfigError::MissingFile(path.to_path_buf()));
            }
            Some(path) => Toml::file_exact(path),
            None => Toml::string(crate::config_origin::BUILT_IN),
        };
        let mut figment = Figment::new()
            .merge(base)
            // Every key lives in a section, so `SLUICE_SECTION__KEY`; variables without `__`
            // (SLUICE_LOG) are not configuration. librdkafka's dotted property names cannot
            // be nested keys: they come in below, one variable each.
            .merge(
                Env::prefixed("SLUICE_")
                    .filter(|k| {
                        k.as_str().contains("__")
                            && !k
                                .as_str()
                                .to_ascii_uppercase()
                                .starts_with(KAFKA_PROPERTY_VARS)
                    })
                    .split("__"),
            );
        let properties = kafka_properties_from_env(std::env::vars());
        if !properties.is_empty() {
            figment = figment.merge(Serialized::default("source.properties", properties));
        }
        for name in unknown_variables(std::env::vars().map(|(k, _)| k)) {
            tracing::warn!(
                "{name} is not a sluice variable and is ignored (configuration keys are SLUICE_SECTION__KEY, with two underscores)"
            );
        }
        if let Some(rate) = overrides.records_per_second {
            figment = figment.merge(Serialized::default("rate.records_per_second", rate));
        }
        if let Some(input) = &overrides.input {
            figment = figment.merge(Serialized::default("source.path", input));
        }
        if let Some(url) = &overrides.sink_url {
            figment = figment.merge(Serialized::default("sink.url", url));
        }
        let mut config: Config = figment.extract().map_err(describe_figment_error)?;
        config.rate_set = figment.find_value("rate.records_per_second").is_ok();
        let mut problems = Problems::default();
        crate::config_kinds::refuse_other_kinds_keys(&figment, &config, &mut problems);
        // A URL left unread from its file would only be reported again as missing.
        match config.read_secret_files() {
            Ok(()) => problems.check(config.validate()),
            Err(e) => problems.push(e),
        }
        problems.into_result()?;
        config.register_secrets();
        if let Some(tls) = &config.source.tls {
            tls.warn_if_insecure(&crate::tls::SOURCE_KEYS, "the source");
        }
        if let Some(tls) = &config.sink.tls {
            tls.warn_if_insecure(&crate::tls::SINK_KEYS, "the sink");
        }
        let property = |name: &str| config.source.properties.get(name).map(|v| v.to_string());
        if property("enable.ssl.certificate.verification").as_deref() == Some("false") {
            tracing::warn!(
                "source.properties enable.ssl.certificate.verification = false: the Kafka connection accepts ANY certificate; it is encrypted but not authenticated"
            );
        }
        Ok(config)
    }

    /// Fills `*_file` keys from their files (secrets kept out of the config and `ps`).
    fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        fn read(
            key: &'static str,
            both: &'static str,
            path: &Path,
            current: &str,
        ) -> Result<String, ConfigError> {
            if !current.is_empty() {
                return Err(ConfigError::invalid(
                    key,
                    format!("set {both} or {key}, not both"),
                ));
            }
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::invalid(key, format!("cannot read {}: {e}", path.display()))
            })?;
            Ok(text.trim_end_matches(['\n', '\r']).to_string())
        }
        if let Some(path) = &self.sink.url_file {
            self.sink.url = read("sink.url_file", "sink.url", path, &self.sink.url)?;
        }
        if let Some(path) = &self.source.url_file {
            let current = self.source.url.clone().unwrap_or_default();
            self.source.url = Some(read("source.url_file", "source.url", path, &current)?);
        }
        if let Some(l) = &mut self.leases
            && let Some(path) = &l.store_file
        {
            l.store = read("leases.store_file", "leases.store", path, &l.store)?;
        }
        if let Some(path) = &self.telemetry.token_file {
            let current = self.telemetry.token.clone().unwrap_or_default();
            self.telemetry.token = Some(read(
                "telemetry.token_file",
                "telemetry.token",
                path,
                &current,
            )?);
        }
        for probe in &mut self.health.probe {
            probe.read_url_file()?;
        }
        // `"sasl.password_file" = "/run/secrets/kafka"` sets `sasl.password` from the file
        // (librdkafka's own names have no underscores, so the suffix cannot clash).
        let files: Vec<(String, String)> = self
            .source
            .properties
            .iter()
            .filter_map(|(k, v)| Some((k.strip_suffix("_file")?.to_string(), v.to_string())))
            .collect();
        for (name, path) in files {
            if self.source.properties.contains_key(&name) {
                return Err(ConfigError::invalid(
                    "source.properties",
                    format!("set {name:?} or \"{name}_file\", not both"),
                ));
            }
            let value = read("source.properties", "", Path::new(&path), "").map_err(|e| {
                ConfigError::invalid("source.properties", format!("{name}_file: {e}"))
            })?;
            self.source.properties.remove(&format!("{name}_file"));
            self.source
                .properties
                .insert(name, PropertyValue::Text(value));
        }
        Ok(())
    }

    /// Tells the redactor every secret this configuration holds, so no output shows one.
    fn register_secrets(&self) {
        use crate::redact::{register_secret, register_secret_param, register_url_secrets};
        for name in &self.redact.query_params {
            register_secret_param(name);
        }
        let urls = [
            Some(self.sink.url.as_str()),
            self.source.url.as_deref(),
            self.leases.as_ref().map(|l| l.store.as_str()),
            self.sink
                .dead_letters
                .as_ref()
                .and_then(|d| d.url.as_deref()),
        ];
        for url in urls.into_iter().flatten() {
            register_url_secrets(url);
        }
        for endpoint in &self.sink.urls {
            register_url_secrets(endpoint.url());
        }
        for probe in &self.health.probe {
            for url in probe.url.iter().chain(&probe.replicas) {
                register_url_secrets(url);
            }
        }
        if let Some(token) = &self.telemetry.token {
            register_secret(token);
        }
        if let Ok(headers) =
            crate::sink::http::headers::build(&self.sink.headers, |v| std::env::var(v).ok())
        {
            for value in headers.values().filter_map(|v| v.to_str().ok()) {
                register_secret(value);
                // "Bearer xyz": the token alone may be printed by someone else.
                if let Some((_, token)) = value.split_once(' ') {
                    register_secret(token);
                }
            }
        }
        for (key, value) in &self.source.properties {
            if crate::redact::is_secret_param(key, true) {
                register_secret(&value.to_string());
            }
        }
    }

    /// Checks what serde cannot: ranges, relations between keys, pointers, files that must
    /// exist. Every problem is reported, not only the first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        self.validate_source(&mut p);
        self.validate_sink(&mut p);
        self.validate_rate(&mut p);
        self.validate_retry(&mut p);
        self.concurrency.validate(&mut p);
        self.validate_throttle(&mut p);
        p.at_most_a_year("shutdown.grace", self.shutdown.grace);
        if let Some(leases) = &self.leases {
            leases.validate(self.source.kind, &mut p);
        }
        self.telemetry.validate(&mut p);
        self.health.validate(&self.sink, &mut p);
        p.into_result()
    }

    fn validate_source(&self, p: &mut Problems) {
        match self.source.kind {
            SourceKind::File => match &self.source.path {
                None => p.add("source.path", "required for kind = \"file\""),
                Some(path) if path.as_os_str() != "-" && !path.is_file() => p.add(
                    "source.path",
                    format!("input file {} does not exist", path.display()),
                ),
                Some(_) => {}
            },
            SourceKind::Amqp => {
                let url = self.source.url.as_deref().unwrap_or("");
                if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
                    p.add(
                        "source.url",
                        "kind = \"amqp\" needs an amqp:// or amqps:// URL",
                    );
                }
                if self
                    .source
                    .queue
                    .as_deref()
                    .is_none_or(|q| q.trim().is_empty())
                {
                    p.add("source.queue", "required for kind = \"amqp\"");
                }
            }
            SourceKind::Kafka => {}
        }
        if let Some(tls) = &self.source.tls {
            p.check(tls.validate(&crate::tls::SOURCE_KEYS));
            if !self
                .source
                .url
                .as_deref()
                .unwrap_or("")
                .starts_with("amqps://")
            {
                p.add(
                    "source.tls",
                    "applies to an amqps:// URL (TLS); source.url is not one",
                );
            }
            // lapin's TLS has no switch for it; an encrypted connection to anyone is not
            // worth a connector of our own.
            if tls.insecure_skip_verify {
                p.add(
                    "source.tls.insecure_skip_verify",
                    "is not supported for AMQP: set source.tls.ca_file to the CA that signed the broker's certificate",
                );
            }
        }
        crate::source::kafka::settings::validate(&self.source, p);
        p.at_most_a_year("source.rotate_wait", self.source.rotate_wait);
        p.count(
            "source.max_record_bytes",
            self.source.max_record_bytes as u64,
            1,
            MOST_RECORD_BYTES,
        );
    }

    fn validate_sink(&self, p: &mut Problems) {
        if let Some(tls) = &self.sink.tls {
            p.check(tls.validate(&crate::tls::SINK_KEYS));
            let https = std::iter::once(self.sink.url.as_str())
                .chain(self.sink.urls.iter().map(EndpointConfig::url))
                .any(|u| u.starts_with("https://"));
            if !https {
                p.add("sink.tls", "applies to https:// URLs; the sink has none");
            }
        }
        self.sink
            .discovery
            .validate(self.sink.kind, &self.sink.urls, p);
        if !self.sink.urls.is_empty() || self.sink.discovery.file.is_some() {
            if self.sink.kind == SinkKind::Sqlite && !self.sink.urls.is_empty() {
                p.add("sink.urls", "kind = \"sqlite\" is one local file: set url");
            }
            if !self.sink.url.is_empty() {
                p.add("sink.urls", "set url or urls, not both");
            }
        } else if self.sink.url.trim().is_empty() {
            p.add("sink.url", "must not be empty");
        } else if self.sink.kind == SinkKind::Sqlite && !self.sink.url.starts_with("sqlite:") {
            p.add(
                "sink.url",
                format!(
                    "kind = \"sqlite\" needs a sqlite:// URL, got {:?}",
                    self.sink.url
                ),
            );
        }
        if let SinkKind::Http | SinkKind::Elasticsearch = self.sink.kind {
            self.validate_http_sink(p);
        } else if self.sink.dead_letters.is_some() {
            p.add(
                "sink.dead_letters",
                "only kind = \"http\" uses it; database sinks keep dead letters in sluice_dead_letters",
            );
        }
        crate::sink::postgres::settings::validate(&self.sink, p);
        crate::sink::mysql::settings::validate(&self.sink, p);
        if let Err(e) = crate::sink::identifier::validate(&self.sink.table) {
            p.add("sink.table", e);
        }
        p.check(crate::sink::http::contract::validate(&self.sink));
        p.check(crate::sink::elasticsearch::settings::validate(&self.sink));
        if let Some(key) = &self.sink.key
            && !key.starts_with('/')
            && key != crate::sink::upsert::MESSAGE_KEY
        {
            p.add(
                "sink.key",
                format!("{key:?} is not a JSON pointer (it must start with '/', e.g. \"/id\") nor \"@key\" (the Kafka message key)"),
            );
        }
        crate::sink::upsert::validate(&self.sink, self.source.kind, p);
        if let Some(bytes) = self.sink.max_batch_bytes {
            p.count("sink.max_batch_bytes", bytes, 1, u64::from(u32::MAX));
        }
        p.count("sink.max_batch", self.sink.max_batch as u64, 1, MOST_BATCH);
        p.at_most_a_year("sink.balance.decay", self.sink.balance.decay);
        self.validate_balance(p);
    }

    fn validate_balance(&self, p: &mut Problems) {
        let b = &self.sink.balance;
        if b.strategy != Strategy::Aperture {
            if b.aperture != aperture::ApertureConfig::default() {
                p.add(
                    "sink.balance.aperture",
                    "applies only with strategy = \"aperture\"",
                );
            }
            return;
        }
        if b.zone.is_some() {
            p.add(
                "sink.balance.zone",
                "is not combined with strategy = \"aperture\" (the subset would cut across zones)",
            );
        }
        b.aperture.validate(&|v| std::env::var(v).ok(), p);
    }

    fn validate_rate(&self, p: &mut Problems) {
        let rate = self.rate.records_per_second;
        if !(rate.is_finite() && rate >= LEAST_RATE) {
            p.add(
                "rate.records_per_second",
                format!("must be a number of at least {LEAST_RATE}, got {rate}"),
            );
        } else if rate * self.rate.tick.as_secs_f64() > f64::from(u32::MAX) {
            p.add(
                "rate.records_per_second",
                "× rate.tick exceeds 4,294,967,295 records per tick",
            );
        }
        p.positive_duration("rate.tick", self.rate.tick);
    }

    fn validate_retry(&self, p: &mut Problems) {
        let r = &self.retry;
        p.positive_duration("retry.min_delay", r.min_delay);
        p.at_most_a_year("retry.max_delay", r.max_delay);
        if r.max_delay < r.min_delay {
            p.add(
                "retry.max_delay",
                "must not be shorter than retry.min_delay",
            );
        }
        if !(r.factor.is_finite() && r.factor >= 1.0) {
            p.add(
                "retry.factor",
                format!("must be a number of at least 1.0, got {}", r.factor),
            );
        }
        if r.max_attempts == 0 {
            p.add("retry.max_attempts", "must be at least 1");
        }
        if !(r.budget_ratio.is_finite() && r.budget_ratio >= 0.0) {
            p.add("retry.budget_ratio", "must be a number ≥ 0");
        }
        p.positive_duration("retry.budget_window", r.budget_window);
        if !(r.budget_min_per_second.is_finite() && r.budget_min_per_second >= 0.0) {
            p.add("retry.budget_min_per_second", "must be a number ≥ 0");
        } else if r.budget_min_per_second * r.budget_window.as_secs_f64() < 1.0 {
            p.add(
                "retry.budget_min_per_second",
                "× retry.budget_window must allow at least one retry, or an idle worker could never retry",
            );
        }
    }

    fn validate_http_sink(&self, p: &mut Problems) {
        let (key, urls): (&'static str, Vec<&str>) =
            if self.sink.urls.is_empty() && self.sink.discovery.file.is_none() {
                ("sink.url", vec![self.sink.url.as_str()])
            } else {
                (
                    "sink.urls",
                    self.sink.urls.iter().map(EndpointConfig::url).collect(),
                )
            };
        let resolved = |u: &&str| u.starts_with(discovery::DNS_PREFIX);
        for text in urls.into_iter().filter(|u| !resolved(u)) {
            match reqwest::Url::parse(text) {
                Err(e) => p.add(key, format!("{text:?} is not a URL: {e}")),
                Ok(url) if !matches!(url.scheme(), "http" | "https") => p.add(
                    key,
                    format!("kind = \"http\" needs an http(s):// URL, got {text:?}"),
                ),
                Ok(_) => {}
            }
        }
        p.positive_duration("sink.timeout", self.sink.timeout);
        if let Err(e) =
            crate::sink::http::headers::build(&self.sink.headers, |name| std::env::var(name).ok())
        {
            p.add("sink.headers", e.to_string());
        }
        // reqwest sends a URL's user:password as Basic auth in place of a configured
        // Authorization header, silently: one of them would be ignored.
        let authorization = self
            .sink
            .headers
            .keys()
            .any(|h| h.eq_ignore_ascii_case("authorization"));
        let credentials = std::iter::once(self.sink.url.as_str())
            .chain(self.sink.urls.iter().map(EndpointConfig::url))
            .filter_map(|u| reqwest::Url::parse(u).ok())
            .any(|u| !u.username().is_empty() || u.password().is_some());
        if authorization && credentials {
            p.add(
                "sink.headers",
                "Authorization is set and the sink URL carries user:password@, which would replace it: keep one",
            );
        }
        let Some(dl) = &self.sink.dead_letters else {
            p.add(
                "sink.dead_letters",
                "required for kind = \"http\": set url = \"sqlite://…\" or path = \"….ndjson\"",
            );
            return;
        };
        match (&dl.url, &dl.path) {
            (Some(url), None) if url.starts_with("postgres:") || url.starts_with("postgresql:") => {
                p.add(
                    "sink.dead_letters.url",
                    "a PostgreSQL dead-letter store is not available in this build; use url = \"sqlite://…\" or path = \"….ndjson\"",
                )
            }
            (Some(url), None) if !url.starts_with("sqlite:") => p.add(
                "sink.dead_letters.url",
                format!("needs a sqlite:// URL, got {url:?}"),
            ),
            (None, Some(path)) if path.as_os_str().is_empty() => {
                p.add("sink.dead_letters.path", "must not be empty")
            }
            (Some(_), None) | (None, Some(_)) => {}
            _ => p.add(
                "sink.dead_letters",
                "set exactly one of url (a database) or path (an NDJSON file)",
            ),
        }
    }

    fn validate_throttle(&self, p: &mut Problems) {
        let t = &self.throttle;
        let open_unit = |x: f64| x.is_finite() && x > 0.0 && x < 1.0;
        if !open_unit(t.beta) {
            p.add(
                "throttle.beta",
                format!("must be between 0 and 1 (exclusive), got {}", t.beta),
            );
        }
        if !(t.min_multiplier.is_finite() && t.min_multiplier > 0.0 && t.min_multiplier <= 1.0) {
            p.add(
                "throttle.min_multiplier",
                format!("must be in (0, 1], got {}", t.min_multiplier),
            );
        }
        if !(t.hold.is_finite() && t.hold > 0.0 && t.hold <= 1.0) {
            p.add(
                "throttle.hold",
                format!("must be in (0, 1], got {}", t.hold),
            );
        }
        p.within("throttle.probe_gain", t.probe_gain, 1.0, 1000.0);
        p.positive_duration("throttle.probe_every", t.probe_every);
        p.within("throttle.pause_jitter", t.pause_jitter, 0.0, 1000.0);
        p.positive_duration("throttle.max_pause", t.max_pause);
    }

    /// Where the file source keeps its acknowledged offset.
    pub fn checkpoint_path(&self) -> Option<PathBuf> {
        let path = self.source.path.as_ref()?;
        if path.as_os_str() == "-" {
            return None;
        }
        Some(self.source.checkpoint.clone().unwrap_or_else(|| {
            let mut name = path.as_os_str().to_owned();
            name.push(".sluice-checkpoint");
            PathBuf::from(name)
        }))
    }
}

/// Environment variables that set one librdkafka property each.
const KAFKA_PROPERTY_VARS: &str = "SOURCE__PROPERTIES__";

/// `SLUICE_SOURCE__PROPERTIES__SESSION_TIMEOUT_MS=2000` → `session.timeout.ms = "2000"`:
/// librdkafka's names are dotted and have no underscores, so `_` (or a literal `.`) after
/// the prefix stands for a dot.
pub fn kafka_properties_from_env(
    vars: impl Iterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let prefix = format!("SLUICE_{KAFKA_PROPERTY_VARS}");
    vars.filter_map(|(name, value)| {
        let upper = name.to_ascii_uppercase();
        let rest = upper.strip_prefix(&prefix)?;
        (!rest.is_empty()).then(|| (rest.to_ascii_lowercase().replace('_', "."), value))
    })
    .collect()
}

/// `SLUICE_*` variables that are neither configuration (`__`) nor known settings: most
/// likely a key written with one underscore (`SLUICE_SINK_URL`).
pub fn unknown_variables(names: impl Iterator<Item = String>) -> Vec<String> {
    const KNOWN: &[&str] = &["SLUICE_LOG", aperture::INDEX_VAR, aperture::COUNT_VAR];
    // The test suite's and the benches' own settings.
    const RESERVED_PREFIXES: &[&str] = &["SLUICE_TEST_", "SLUICE_BENCH_"];
    let mut unknown: Vec<String> = names
        .filter(|n| n.starts_with("SLUICE_") && !n.contains("__"))
        .filter(|n| !KNOWN.contains(&n.as_str()))
        .filter(|n| !RESERVED_PREFIXES.iter().any(|p| n.starts_with(p)))
        .collect();
    unknown.sort();
    unknown
}

/// Figment's messages name the key but also the profile ("default."); drop that noise.
fn describe_figment_error(err: figment::Error) -> ConfigError {
    let messages: Vec<String> = err
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let origin = e
                .metadata
                .as_ref()
                .and_then(|m| m.source.as_ref().map(|s| format!(" (from {s})")))
                .or_else(|| e.metadata.as_ref().map(|m| format!(" (from {})", m.name)))
                .unwrap_or_default();
            if key.is_empty() {
                format!("{}{origin}", e.kind)
            } else {
                format!("{key}: {}{origin}", e.kind)
            }
        })
        .collect();
    ConfigError::Parse(messages.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        path
    }

    fn base(dir: &Path, extra: &str) -> PathBuf {
        let input = write(dir, "in.ndjson", "{\"id\":1}\n");
        let body = format!(
            "[source]\nkind = \"file\"\npath = {:?}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://x.db\"\nkey = \"/id\"\n{extra}",
            input
        );
        write(dir, "c.toml", &body)
    }

    #[test]
    fn good_config_loads_with_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::load(&base(dir.path(), ""), &Overrides::default()).unwrap();
        assert_eq!(cfg.rate.tick, Duration::from_millis(200));
        assert_eq!(cfg.sink.table, "records");
        assert_eq!(cfg.retry.max_attempts, 8);
    }

    fn error_of(extra: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        Config::load(&base(dir.path(), extra), &Overrides::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn unknown_key_is_named() {
        assert!(error_of("[rate]\nrecords_per_secnd = 5\n").contains("records_per_secnd"));
    }

    #[test]
    fn bad_duration_is_named() {
        let e = error_of("[rate]\nrecords_per_second = 5\ntick = \"200 msx\"\n");
        assert!(e.contains("rate.tick"), "{e}");
    }

    #[test]
    fn non_positive_rate_is_named() {
        let e = error_of("[rate]\nrecords_per_second = 0\ntick = \"200ms\"\n");
        assert!(e.contains("rate.records_per_second"), "{e}");
    }

    fn http_error_of(sink_extra: &str, extra: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let input = write(dir.path(), "in.ndjson", "{\"id\":1}\n");
        let body = format!(
            "[source]\nkind = \"file\"\npath = {input:?}\n[sink]\nkind = \"http\"\nurl = \"http://127.0.0.1:8080/ingest\"\nkey = \"/id\"\n{sink_extra}\n{extra}"
        );
        let path = write(dir.path(), "c.toml", &body);
        Config::load(&path, &Overrides::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn http_sink_loads_with_its_keys() {
        let cfg = http_error_of(
            "format = \"ndjson\"\ntimeout = \"2s\"\n[sink.headers]\nX-Api = \"a$$b\"\n[sink.dead_letters]\npath = \"dead.ndjson\"",
            "[throttle]\nhold = 0.9",
        )
        .unwrap();
        assert_eq!(cfg.sink.format, HttpFormat::Ndjson);
        assert_eq!(cfg.sink.timeout, Duration::from_secs(2));
        assert_eq!(cfg.sink.headers["X-Api"], "a$$b");
        assert_eq!(cfg.throttle.hold, 0.9);
        assert_eq!(cfg.throttle.beta, 0.7, "unset keys keep their defaults");
        assert_eq!(cfg.retry.budget_ratio, 0.2);
    }

    #[test]
    fn http_sink_mistakes_are_named() {
        let e = http_error_of("", "").unwrap_err();
        assert!(e.contains("sink.dead_letters"), "{e}");
        let e = http_error_of("[sink.dead_letters]\nurl = \"mysql://x\"", "").unwrap_err();
        assert!(e.contains("sink.dead_letters.url"), "{e}");
        let e = http_error_of(
            "[sink.dead_letters]\nurl = \"sqlite://d.db\"\npath = \"d.ndjson\"",
            "",
        )
        .unwrap_err();
        assert!(e.contains("exactly one"), "{e}");
        let e = http_error_of(
            "[sink.headers]\nAuthorization = \"Bearer ${SLUICE_TEST_SURELY_UNSET_VAR}\"\n[sink.dead_letters]\npath = \"d.ndjson\"",
            "",
        )
        .unwrap_err();
        assert!(
            e.contains("sink.headers") && e.contains("SLUICE_TEST_SURELY_UNSET_VAR"),
            "{e}"
        );
        let e = http_error_of(
            "[sink.dead_letters]\npath = \"d.ndjson\"",
            "[throttle]\nbeta = 1.5",
        )
        .unwrap_err();
        assert!(e.contains("throttle.beta"), "{e}");
        let e = http_error_of(
            "[sink.dead_letters]\npath = \"d.ndjson\"",
            "[throttle]\nmax_pause = \"0s\"",
        )
        .unwrap_err();
        assert!(e.contains("throttle.max_pause"), "{e}");
        let e = http_error_of(
            "[sink.dead_letters]\npath = \"d.ndjson\"",
            "[throttle]\nrecovery = \"linear\"",
        )
        .unwrap_err();
        assert!(e.contains("recovery"), "{e}");
        let e = http_error_of(
            "[sink.dead_letters]\npath = \"d.ndjson\"",
            "[throttle]\nprobe_gain = 0.5",
        )
        .unwrap_err();
        assert!(e.contains("throttle.probe_gain"), "{e}");
    }

    #[test]
    fn tls_settings_that_cannot_apply_are_named() {
        let dl = "[sink.dead_letters]\npath = \"d.ndjson\"";
        let e = http_error_of(
            &format!("{dl}\n[sink.tls]\ninsecure_skip_verify = true"),
            "",
        )
        .unwrap_err();
        assert!(e.contains("sink.tls") && e.contains("https://"), "{e}");
        let e = http_error_of(
            &format!("{dl}\n[sink.tls]\ninsecure_skip_verify = \"yes\""),
            "",
        )
        .unwrap_err();
        assert!(e.contains("insecure_skip_verify"), "{e}");
        let e = error_of_sink("[sink.tls]\nca_file = \"ca.pem\"\n");
        assert!(e.contains("sink.tls"), "{e}");
    }

    #[test]
    fn the_http_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/http-sim.toml");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/records.ndjson");
        let over = Overrides {
            input: Some(source),
            ..Default::default()
        };
        let cfg = Config::load(&path, &over).unwrap();
        assert_eq!(cfg.sink.kind, SinkKind::Http);
        assert_eq!(cfg.throttle.hold, 0.97);
        assert!(cfg.sink.headers.is_empty());
    }

    #[test]
    fn dead_letters_are_refused_for_a_database_sink() {
        assert!(
            error_of("[sink.dead_letters]\npath = \"d.ndjson\"\n").contains("sink.dead_letters")
        );
    }

    #[test]
    fn kafka_properties_from_the_environment_turn_underscores_into_dots() {
        let vars = [
            ("SLUICE_SOURCE__PROPERTIES__SESSION_TIMEOUT_MS", "2000"),
            ("SLUICE_SOURCE__PROPERTIES__SASL.MECHANISMS", "PLAIN"),
            ("SLUICE_SINK__URL", "x"),
            ("SLUICE_SOURCE__PROPERTIES__", "empty name"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let props = kafka_properties_from_env(vars.into_iter());
        assert_eq!(
            props,
            BTreeMap::from([
                ("sasl.mechanisms".to_string(), "PLAIN".to_string()),
                ("session.timeout.ms".to_string(), "2000".to_string()),
            ])
        );
    }

    #[test]
    fn single_underscore_variables_are_unknown() {
        let names = [
            "SLUICE_SINK_URL",
            "SLUICE_LOG",
            "SLUICE_SINK__URL",
            "SLUICE_TEST_PG_URL",
            "PATH",
        ]
        .map(String::from);
        assert_eq!(unknown_variables(names.into_iter()), ["SLUICE_SINK_URL"]);
    }

    #[test]
    fn keys_of_another_kind_are_named() {
        let e = error_of_sink("timeout = \"5s\"\n");
        assert!(e.contains("sink.timeout") && e.contains("sqlite"), "{e}");
        let e = error_of_sink("coerce = \"lenient\"\n");
        assert!(e.contains("sink.coerce"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = base(dir.path(), "");
        let body = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, body.replace("[sink]", "topic = \"orders\"\n[sink]")).unwrap();
        let e = Config::load(&path, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("source.topic") && e.contains("file"), "{e}");
    }

    fn error_of_sink(sink_extra: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let input = write(dir.path(), "in.ndjson", "{\"id\":1}\n");
        let body = format!(
            "[source]\nkind = \"file\"\npath = {input:?}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://x.db\"\n{sink_extra}"
        );
        let path = write(dir.path(), "c.toml", &body);
        Config::load(&path, &Overrides::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn flags_win_over_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = base(
            dir.path(),
            "[rate]\nrecords_per_second = 5\ntick = \"1s\"\n",
        );
        let over = Overrides {
            records_per_second: Some(50.0),
            ..Default::default()
        };
        assert_eq!(
            Config::load(&path, &over).unwrap().rate.records_per_second,
            50.0
        );
    }

    #[test]
    fn bad_lease_settings_name_their_key() {
        let store = "[leases]\nstore = \"postgres://u@h/db\"\n";
        let e = error_of(&format!("{store}capacity = 600\n"));
        assert!(e.contains("leases.partitions"), "{e}");
        let e = error_of(&format!("{store}capacity = 0\npartitions = 6\n"));
        assert!(e.contains("leases.capacity"), "{e}");
        let e = error_of(&format!(
            "{store}capacity = 6\npartitions = 6\nreserved = -1\n"
        ));
        assert!(e.contains("leases.reserved"), "{e}");
        let e = error_of(&format!(
            "{store}capacity = 6\npartitions = 6\nttl = \"10ms\"\n"
        ));
        assert!(e.contains("leases.ttl"), "{e}");
        let e = error_of("[leases]\nstore = \"kafka\"\ncapacity = 600\n");
        assert!(e.contains("leases.store"), "{e}");
        let e = error_of("[leases]\nstore = \"redis://h\"\ncapacity = 600\npartitions = 6\n");
        assert!(e.contains("leases.store"), "{e}");
    }

    #[test]
    fn the_rate_is_a_ceiling_only_where_it_was_set() {
        let dir = tempfile::tempdir().unwrap();
        let leases = "[leases]\nstore = \"postgres://u@h/db\"\ncapacity = 600\npartitions = 6\n";
        let path = base(dir.path(), leases);
        let none = Overrides::default();
        assert_eq!(Config::load(&path, &none).unwrap().rate_ceiling(), None);
        let flag = Overrides {
            records_per_second: Some(50.0),
            ..Default::default()
        };
        assert_eq!(
            Config::load(&path, &flag).unwrap().rate_ceiling(),
            Some(50.0)
        );
        let path = base(
            dir.path(),
            &format!("[rate]\nrecords_per_second = 70\n{leases}"),
        );
        assert_eq!(
            Config::load(&path, &none).unwrap().rate_ceiling(),
            Some(70.0)
        );
    }
}
