//! Log lines on stderr, text or JSON, at the level `SLUICE_LOG` asks for. Two rules hold
//! whatever it asks: every line passes through [`crate::redact`], and other crates speak
//! at `info` at most — their `debug`/`trace` output carries what sluice cannot vouch for
//! (lapin's trace prints the AMQP login frame with the password, sqlx and hyper print
//! connection details and headers).

use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry, fmt};

/// The level used when `SLUICE_LOG` is unset or cannot be understood.
const DEFAULT_LEVEL: &str = "info";

/// The most any crate but sluice may log.
const THIRD_PARTY_CAP: LevelFilter = LevelFilter::INFO;

/// Installs the subscriber; `SLUICE_LOG` sets the level (`debug`, `sluice=trace,warn`…).
pub fn init(json: bool) {
    let (filter, warning) = env_filter(std::env::var("SLUICE_LOG").ok().as_deref());
    let filter = <EnvFilter as FilterExt<Registry>>::and(filter, cap());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && !json;
    let layer = fmt::layer()
        .with_ansi(ansi)
        .with_writer(|| crate::redact::RedactingStderr);
    let layer: Box<dyn Layer<Registry> + Send + Sync> = if json {
        layer.json().with_filter(filter).boxed()
    } else {
        layer.with_filter(filter).boxed()
    };
    let _ = tracing_subscriber::registry().with(layer).try_init();
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
}

/// sluice at any level; everyone else at `info` at most.
fn cap() -> Targets {
    Targets::new()
        .with_target("sluice", LevelFilter::TRACE)
        .with_default(THIRD_PARTY_CAP)
}

/// The filter `spec` describes, or `info` and a warning saying why not. A bare word that is
/// not a level (`warnn`) is refused: `EnvFilter` would read it as a target name and
/// silence every line.
pub fn env_filter(spec: Option<&str>) -> (EnvFilter, Option<String>) {
    let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
        return (EnvFilter::new(DEFAULT_LEVEL), None);
    };
    let fallback = |why: String| {
        (
            EnvFilter::new(DEFAULT_LEVEL),
            Some(format!(
                "SLUICE_LOG={spec:?}: {why}; logging at {DEFAULT_LEVEL}"
            )),
        )
    };
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let is_target = part.contains('=') || part.contains('[') || part.starts_with("sluice");
        if !is_target && part.parse::<LevelFilter>().is_err() {
            return fallback(format!(
                "{part:?} is not a level (trace, debug, info, warn, error, off)"
            ));
        }
    }
    match EnvFilter::builder().parse(spec) {
        Ok(filter) => (filter, None),
        Err(e) => fallback(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_levels_fall_back_to_info_with_a_warning() {
        for bad in ["warnn", "debug,inf0", "sluice=loud"] {
            let (filter, warning) = env_filter(Some(bad));
            assert_eq!(filter.to_string(), "info", "{bad}");
            let w = warning.unwrap_or_else(|| panic!("no warning for {bad}"));
            assert!(w.contains("SLUICE_LOG") && w.contains("info"), "{w}");
        }
    }

    #[test]
    fn levels_and_targets_are_taken_as_they_are() {
        for good in [
            "warn",
            "DEBUG",
            "sluice=trace,warn",
            "sluice::pipeline=debug",
        ] {
            let (_, warning) = env_filter(Some(good));
            assert!(warning.is_none(), "{good}: {warning:?}");
        }
        let (filter, warning) = env_filter(None);
        assert!(warning.is_none());
        assert_eq!(filter.to_string(), "info");
    }

    #[test]
    fn other_crates_are_capped_at_info() {
        let cap = cap();
        assert!(cap.would_enable("sluice::source::amqp", &tracing::Level::TRACE));
        assert!(!cap.would_enable("lapin::channel", &tracing::Level::TRACE));
        assert!(!cap.would_enable("sqlx::query", &tracing::Level::DEBUG));
        assert!(cap.would_enable("hyper_util::client", &tracing::Level::INFO));
    }
}
