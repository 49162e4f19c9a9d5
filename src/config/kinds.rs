//! Keys that belong to another kind of source or sink (`path` on an AMQP source,
//! `timeout` on SQLite) are refused like unknown keys: a key that is silently ignored
//! looks as if it were in force.

use figment::Figment;

use crate::config::Config;
use crate::settings::{ConfigError, Problems};
use crate::sink::settings::{SinkKind, SinkSettings};
use crate::source::settings::{SourceKind, SourceSettings};

/// Refuses every key of `[source]` or `[sink]` that was set (in the file, the environment
/// or a flag) but is not read by the chosen kind. Keys every kind reads pass.
pub fn refuse_other_kinds_keys(figment: &Figment, config: &Config, p: &mut Problems) {
    let kind = config.source.kind();
    let others: Vec<String> = SourceKind::ALL
        .into_iter()
        .filter(|k| *k != kind)
        .flat_map(SourceSettings::keys)
        .collect();
    let read = SourceSettings::keys(kind);
    refuse_keys(figment, "source", &format!("{kind:?}"), &read, &others, p);

    let kind = config.sink.kind();
    let others: Vec<String> = SinkKind::ALL
        .into_iter()
        .filter(|k| *k != kind)
        .flat_map(SinkSettings::keys)
        .collect();
    let read = SinkSettings::keys(kind);
    refuse_keys(figment, "sink", &format!("{kind:?}"), &read, &others, p);
}

/// A kind reads only its own keys (`read`): one another kind reads (`others`) is refused
/// as not applying, one no kind reads as unknown.
fn refuse_keys(
    figment: &Figment,
    section: &str,
    kind: &str,
    read: &[String],
    others: &[String],
    p: &mut Problems,
) {
    let kind = kind.to_ascii_lowercase();
    for name in set_keys(figment, section) {
        if name == "kind" || read.contains(&name) {
            continue;
        }
        let key = format!("{section}.{name}");
        if others.contains(&name) {
            p.push(refusal(key, &kind));
        } else {
            p.add(
                key,
                format!("unknown key (kind = \"{kind}\" reads {})", read.join(", ")),
            );
        }
    }
}

/// The keys set under `section`, in the file, the environment or a flag.
fn set_keys(figment: &Figment, section: &str) -> Vec<String> {
    figment
        .find_value(section)
        .ok()
        .and_then(|v| v.into_dict())
        .map(|d| d.into_keys().collect())
        .unwrap_or_default()
}

fn refusal(key: impl Into<std::borrow::Cow<'static, str>>, kind: &str) -> ConfigError {
    ConfigError::invalid(
        key,
        format!("does not apply to kind = \"{kind}\" (unknown key for this kind)"),
    )
}
