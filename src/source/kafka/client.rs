//! The librdkafka client configuration for the consumer and for `sluice produce`: our
//! defaults first (a worker that commits by hand, prefetches little and joins a group
//! quickly), then the user's pass-through properties.

use rdkafka::ClientConfig;

use super::settings::KafkaSettings;

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
pub fn consumer(source: &KafkaSettings) -> ClientConfig {
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
pub fn producer(source: &KafkaSettings) -> ClientConfig {
    let mut config = base(source);
    apply_properties(&mut config, source, CONSUMER_DEFAULTS);
    config
}

fn base(source: &KafkaSettings) -> ClientConfig {
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
fn apply_properties(config: &mut ClientConfig, source: &KafkaSettings, skip: &[(&str, &str)]) {
    for (key, value) in &source.properties {
        if !skip.iter().any(|(k, _)| k == key) {
            config.set(key, value.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kafka::settings::PropertyValue;
    use crate::source::kafka::settings::tests::{checked, kafka};

    #[test]
    fn a_complete_source_passes_and_keeps_our_guarantees() {
        let mut source = kafka();
        source
            .properties
            .insert("session.timeout.ms".into(), PropertyValue::Integer(10_000));
        checked(&source).unwrap();
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
}
