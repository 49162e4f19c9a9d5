//! Configuration: TOML file, then `SLUICE_*` environment variables (`__` = nesting), then
//! command-line flags. Everything is validated before anything starts, so a typo exits 2
//! with the key named instead of failing half-way through a drain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// A configuration that cannot be used; always names the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} not found")]
    MissingFile(PathBuf),
    #[error("{0}")]
    Parse(String),
    #[error("{key}: {message}")]
    Invalid { key: &'static str, message: String },
}

impl ConfigError {
    pub(crate) fn invalid(key: &'static str, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    #[default]
    File,
    Kafka,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub kind: SourceKind,
    /// File source: NDJSON path, or "-" for stdin.
    pub path: Option<PathBuf>,
    /// File source: where acknowledged progress is kept; default `<path>.sluice-checkpoint`.
    pub checkpoint: Option<PathBuf>,
    /// A longer record is dead-lettered instead of being held in memory.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
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
    #[serde(default = "default_assignment_timeout", with = "humantime_serde")]
    pub assignment_timeout: Duration,
}

/// A librdkafka property value; TOML numbers and booleans are accepted as they read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

fn default_max_record_bytes() -> usize {
    1 << 20
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    #[default]
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    pub kind: SinkKind,
    pub url: String,
    #[serde(default = "default_table")]
    pub table: String,
    /// JSON pointer to the record key; absent means the source position is the key.
    pub key: Option<String>,
    /// Most records written in one statement/transaction.
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// PostgreSQL: write into an existing table, column → JSON pointer into the payload
    /// (`""` is the whole payload). Absent: the table is created as key, payload, source.
    pub columns: Option<BTreeMap<String, String>>,
    /// PostgreSQL with `columns`: the column that receives the record key; it must carry a
    /// unique index so redelivery is absorbed.
    pub key_column: Option<String>,
    /// PostgreSQL: SQLSTATEs that mean "slow down" (treated like HTTP 429), e.g. "53300".
    #[serde(default)]
    pub throttle_sqlstates: Vec<String>,
    /// PostgreSQL: connections in the pool; default `concurrency.max + 1`.
    pub max_connections: Option<u32>,
}

fn default_table() -> String {
    "records".into()
}

fn default_max_batch() -> usize {
    1000
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateConfig {
    /// This worker's ceiling, records per second.
    pub records_per_second: f64,
    /// Granularity of the cadence: up to `records_per_second × tick` per tick.
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    #[serde(with = "humantime_serde")]
    pub min_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
    pub factor: f64,
    /// Attempts at a record before it is dead-lettered with the last error.
    pub max_attempts: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            factor: 2.0,
            max_attempts: 8,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ConcurrencyAlgorithm {
    #[default]
    Fixed,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyConfig {
    pub algorithm: ConcurrencyAlgorithm,
    /// Most batches in flight at once.
    pub max: usize,
}

impl Default for ConcurrencyConfig {
    fn default() -> Self {
        ConcurrencyConfig {
            algorithm: ConcurrencyAlgorithm::Fixed,
            max: 4,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// How long in-flight batches may take to finish after SIGINT/SIGTERM.
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
        if !path.is_file() {
            return Err(ConfigError::MissingFile(path.to_path_buf()));
        }
        let mut figment = Figment::new()
            .merge(Toml::file_exact(path))
            // Every key lives in a section, so `SLUICE_SECTION__KEY`; variables without `__`
            // (SLUICE_LOG) are not configuration.
            .merge(
                Env::prefixed("SLUICE_")
                    .filter(|k| k.as_str().contains("__"))
                    .split("__"),
            );
        if let Some(rate) = overrides.records_per_second {
            figment = figment.merge(Serialized::default("rate.records_per_second", rate));
        }
        if let Some(input) = &overrides.input {
            figment = figment.merge(Serialized::default("source.path", input));
        }
        if let Some(url) = &overrides.sink_url {
            figment = figment.merge(Serialized::default("sink.url", url));
        }
        let config: Config = figment.extract().map_err(describe_figment_error)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what serde cannot: ranges, pointers, files that must exist.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.source.kind {
            SourceKind::File => {
                let path = self.source.path.as_ref().ok_or_else(|| {
                    ConfigError::invalid("source.path", "required for kind = \"file\"")
                })?;
                if path.as_os_str() != "-" && !path.is_file() {
                    return Err(ConfigError::invalid(
                        "source.path",
                        format!("input file {} does not exist", path.display()),
                    ));
                }
            }
            SourceKind::Kafka => {}
        }
        crate::source::kafka::settings::validate(&self.source)?;
        if self.source.max_record_bytes == 0 {
            return Err(ConfigError::invalid(
                "source.max_record_bytes",
                "must be positive",
            ));
        }
        if self.sink.url.trim().is_empty() {
            return Err(ConfigError::invalid("sink.url", "must not be empty"));
        }
        if let SinkKind::Sqlite = self.sink.kind
            && !self.sink.url.starts_with("sqlite:")
        {
            return Err(ConfigError::invalid(
                "sink.url",
                format!(
                    "kind = \"sqlite\" needs a sqlite:// URL, got {:?}",
                    self.sink.url
                ),
            ));
        }
        crate::sink::postgres::settings::validate(&self.sink)?;
        crate::sink::identifier::validate(&self.sink.table)
            .map_err(|e| ConfigError::invalid("sink.table", e))?;
        if let Some(key) = &self.sink.key
            && !key.starts_with('/')
        {
            return Err(ConfigError::invalid(
                "sink.key",
                format!("{key:?} is not a JSON pointer (it must start with '/', e.g. \"/id\")"),
            ));
        }
        if self.sink.max_batch == 0 {
            return Err(ConfigError::invalid("sink.max_batch", "must be positive"));
        }
        let rate = self.rate.records_per_second;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ConfigError::invalid(
                "rate.records_per_second",
                format!("must be a positive number, got {rate}"),
            ));
        }
        if self.rate.tick.is_zero() {
            return Err(ConfigError::invalid(
                "rate.tick",
                "must be longer than zero",
            ));
        }
        if rate * self.rate.tick.as_secs_f64() > f64::from(u32::MAX) {
            return Err(ConfigError::invalid(
                "rate.records_per_second",
                "records_per_second × tick exceeds 4,294,967,295 records per tick",
            ));
        }
        if self.retry.min_delay.is_zero() {
            return Err(ConfigError::invalid(
                "retry.min_delay",
                "must be longer than zero",
            ));
        }
        if self.retry.max_delay < self.retry.min_delay {
            return Err(ConfigError::invalid(
                "retry.max_delay",
                "must not be shorter than retry.min_delay",
            ));
        }
        if !(self.retry.factor.is_finite() && self.retry.factor >= 1.0) {
            return Err(ConfigError::invalid("retry.factor", "must be at least 1.0"));
        }
        if self.retry.max_attempts == 0 {
            return Err(ConfigError::invalid(
                "retry.max_attempts",
                "must be at least 1",
            ));
        }
        if self.concurrency.max == 0 {
            return Err(ConfigError::invalid(
                "concurrency.max",
                "must be at least 1",
            ));
        }
        Ok(())
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
}
