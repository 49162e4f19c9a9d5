//! `[[health.probe]]`: what the database's own health says about writing to it now —
//! replica lag, active sessions, a canary query's latency, or any query returning one
//! number — and the limits that steer (`target`), hold (`max`) or stop (`critical`) the
//! worker.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::{ConfigError, HumanDuration, Problems};
use crate::sink::settings::{SinkKind, SinkSettings};

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthSettings {
    #[serde(default)]
    pub probe: Vec<ProbeSettings>,
}

/// A probe's number, with what it means built in so users need not write SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Builtin {
    /// Seconds the worst replica is behind.
    ReplicaLag,
    /// Sessions running a statement now.
    ActiveSessions,
    /// The latency of a cheap query (`query`, default `SELECT 1`) on its own connection,
    /// seconds: a percentile over `window`.
    Canary,
}

impl Builtin {
    pub fn name(self) -> &'static str {
        match self {
            Builtin::ReplicaLag => "replica_lag",
            Builtin::ActiveSessions => "active_sessions",
            Builtin::Canary => "canary",
        }
    }
}

/// A limit: a number, a duration ("2s", "500ms") read as seconds, or (a canary's) a
/// multiple of its baseline ("2x").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Threshold {
    Number(f64),
    Text(String),
}

impl Threshold {
    /// The limit, given the baseline a relative one multiplies (None: not measured yet).
    pub fn resolve(&self, baseline: Option<f64>) -> Result<Option<f64>, String> {
        match self.factor() {
            Some(factor) => factor.map(|f| baseline.map(|b| b * f)),
            None => self.value().map(Some),
        }
    }

    /// "2x": the factor, or why it is not one; None when it is not written as a factor.
    pub fn factor(&self) -> Option<Result<f64, String>> {
        let Threshold::Text(t) = self else {
            return None;
        };
        let number = t.trim().strip_suffix(['x', 'X'])?;
        Some(match number.trim().parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
            _ => Err(format!(
                "{t:?}: a multiple of the baseline is a number above 0, then x"
            )),
        })
    }

    /// An absolute limit.
    pub fn value(&self) -> Result<f64, String> {
        match self {
            Threshold::Number(n) if n.is_finite() && *n >= 0.0 => Ok(*n),
            Threshold::Number(n) => Err(format!("must be a number of at least 0, got {n}")),
            Threshold::Text(t) => humantime::parse_duration(t)
                .map(|d| d.as_secs_f64())
                .map_err(|e| format!("{t:?} is neither a number nor a duration: {e}")),
        }
    }

    /// Checks it: absolute, or relative where a baseline is measured.
    fn problem(&self, relative_allowed: bool) -> Option<String> {
        match self.factor() {
            Some(Err(e)) => Some(e),
            Some(Ok(_)) if !relative_allowed => {
                Some("only a canary has a baseline to be a multiple of".into())
            }
            Some(Ok(_)) => None,
            None => self.value().err(),
        }
    }
}

/// Which database a probe asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    Postgres,
    Mysql,
}

impl Database {
    pub fn of(url: &str) -> Option<Database> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Database::Postgres)
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            Some(Database::Mysql)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeSettings {
    /// How logs, `/metrics` and the exit message name it; default: the built-in's name.
    pub name: Option<String>,
    /// `replica_lag`, `active_sessions` or `canary`.
    pub builtin: Option<Builtin>,
    /// Or SQL returning one row with one number (seconds for an interval). For a canary:
    /// the query timed (default `SELECT 1`; a read-only query like production's says more).
    pub query: Option<String>,
    /// The database it runs on: a postgres:// or mysql:// URL; default `sink.url`.
    pub url: Option<String>,
    /// A file holding `url`.
    pub url_file: Option<PathBuf>,
    /// `replica_lag`: the replicas (or PostgreSQL standbys) to ask, worst counts. Needed
    /// for MySQL; PostgreSQL asks the primary's `pg_stat_replication` without it.
    #[serde(default)]
    pub replicas: Vec<String>,
    /// How often it runs, each run on the probe's own connection; default 1s, a
    /// canary's 50ms (a hundred runs in its window, for its 99th percentile), on average:
    /// a canary's runs arrive at random, as production's queries do.
    #[schemars(with = "Option<HumanDuration>")]
    #[serde(with = "humantime_serde", default)]
    pub interval: Option<Duration>,
    /// A canary: the span its latencies are judged over (default 5s); its baseline is
    /// the percentile of two such spans' runs before the first write, measured again with
    /// the writes held when a relative target is exceeded for five spans at the least rate.
    #[schemars(with = "Option<HumanDuration>")]
    #[serde(with = "humantime_serde", default)]
    pub window: Option<Duration>,
    /// A canary: the percentile of the window that is its value (default 99: the tail,
    /// which is what a load shows in first).
    pub percentile: Option<f64>,
    /// The rate is steered so that the value stays at or under this (a canary's may be
    /// relative to its baseline: "2x").
    pub target: Option<Threshold>,
    /// New writes are held while the value is above this.
    pub max: Option<Threshold>,
    /// ... and go again once it is at or under `max × resume_ratio`.
    #[serde(default = "default_resume_ratio")]
    pub resume_ratio: f64,
    /// Above this the worker finishes what is in flight, checkpoints and exits 1.
    pub critical: Option<Threshold>,
}

fn default_resume_ratio() -> f64 {
    0.8
}

/// The shortest interval between two runs of a probe.
const SHORTEST_INTERVAL: Duration = Duration::from_millis(50);

impl ProbeSettings {
    pub fn name(&self) -> &str {
        match (&self.name, self.builtin) {
            (Some(n), _) => n,
            (None, Some(b)) => b.name(),
            (None, None) => "query",
        }
    }

    /// The URL it runs on: its own, else the sink's.
    pub fn url<'a>(&'a self, sink: &'a SinkSettings) -> &'a str {
        self.url.as_deref().unwrap_or(&sink.url)
    }

    /// The servers it asks: the listed replicas for `replica_lag`, else its URL.
    pub fn targets(&self, sink: &SinkSettings) -> Vec<String> {
        if self.asks_replicas() {
            self.replicas.clone()
        } else {
            vec![self.url(sink).to_string()]
        }
    }

    fn asks_replicas(&self) -> bool {
        self.builtin == Some(Builtin::ReplicaLag) && !self.replicas.is_empty()
    }

    pub fn is_canary(&self) -> bool {
        self.builtin == Some(Builtin::Canary)
    }

    pub fn interval(&self) -> Duration {
        let default = if self.is_canary() { 50 } else { 1000 };
        self.interval.unwrap_or(Duration::from_millis(default))
    }

    pub fn window(&self) -> Duration {
        self.window.unwrap_or(Duration::from_secs(5))
    }

    /// 0 to 1.
    pub fn quantile(&self) -> f64 {
        self.percentile.unwrap_or(99.0) / 100.0
    }

    /// Whether a limit is a multiple of a baseline, which is then measured first.
    pub fn needs_baseline(&self) -> bool {
        [&self.max, &self.target, &self.critical]
            .into_iter()
            .flatten()
            .any(|t| t.factor().is_some())
    }

    /// How long one run may take before it counts as failed.
    pub fn timeout(&self) -> Duration {
        self.interval().max(Duration::from_secs(1))
    }

    /// A reading older than this means the probe is stuck: two runs missed.
    pub fn stale_after(&self) -> Duration {
        self.interval() * 2 + self.timeout()
    }

    /// "steered under 2x the baseline, held above 5, stopped above 30", as configured.
    pub fn describe_limits(&self) -> String {
        let text = |t: &Threshold| match (t.factor(), t) {
            (Some(_), Threshold::Text(x)) => format!("{x} the baseline"),
            (_, Threshold::Number(n)) => n.to_string(),
            (_, Threshold::Text(x)) => x.clone(),
        };
        let said: Vec<String> = [
            ("steered under", &self.target),
            ("new writes held above", &self.max),
            ("stopped above", &self.critical),
        ]
        .into_iter()
        .filter_map(|(what, t)| Some(format!("{what} {}", text(t.as_ref()?))))
        .collect();
        said.join(", ")
    }

    /// `max`, given the baseline (none set: never held for its value).
    pub fn max(&self, baseline: Option<f64>) -> f64 {
        resolved(&self.max, baseline).unwrap_or(f64::INFINITY)
    }

    pub fn critical(&self, baseline: Option<f64>) -> Option<f64> {
        resolved(&self.critical, baseline)
    }

    pub fn target(&self, baseline: Option<f64>) -> Option<f64> {
        resolved(&self.target, baseline)
    }

    /// Fills `url` from `url_file`.
    pub fn read_url_file(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.url_file {
            if self.url.is_some() {
                return Err(ConfigError::invalid(
                    "health.probe.url_file",
                    "set health.probe.url or health.probe.url_file, not both",
                ));
            }
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::invalid(
                    "health.probe.url_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            self.url = Some(text.trim_end_matches(['\n', '\r']).to_string());
        }
        Ok(())
    }
}

fn resolved(limit: &Option<Threshold>, baseline: Option<f64>) -> Option<f64> {
    limit
        .as_ref()
        .and_then(|t| t.resolve(baseline).ok().flatten())
}

impl HealthSettings {
    pub fn validate(&self, sink: &SinkSettings, p: &mut Problems) {
        let mut names = std::collections::BTreeSet::new();
        for probe in &self.probe {
            let name = probe.name();
            let say = |what: &str| format!("probe {name:?}: {what}");
            if name.trim().is_empty() {
                p.add("health.probe.name", "must not be empty");
            } else if !names.insert(name.to_string()) {
                p.add("health.probe.name", say("two probes have this name"));
            }
            match (probe.builtin, &probe.query) {
                (Some(Builtin::Canary), Some(q)) if q.trim().is_empty() => {
                    p.add("health.probe.query", say("must not be empty"))
                }
                (Some(Builtin::Canary), _) => {}
                (Some(_), Some(_)) => {
                    p.add("health.probe.query", say("set builtin or query, not both"))
                }
                (None, None) => p.add(
                    "health.probe.builtin",
                    say("set builtin (replica_lag, active_sessions, canary) or query"),
                ),
                (None, Some(q)) if q.trim().is_empty() => {
                    p.add("health.probe.query", say("must not be empty"))
                }
                (None, Some(_)) if probe.name.is_none() => {
                    p.add("health.probe.name", "a probe with a query needs a name")
                }
                _ => {}
            }
            let url = match (&probe.url, probe.replicas.first()) {
                (None, Some(replica)) if probe.asks_replicas() => replica.as_str(),
                _ => probe.url(sink),
            };
            let database = Database::of(url);
            match database {
                // The replicas are checked below.
                Some(_) if probe.url.is_none() && probe.asks_replicas() => {}
                None if probe.url.is_none() => p.add(
                    "health.probe.url",
                    say(&format!(
                        "the sink is kind = \"{}\": give the probe a postgres:// or mysql:// URL",
                        kind_name(sink.kind())
                    )),
                ),
                None => p.add(
                    "health.probe.url",
                    say("must be a postgres:// or mysql:// URL"),
                ),
                // The sink's own URL is checked as sink.url.
                Some(_) if probe.url.is_none() => {}
                Some(db) => check_url(db, url, "health.probe.url", p),
            }
            if !probe.replicas.is_empty() && probe.builtin != Some(Builtin::ReplicaLag) {
                p.add(
                    "health.probe.replicas",
                    say("only builtin = \"replica_lag\" asks replicas"),
                );
            }
            for replica in &probe.replicas {
                match (Database::of(replica), database) {
                    (Some(r), Some(db)) if r == db => {
                        check_url(r, replica, "health.probe.replicas", p)
                    }
                    _ => p.add(
                        "health.probe.replicas",
                        say("each replica is a URL of the same kind of database as the probe's"),
                    ),
                }
            }
            if probe.builtin == Some(Builtin::ReplicaLag)
                && database == Some(Database::Mysql)
                && probe.replicas.is_empty()
            {
                p.add(
                    "health.probe.replicas",
                    say("MySQL reports lag on each replica (SHOW REPLICA STATUS): list them"),
                );
            }
            if probe.interval() < SHORTEST_INTERVAL {
                p.add("health.probe.interval", say("must be at least 50ms"));
            }
            p.at_most_a_year("health.probe.interval", probe.interval());
            self.validate_canary(probe, p);
            let canary = probe.is_canary();
            for (key, limit) in [
                ("health.probe.max", &probe.max),
                ("health.probe.target", &probe.target),
                ("health.probe.critical", &probe.critical),
            ] {
                if let Some(problem) = limit.as_ref().and_then(|t| t.problem(canary)) {
                    p.add(key, say(&problem));
                }
            }
            if probe.max.is_none() && probe.target.is_none() {
                p.add(
                    "health.probe.max",
                    say("set max (hold the writes above it), target (steer the rate under it) or both"),
                );
            }
            if !(probe.resume_ratio.is_finite()
                && probe.resume_ratio > 0.0
                && probe.resume_ratio <= 1.0)
            {
                p.add(
                    "health.probe.resume_ratio",
                    say(&format!(
                        "must be above 0 and at most 1, got {}",
                        probe.resume_ratio
                    )),
                );
            }
            // Compared in the same unit: both absolute, or both multiples of the baseline.
            let relative = |t: &Option<Threshold>| t.as_ref().map(|t| t.factor().is_some());
            let (max, critical) = (probe.max(Some(1.0)), probe.critical(Some(1.0)));
            if let Some(c) = critical
                && relative(&probe.max) == relative(&probe.critical)
                && c <= max
            {
                p.add(
                    "health.probe.critical",
                    say(&format!("must be above max ({max}), got {c}")),
                );
            }
        }
    }

    fn validate_canary(&self, probe: &ProbeSettings, p: &mut Problems) {
        let name = probe.name();
        let say = |what: &str| format!("probe {name:?}: {what}");
        if !probe.is_canary() {
            if probe.window.is_some() {
                p.add("health.probe.window", say("only a canary has a window"));
            }
            if probe.percentile.is_some() {
                p.add(
                    "health.probe.percentile",
                    say("only a canary has a percentile"),
                );
            }
            return;
        }
        if probe.window() < probe.interval() {
            p.add(
                "health.probe.window",
                say("must be at least the interval (a window holds one run or more)"),
            );
        }
        p.at_most_a_year("health.probe.window", probe.window());
        // A latency of 0 is never met: the rate would sit at its floor for good.
        if probe
            .target
            .as_ref()
            .is_some_and(|t| t.factor().is_none() && t.value().is_ok_and(|v| v <= 0.0))
        {
            p.add(
                "health.probe.target",
                say("a canary's target is a latency above 0 (e.g. \"20ms\" or \"2x\")"),
            );
        }
        if !probe
            .percentile
            .is_none_or(|q| q.is_finite() && q > 0.0 && q <= 100.0)
        {
            p.add(
                "health.probe.percentile",
                say("must be above 0 and at most 100"),
            );
        }
    }
}

fn check_url(db: Database, url: &str, key: &'static str, p: &mut Problems) {
    match db {
        Database::Postgres => p.check(crate::sink::postgres::tls::validate_url(url, key)),
        Database::Mysql => {
            if let Err(e) = crate::sink::mysql::settings::connect_options(url) {
                p.add(key, e);
            }
        }
    }
}

fn kind_name(kind: SinkKind) -> &'static str {
    match kind {
        SinkKind::Sqlite => "sqlite",
        SinkKind::Http => "http",
        SinkKind::Postgres => "postgres",
        SinkKind::Mysql => "mysql",
        SinkKind::Elasticsearch => "elasticsearch",
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
