//! Keys that belong to another kind of source or sink (`path` on an AMQP source,
//! `timeout` on SQLite) are refused like unknown keys: a key that is silently ignored
//! looks as if it were in force.

use figment::Figment;

use crate::config::{Config, ConfigError, Problems, SinkKind, SourceKind};

/// Source keys that only some kinds read, with the kinds that read them.
const SOURCE_KEYS: &[(&str, &str, &[SourceKind])] = &[
    ("path", "source.path", &[SourceKind::File]),
    ("checkpoint", "source.checkpoint", &[SourceKind::File]),
    ("url", "source.url", &[SourceKind::Amqp]),
    ("url_file", "source.url_file", &[SourceKind::Amqp]),
    ("queue", "source.queue", &[SourceKind::Amqp]),
    ("declare", "source.declare", &[SourceKind::Amqp]),
    ("tls", "source.tls", &[SourceKind::Amqp]),
    ("brokers", "source.brokers", &[SourceKind::Kafka]),
    ("topic", "source.topic", &[SourceKind::Kafka]),
    ("group", "source.group", &[SourceKind::Kafka]),
    ("properties", "source.properties", &[SourceKind::Kafka]),
    (
        "assignment_timeout",
        "source.assignment_timeout",
        &[SourceKind::Kafka],
    ),
];

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
    let source_kind = config.source.kind;
    for (name, key, kinds) in SOURCE_KEYS {
        if is_set(figment, "source", name) && !kinds.contains(&source_kind) {
            p.push(refusal(key, &format!("{source_kind:?}")));
        }
    }
    let sink_kind = config.sink.kind;
    for (name, key, kinds) in SINK_KEYS {
        if is_set(figment, "sink", name) && !kinds.contains(&sink_kind) {
            p.push(refusal(key, &format!("{sink_kind:?}")));
        }
    }
}

fn is_set(figment: &Figment, section: &str, name: &str) -> bool {
    figment
        .find_value(section)
        .ok()
        .and_then(|v| v.into_dict())
        .is_some_and(|d| d.contains_key(name))
}

fn refusal(key: &'static str, kind: &str) -> ConfigError {
    ConfigError::invalid(
        key,
        format!(
            "does not apply to kind = \"{}\" (unknown key for this kind)",
            kind.to_ascii_lowercase()
        ),
    )
}
