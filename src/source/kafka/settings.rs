//! librdkafka settings for the consumer and for `sluice produce`: our defaults first (a
//! worker that commits by hand, prefetches little and joins a group quickly), then the
//! user's pass-through properties. Checked while the configuration loads, so a misspelt
//! property exits 2 instead of failing at the first pull.

use rdkafka::ClientConfig;

use crate::config::{ConfigError, SourceConfig, SourceKind};

/// Properties sluice sets itself; overriding them would break its guarantees or duplicate
/// a key of `[source]`.
const RESERVED: &[(&str, &str)] = &[
    ("bootstrap.servers", "set source.brokers instead"),
    ("group.id", "set source.group instead"),
    (
        "enable.auto.commit",
        "sluice commits only offsets whose records are written or dead-lettered",
    ),
    (
        "enable.auto.offset.store",
        "sluice commits only offsets whose records are written or dead-lettered",
    ),
    (
        "enable.partition.eof",
        "sluice needs end-of-partition events to tell when it is caught up",
    ),
];

/// Consumer defaults, each overridable through `[source.properties]`.
const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    // A new group drains the topic from its start: the queue is the backlog.
    ("auto.offset.reset", "earliest"),
    // A group join waits for half the session timeout on some brokers (23 s at the
    // default against Tansu); short sessions also hand a dead worker's partitions over
    // sooner.
    ("session.timeout.ms", "6000"),
    ("heartbeat.interval.ms", "1000"),
    // Bounded prefetch: memory stays flat whatever the backlog (librdkafka's defaults
    // allow 64 MB and 100,000 messages per partition in the local queue, and fetch up to
    // 50 MB at once).
    ("queued.max.messages.kbytes", "2048"),
    ("queued.min.messages", "5000"),
    ("fetch.max.bytes", "1048576"),
    ("max.partition.fetch.bytes", "131072"),
    // Once the queue is full the fetcher pauses this long (1 s by default) before it
    // tops it up: with a small queue that pause, not the sink, would set the pace.
    ("fetch.queue.backoff.ms", "20"),
    // High watermarks for `backlog()` come from the client's statistics, not from extra
    // requests (which some brokers answer wrongly).
    ("statistics.interval.ms", "1000"),
];

/// The consumer's configuration for a validated `[source]` of kind "kafka".
pub fn consumer(source: &SourceConfig) -> ClientConfig {
    let mut config = base(source);
    for (key, value) in CONSUMER_DEFAULTS {
        config.set(*key, *value);
    }
    config
        .set("group.id", source.group.as_deref().unwrap_or_default())
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true");
    apply_properties(&mut config, source, &[]);
    config
}

/// The producer's configuration (`sluice produce`): brokers and the pass-through
/// properties (TLS, SASL); consumer tuning is left out.
pub fn producer(source: &SourceConfig) -> ClientConfig {
    let mut config = base(source);
    apply_properties(&mut config, source, CONSUMER_DEFAULTS);
    config
}

fn base(source: &SourceConfig) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set(
            "bootstrap.servers",
            source.brokers.as_deref().unwrap_or_default(),
        )
        .set("client.id", "sluice");
    config
}

/// Sets the user's properties on `config`, except those named in `skip`.
fn apply_properties(config: &mut ClientConfig, source: &SourceConfig, skip: &[(&str, &str)]) {
    for (key, value) in &source.properties {
        if !skip.iter().any(|(k, _)| k == key) {
            config.set(key, value.to_string());
        }
    }
}

/// Checks the Kafka keys of `[source]`: required ones for kind "kafka", none for others.
pub fn validate(source: &SourceConfig) -> Result<(), ConfigError> {
    if source.kind != SourceKind::Kafka {
        let stray = [
            ("source.brokers", source.brokers.is_some()),
            ("source.topic", source.topic.is_some()),
            ("source.group", source.group.is_some()),
            ("source.properties", !source.properties.is_empty()),
        ];
        if let Some((key, _)) = stray.into_iter().find(|(_, set)| *set) {
            return Err(ConfigError::invalid(
                key,
                "only applies to kind = \"kafka\"",
            ));
        }
        return Ok(());
    }
    let brokers = source.brokers.as_deref().unwrap_or_default();
    if brokers.trim().is_empty() {
        return Err(ConfigError::invalid(
            "source.brokers",
            "required for kind = \"kafka\" (host:port[,host:port…])",
        ));
    }
    let topic = source.topic.as_deref().unwrap_or_default();
    validate_topic(topic).map_err(|e| ConfigError::invalid("source.topic", e))?;
    if source
        .group
        .as_deref()
        .unwrap_or_default()
        .trim()
        .is_empty()
    {
        return Err(ConfigError::invalid(
            "source.group",
            "required for kind = \"kafka\": workers sharing a group share the partitions",
        ));
    }
    if source.assignment_timeout.is_zero() {
        return Err(ConfigError::invalid(
            "source.assignment_timeout",
            "must be longer than zero",
        ));
    }
    for key in source.properties.keys() {
        if let Some((_, why)) = RESERVED.iter().find(|(k, _)| k == key) {
            return Err(ConfigError::invalid(
                "source.properties",
                format!("{key:?} cannot be set here: {why}"),
            ));
        }
    }
    consumer(source)
        .create_native_config()
        .map_err(|e| ConfigError::invalid("source.properties", e.to_string()))?;
    Ok(())
}

/// Kafka's own rule: 1–249 characters of `[A-Za-z0-9._-]`, not "." or "..".
fn validate_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("required for kind = \"kafka\"".into());
    }
    let legal = topic
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !legal || topic.len() > 249 || topic == "." || topic == ".." {
        return Err(format!(
            "{topic:?} is not a Kafka topic name (1-249 of letters, digits, '.', '_', '-')"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PropertyValue;

    fn kafka() -> SourceConfig {
        SourceConfig {
            kind: SourceKind::Kafka,
            brokers: Some("127.0.0.1:9092".into()),
            topic: Some("orders".into()),
            group: Some("sluice".into()),
            assignment_timeout: std::time::Duration::from_secs(60),
            ..Default::default()
        }
    }

    fn key_of(err: ConfigError) -> &'static str {
        match err {
            ConfigError::Invalid { key, .. } => key,
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn a_complete_source_passes_and_keeps_our_guarantees() {
        let mut source = kafka();
        source
            .properties
            .insert("session.timeout.ms".into(), PropertyValue::Integer(10_000));
        validate(&source).unwrap();
        let config = consumer(&source);
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
        assert_eq!(config.get("enable.partition.eof"), Some("true"));
        assert_eq!(config.get("session.timeout.ms"), Some("10000"));
        assert_eq!(config.get("group.id"), Some("sluice"));
    }

    #[test]
    fn the_producer_gets_security_settings_but_not_consumer_tuning() {
        let mut source = kafka();
        source.properties.insert(
            "security.protocol".into(),
            PropertyValue::Text("ssl".into()),
        );
        source
            .properties
            .insert("queued.min.messages".into(), PropertyValue::Integer(5));
        let config = producer(&source);
        assert_eq!(config.get("security.protocol"), Some("ssl"));
        assert_eq!(config.get("queued.min.messages"), None);
        assert_eq!(config.get("bootstrap.servers"), Some("127.0.0.1:9092"));
    }

    #[test]
    fn missing_and_malformed_keys_are_named() {
        let mut s = kafka();
        s.brokers = None;
        assert_eq!(key_of(validate(&s).unwrap_err()), "source.brokers");
        let mut s = kafka();
        s.topic = Some("orders; drop".into());
        assert_eq!(key_of(validate(&s).unwrap_err()), "source.topic");
        let mut s = kafka();
        s.group = Some(" ".into());
        assert_eq!(key_of(validate(&s).unwrap_err()), "source.group");
    }

    #[test]
    fn reserved_and_unknown_properties_are_refused() {
        let mut s = kafka();
        s.properties
            .insert("enable.auto.commit".into(), PropertyValue::Flag(true));
        assert_eq!(key_of(validate(&s).unwrap_err()), "source.properties");
        let mut s = kafka();
        s.properties
            .insert("no.such.property".into(), PropertyValue::Integer(1));
        assert_eq!(key_of(validate(&s).unwrap_err()), "source.properties");
    }

    /// librdkafka is built with TLS (and so SASL SCRAM): these are accepted, not
    /// "not available at build time".
    #[test]
    fn sasl_over_tls_is_accepted() {
        let mut s = kafka();
        for (key, value) in [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "sluice"),
            ("sasl.password", "not-a-real-one"),
            ("ssl.endpoint.identification.algorithm", "https"),
        ] {
            s.properties
                .insert(key.into(), PropertyValue::Text(value.into()));
        }
        validate(&s).unwrap();
        s.properties.insert(
            "sasl.mechanism".into(),
            PropertyValue::Text("SCRAM-SHA-256".into()),
        );
        validate(&s).unwrap();
        s.properties
            .insert("sasl.mechanism".into(), PropertyValue::Text("PLAIN".into()));
        validate(&s).unwrap();
    }

    #[test]
    fn kafka_keys_are_refused_for_other_sources() {
        let s = SourceConfig {
            topic: Some("orders".into()),
            ..Default::default()
        };
        assert_eq!(key_of(validate(&s).unwrap_err()), "source.topic");
    }
}
