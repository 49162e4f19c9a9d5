//! Keys that belong to another kind of source or sink (`path` on an AMQP source,
//! `timeout` on SQLite) are refused like unknown keys: a key that is silently ignored
//! looks as if it were in force.

use figment::Figment;

use crate::config::{Config, ConfigError, Problems, SinkKind, SourceKind, SourceSettings};

const HTTP: SinkKind = SinkKind::Http;
const ES: SinkKind = SinkKind::Elasticsearch;

/// Sink keys that only some kinds read.
const SINK_KEYS: &[(&str, &str, &[SinkKind])] = &[
    ("urls", "sink.urls", &[HTTP, ES, SinkKind::Postgres]),
    ("balance", "sink.balance", &[HTTP, ES, SinkKind::Postgres]),
    (
        "discovery",
        "sink.discovery",
        &[HTTP, ES, SinkKind::Postgres],
    ),
    ("format", "sink.format", &[HTTP]),
    ("response", "sink.response", &[HTTP]),
    ("elasticsearch", "sink.elasticsearch", &[ES]),
    ("headers", "sink.headers", &[HTTP, ES]),
    ("timeout", "sink.timeout", &[HTTP, ES]),
    ("tls", "sink.tls", &[HTTP, ES]),
    ("dead_letters", "sink.dead_letters", &[HTTP, ES]),
    (
        "columns",
        "sink.columns",
        &[SinkKind::Postgres, SinkKind::Mysql],
    ),
    (
        "key_column",
        "sink.key_column",
        &[SinkKind::Postgres, SinkKind::Mysql],
    ),
    (
        "version_column",
        "sink.version_column",
        &[SinkKind::Postgres],
    ),
    (
        "deleted_column",
        "sink.deleted_column",
        &[SinkKind::Postgres],
    ),
    ("coerce", "sink.coerce", &[SinkKind::Postgres]),
    (
        "throttle_sqlstates",
        "sink.throttle_sqlstates",
        &[SinkKind::Postgres],
    ),
    (
        "throttle_errors",
        "sink.throttle_errors",
        &[SinkKind::Mysql],
    ),
    (
        "max_connections",
        "sink.max_connections",
        &[SinkKind::Postgres],
    ),
];

/// Refuses every key of `[source]` or `[sink]` that was set (in the file, the environment
/// or a flag) but is not read by the chosen kind. Keys every kind reads pass.
pub fn refuse_other_kinds_keys(figment: &Figment, config: &Config, p: &mut Problems) {
    refuse_source_keys(figment, config.source.kind(), p);
    let sink_kind = config.sink.kind;
    for (name, key, kinds) in SINK_KEYS {
        if is_set(figment, "sink", name) && !kinds.contains(&sink_kind) {
            p.push(refusal(*key, &format!("{sink_kind:?}")));
        }
    }
}

/// A source kind reads only its own keys: one of another kind is refused as not applying,
/// one of no kind as unknown.
fn refuse_source_keys(figment: &Figment, kind: SourceKind, p: &mut Problems) {
    let read = SourceSettings::keys(kind);
    let others: Vec<String> = [SourceKind::File, SourceKind::Amqp, SourceKind::Kafka]
        .into_iter()
        .filter(|k| *k != kind)
        .flat_map(SourceSettings::keys)
        .collect();
    for name in set_keys(figment, "source") {
        if name == "kind" || read.contains(&name) {
            continue;
        }
        let key = format!("source.{name}");
        if others.contains(&name) {
            p.push(refusal(key, &format!("{kind:?}")));
        } else {
            let kind = format!("{kind:?}").to_ascii_lowercase();
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

fn is_set(figment: &Figment, section: &str, name: &str) -> bool {
    figment
        .find_value(section)
        .ok()
        .and_then(|v| v.into_dict())
        .is_some_and(|d| d.contains_key(name))
}

fn refusal(key: impl Into<std::borrow::Cow<'static, str>>, kind: &str) -> ConfigError {
    ConfigError::invalid(
        key,
        format!(
            "does not apply to kind = \"{}\" (unknown key for this kind)",
            kind.to_ascii_lowercase()
        ),
    )
}
