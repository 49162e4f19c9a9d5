//! Keys that belong to another kind of source or sink (`path` on an AMQP source,
//! `timeout` on SQLite) are refused like unknown keys: a key that is silently ignored
//! looks as if it were in force.

use figment::Figment;

use crate::config::{
    Config, ConfigError, Problems, SinkBackend, SinkKind, SinkSettings, SourceKind, SourceSettings,
};

/// The keys of where a sink of several endpoints is (`[sink]` reads them for every kind,
/// but only these kinds balance endpoints).
const BALANCED_KEYS: &[&str] = &["urls", "balance", "discovery"];
const BALANCED_KINDS: &[SinkKind] = &[SinkKind::Http, SinkKind::Elasticsearch, SinkKind::Postgres];

/// Refuses every key of `[source]` or `[sink]` that was set (in the file, the environment
/// or a flag) but is not read by the chosen kind. Keys every kind reads pass.
pub fn refuse_other_kinds_keys(figment: &Figment, config: &Config, p: &mut Problems) {
    let kind = config.source.kind();
    let others: Vec<String> = [SourceKind::File, SourceKind::Amqp, SourceKind::Kafka]
        .into_iter()
        .filter(|k| *k != kind)
        .flat_map(SourceSettings::keys)
        .collect();
    let read = SourceSettings::keys(kind);
    refuse_keys(figment, "source", &format!("{kind:?}"), &read, &others, p);

    let kind = config.sink.kind();
    let all = [
        SinkKind::Sqlite,
        SinkKind::Http,
        SinkKind::Postgres,
        SinkKind::Mysql,
        SinkKind::Elasticsearch,
    ];
    let mut read = SinkSettings::common_keys();
    if !BALANCED_KINDS.contains(&kind) {
        read.retain(|k| !BALANCED_KEYS.contains(&k.as_str()));
    }
    read.extend(SinkBackend::keys(kind));
    let others: Vec<String> = all
        .into_iter()
        .filter(|k| *k != kind)
        .flat_map(SinkBackend::keys)
        .chain(BALANCED_KEYS.iter().map(|k| k.to_string()))
        .collect();
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
