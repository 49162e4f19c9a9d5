//! Configuration: TOML file, then `SLUICE_*` environment variables (`__` = nesting), then
//! command-line flags. Everything is validated before anything starts, so a typo exits 2
//! with the key named instead of failing half-way through a drain.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod backoffs;
mod environment;
pub mod kinds;
mod leases;
pub mod origin;
mod rate;
pub mod reference;
mod retry;
pub mod schema;
mod secrets;
mod shutdown;
mod telemetry;

pub use crate::control::limit::settings::{ConcurrencyAlgorithm, ConcurrencySettings};
pub use crate::control::throttle::settings::ThrottleSettings;
use crate::health::settings::HealthSettings;
use crate::settings::{ConfigError, Problems};
use crate::sink::settings::{SinkBackend, SinkKind, SinkSettings};
use crate::source::settings::{SourceKind, SourceSettings};
use crate::source::{Extent, Opening};
pub use backoffs::Backoffs;
use environment::{kafka_properties_from_env, unknown_variables};
pub use leases::{LeasesSettings, MAX_PARTITIONS};
pub use rate::{RateSettings, RecordsPerSecond, Unbounded};
pub use retry::RetrySettings;
pub use secrets::RedactSettings;
pub use shutdown::ShutdownSettings;
pub use telemetry::TelemetrySettings;

pub use origin::ConfigOrigin;

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub source: SourceSettings,
    pub sink: SinkSettings,
    #[serde(default)]
    pub rate: RateSettings,
    #[serde(default)]
    pub retry: RetrySettings,
    #[serde(default)]
    pub concurrency: ConcurrencySettings,
    #[serde(default)]
    pub shutdown: ShutdownSettings,
    #[serde(default)]
    pub throttle: ThrottleSettings,
    /// Share one sink's capacity among workers; without it the rate is static.
    pub leases: Option<LeasesSettings>,
    #[serde(default)]
    pub telemetry: TelemetrySettings,
    /// Database-health probes that hold or stop the writes (`[[health.probe]]`).
    #[serde(default)]
    pub health: HealthSettings,
    /// Whether `rate.records_per_second` was set rather than defaulted.
    #[serde(skip)]
    rate_set: bool,
    #[serde(default)]
    pub redact: RedactSettings,
}

impl Config {
    /// The worker's own ceiling on a leased or shared rate: `rate.records_per_second` when it
    /// was set to a number. Without `[leases]` that rate is simply the worker's rate.
    pub fn rate_ceiling(&self) -> Option<f64> {
        self.rate_set
            .then_some(self.rate.records_per_second.fixed())
            .flatten()
    }

    /// Whether `rate.records_per_second` was set rather than defaulted.
    pub fn rate_set(&self) -> bool {
        self.rate_set
    }

    /// How the source is opened for a run reading as far as `extent` says. It may hold one
    /// batch per slot plus one being pulled before the pipeline says otherwise.
    pub fn opening(&self, extent: Extent, direct: bool) -> Opening {
        let rate = self.rate.records_per_second.cadence_rate();
        let per_tick = (rate * self.rate.tick.as_secs_f64())
            .ceil()
            .min(u32::MAX as f64);
        Opening {
            extent,
            direct,
            held: (per_tick as usize).min(self.sink.max_batch) * (self.concurrency.max + 1),
            reconnect: self.backoffs().reconnect,
        }
    }

    /// How the sink is opened: a pool as large as the writes in flight, HTTP waits capped
    /// at `retry.max_delay`, and the outage backoff.
    pub fn sink_opening(&self) -> crate::sink::SinkOpening {
        crate::sink::SinkOpening {
            most_in_flight: self.concurrency.max,
            longest_wait: self.retry.max_delay,
            outage: self.backoffs().outage,
        }
    }

    pub fn backoffs(&self) -> Backoffs {
        Backoffs::new(&self.retry, &self.throttle)
    }
}

/// Values given on the command line; they win over the file and the environment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_per_second: Option<RecordsPerSecond>,
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
        let mut figment = layers(origin)?;
        let variables = environment::variables()?;
        let properties = kafka_properties_from_env(variables.iter().cloned());
        if !properties.is_empty() {
            figment = figment.merge(Serialized::default("source.properties", properties));
        }
        for name in unknown_variables(variables.into_iter().map(|(k, _)| k)) {
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
        // `[source]` is a file unless its `kind` says otherwise.
        figment = figment.join(Serialized::default("source.kind", SourceKind::File));
        // The chosen kinds' keys are read on their own first: an error then names its key
        // (`source.assignment_timeout`), which a read through the tagged table cannot.
        extract_source(&figment)?;
        extract_sink_backend(&figment)?;
        let mut config: Config = figment.extract().map_err(describe_figment_error)?;
        config.rate_set = figment.find_value("rate.records_per_second").is_ok();
        let mut problems = Problems::default();
        kinds::refuse_other_kinds_keys(&figment, &config, &mut problems);
        // A URL left unread from its file would only be reported again as missing.
        match config.read_secret_files() {
            Ok(()) => problems.check(config.validate()),
            Err(e) => problems.push(e),
        }
        problems.into_result()?;
        config.register_secrets();
        if let Some(tls) = config.source.tls() {
            tls.warn_if_insecure(&crate::tls::SOURCE_KEYS, "the source");
        }
        if let Some(tls) = config.sink.tls() {
            tls.warn_if_insecure(&crate::tls::SINK_KEYS, "the sink");
        }
        let property = |name: &str| {
            let properties = &config.source.kafka()?.properties;
            properties.get(name).map(|v| v.to_string())
        };
        if property("enable.ssl.certificate.verification").as_deref() == Some("false") {
            tracing::warn!(
                "source.properties enable.ssl.certificate.verification = false: the Kafka connection accepts ANY certificate; it is encrypted but not authenticated"
            );
        }
        Ok(config)
    }

    /// `[telemetry]` alone, from the file and the environment, checked: all `sluice ctl`
    /// needs to reach a running worker, so it works where the rest (an input file, a sink)
    /// would not load, as with the built-in default in any directory.
    pub fn load_telemetry(origin: &ConfigOrigin) -> Result<TelemetrySettings, ConfigError> {
        let figment = layers(origin)?;
        let mut telemetry: TelemetrySettings = figment
            .focus("telemetry")
            .extract()
            .map_err(|e| describe_error_within("telemetry", e))?;
        telemetry.read_token_file()?;
        let mut problems = Problems::default();
        telemetry.validate(&mut problems);
        problems.into_result()?;
        if let Some(token) = &telemetry.token {
            crate::redact::register_secret(token);
        }
        Ok(telemetry)
    }

    /// Checks what serde cannot: ranges, relations between keys, pointers, files that must
    /// exist. Every problem is reported, not only the first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        self.source.validate(&mut p);
        self.sink.validate(self.source.kind(), &mut p);
        self.rate.validate(&mut p);
        self.retry.validate(&mut p);
        self.concurrency.validate(&mut p);
        self.throttle.validate(&mut p);
        self.remember_clobbers_nothing(&mut p);
        self.shutdown.validate(&mut p);
        if let Some(leases) = &self.leases {
            leases.validate(self.source.kind(), &mut p);
        }
        self.telemetry.validate(&mut p);
        self.health.validate(&self.sink, &mut p);
        p.into_result()
    }
}

impl Config {
    /// `throttle.remember` is rewritten whole: it must not be a file the run reads or
    /// writes (the input, its checkpoint, the dead-letter file), nor any existing file that
    /// is not a remembered limit (a typo in the path must not replace someone's data).
    fn remember_clobbers_nothing(&self, p: &mut Problems) {
        let Some(path) = self
            .throttle
            .remember
            .as_ref()
            .filter(|path| !path.as_os_str().is_empty() && !path.is_dir())
        else {
            // A directory is refused by `[throttle]`'s own check.
            return;
        };
        let mut ours: Vec<(&str, PathBuf)> = Vec::new();
        if let SourceSettings::File(file) = &self.source {
            ours.extend(file.path.clone().map(|input| ("source.path", input)));
            ours.extend(file.checkpoint_path().map(|c| ("source.checkpoint", c)));
        }
        if let Some(dead) = self.sink.dead_letters().and_then(|d| d.path.clone()) {
            ours.push(("sink.dead_letters.path", dead));
        }
        let same = |a: &Path, b: &Path| {
            a == b
                || matches!(
                    (a.canonicalize(), b.canonicalize()),
                    (Ok(x), Ok(y)) if x == y
                )
        };
        if let Some((key, _)) = ours.iter().find(|(_, other)| same(path, other)) {
            p.add(
                "throttle.remember",
                format!("{} is also {key}: it would be overwritten", path.display()),
            );
        } else if holds_something_else(path) {
            p.add(
                "throttle.remember",
                format!(
                    "{} exists and is not a remembered limit: refusing to overwrite it",
                    path.display()
                ),
            );
        }
    }
}

/// `path` is an existing file that is neither blank nor a remembered limit: overwriting
/// it would lose what it holds. A device or a file over the largest limit is not read.
fn holds_something_else(path: &Path) -> bool {
    use crate::control::sink_limit::remembered_limit::{LARGEST, RememberedLimit};
    match std::fs::metadata(path) {
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        Ok(meta) if !meta.is_file() || meta.len() > LARGEST => true,
        Ok(_) => {
            std::fs::read(path).map_or(true, |bytes| !RememberedLimit::is_one_or_blank(&bytes))
        }
    }
}

/// The file `origin` names (or the built-in default) under the `SLUICE_*` variables. A
/// file that cannot be read says why, naming it.
fn layers(origin: &ConfigOrigin) -> Result<Figment, ConfigError> {
    let base = match origin.path() {
        Some(path) => {
            // Read once here, so that a directory, a refused read or bytes that are not
            // text are told as such, naming the file (figment would say "source: …").
            let unreadable = crate::settings::unreadable_file(path).or_else(|| {
                std::fs::read_to_string(path)
                    .err()
                    .map(|e| format!("cannot be read: {e}"))
            });
            match unreadable {
                Some(_) if !path.exists() => {
                    return Err(ConfigError::MissingFile(path.to_path_buf()));
                }
                Some(reason) => {
                    return Err(ConfigError::UnreadableFile {
                        path: path.to_path_buf(),
                        reason,
                    });
                }
                None => Toml::file_exact(path),
            }
        }
        None => Toml::string(origin::BUILT_IN),
    };
    // Refused before figment's `Env` would read a value that is not text lossily.
    environment::variables()?;
    Ok(environment::merge_variables(Figment::new().merge(base)))
}

/// `[source]` read as the kind it names.
fn extract_source(figment: &Figment) -> Result<SourceSettings, ConfigError> {
    let source = figment.focus("source");
    let described = |e| describe_error_within("source", e);
    match source
        .extract_inner::<SourceKind>("kind")
        .map_err(described)?
    {
        SourceKind::File => source.extract().map(SourceSettings::File),
        SourceKind::Amqp => source.extract().map(SourceSettings::Amqp),
        SourceKind::Kafka => source.extract().map(SourceSettings::Kafka),
    }
    .map_err(described)
}

/// The keys of `[sink]` that its kind alone reads.
fn extract_sink_backend(figment: &Figment) -> Result<SinkBackend, ConfigError> {
    let sink = figment.focus("sink");
    let described = |e| describe_error_within("sink", e);
    let kind = sink.extract_inner::<SinkKind>("kind").map_err(described)?;
    // The keys both HTTP kinds read come flattened into theirs: read alone, they are named.
    if let SinkKind::Http | SinkKind::Elasticsearch = kind {
        sink.extract::<crate::sink::http::settings::HttpTransport>()
            .map_err(described)?;
    }
    match kind {
        SinkKind::Sqlite => Ok(SinkBackend::Sqlite),
        SinkKind::Http => sink.extract().map(SinkBackend::Http),
        SinkKind::Postgres => sink.extract().map(SinkBackend::Postgres),
        SinkKind::Mysql => sink.extract().map(SinkBackend::Mysql),
        SinkKind::Elasticsearch => sink.extract().map(SinkBackend::Elasticsearch),
    }
    .map_err(described)
}

/// Figment's messages name the key but also the profile ("default."); drop that noise.
fn describe_figment_error(err: figment::Error) -> ConfigError {
    describe_error_within("", err)
}

/// As `describe_figment_error`, for an error read from the table `section` names.
fn describe_error_within(section: &str, err: figment::Error) -> ConfigError {
    let messages: Vec<String> = err
        .into_iter()
        .map(|e| {
            let path = std::iter::once(section).chain(e.path.iter().map(String::as_str));
            let key = path.filter(|p| !p.is_empty()).collect::<Vec<_>>().join(".");
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
mod tests;
