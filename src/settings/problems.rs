//! Every problem a configuration has, gathered before any is reported: `sluice check` and
//! a refused `run` list them all at once instead of one per attempt.

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Duration;

/// A configuration that cannot be used; always names the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} not found")]
    MissingFile(PathBuf),
    /// The file is there but is no file to read (a directory) or may not be read.
    #[error("configuration file {path} {reason}")]
    UnreadableFile { path: PathBuf, reason: String },
    #[error("{0}")]
    Parse(String),
    #[error("{key}: {message}")]
    Invalid {
        key: Cow<'static, str>,
        message: String,
    },
    /// More than one problem, each naming its key.
    #[error("{}", list(.0))]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    pub(crate) fn invalid(key: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Problems found so far; each names its key.
#[derive(Debug, Default)]
pub struct Problems(Vec<ConfigError>);

/// The longest duration any key takes: beyond it a deadline computed from a clock reading
/// could overflow, and no setting of a drain is meant to last longer.
pub const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

impl Problems {
    pub fn add(&mut self, key: impl Into<Cow<'static, str>>, message: impl Into<String>) {
        self.0.push(ConfigError::invalid(key, message));
    }

    /// Keeps the problems of a check that reports through `Result`.
    pub fn check(&mut self, result: Result<(), ConfigError>) {
        if let Err(e) = result {
            self.push(e);
        }
    }

    pub fn push(&mut self, error: ConfigError) {
        match error {
            ConfigError::Several(all) => self.0.extend(all),
            one => self.0.push(one),
        }
    }

    /// `key` must be a finite number in `[low, high]`.
    pub fn within(&mut self, key: &'static str, value: f64, low: f64, high: f64) {
        if !(value.is_finite() && value >= low && value <= high) {
            self.add(
                key,
                format!("must be between {low} and {high}, got {value}"),
            );
        }
    }

    /// `key` must be longer than zero and at most a year.
    pub fn positive_duration(&mut self, key: &'static str, value: Duration) {
        if value.is_zero() {
            self.add(key, "must be longer than zero");
        }
        self.at_most_a_year(key, value);
    }

    pub fn at_most_a_year(&mut self, key: &'static str, value: Duration) {
        if value > LONGEST {
            self.add(key, "must be at most 365 days");
        }
    }

    /// `key` must be a count in `[low, high]`.
    pub fn count(&mut self, key: &'static str, value: u64, low: u64, high: u64) {
        if !(low..=high).contains(&value) {
            self.add(
                key,
                format!("must be between {low} and {high}, got {value}"),
            );
        }
    }

    pub fn into_result(mut self) -> Result<(), ConfigError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            _ => Err(ConfigError::Several(self.0)),
        }
    }
}

/// The key of the one problem `check` finds: the settings modules' tests ask this of a
/// value they break.
#[cfg(test)]
pub fn only_key(check: impl FnOnce(&mut Problems)) -> Cow<'static, str> {
    let mut p = Problems::default();
    check(&mut p);
    match p.into_result() {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("expected one problem, got {other:?}"),
    }
}

/// "3 problems:" and one per line, for `ConfigError::Several`.
fn list(all: &[ConfigError]) -> String {
    let mut text = format!("{} problems:", all.len());
    for e in all {
        text.push_str("\n  ");
        text.push_str(&e.to_string());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_problem_reads_as_before_and_several_are_listed() {
        let mut p = Problems::default();
        p.add("rate.tick", "must be longer than zero");
        assert_eq!(
            p.into_result().unwrap_err().to_string(),
            "rate.tick: must be longer than zero"
        );
        let mut p = Problems::default();
        p.within("throttle.beta", f64::NAN, 0.0, 1.0);
        p.count("sink.max_batch", 0, 1, 10);
        p.positive_duration("rate.tick", LONGEST * 2);
        let text = p.into_result().unwrap_err().to_string();
        assert!(text.starts_with("3 problems:"), "{text}");
        for key in ["throttle.beta", "sink.max_batch", "rate.tick"] {
            assert!(text.contains(key), "{text}");
        }
    }
}
