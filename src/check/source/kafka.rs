//! `sluice check` on a Kafka topic: the brokers reached (as the security properties say),
//! the topic there, without joining the group.

use std::time::Duration;

use crate::source::kafka::settings::KafkaSettings;

/// Keeps librdkafka's last complaint: a failed metadata request says only "transport
/// failure", the complaint says why (a TLS handshake, SASL authentication).
#[derive(Default)]
struct KafkaCheckContext {
    last_error: std::sync::Mutex<Option<String>>,
}

impl rdkafka::client::ClientContext for KafkaCheckContext {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        let mut last = crate::lock::lock(&self.last_error);
        *last = Some(format!("{error}: {reason}"));
    }
}

impl rdkafka::consumer::ConsumerContext for KafkaCheckContext {}

pub(super) fn topic(source: &KafkaSettings, timeout: Duration) -> Result<String, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let topic = source.topic.clone().unwrap_or_default();
    // A consumer that never subscribes: no group join, no rebalance of live workers.
    let consumer: BaseConsumer<KafkaCheckContext> = crate::source::kafka::client::consumer(source)
        .create_with_context(KafkaCheckContext::default())
        .map_err(|e| format!("cannot create a consumer: {e}"))?;
    let metadata = consumer
        .fetch_metadata(Some(&topic), timeout)
        .map_err(|e| {
            // Error events reach the context only when the client is polled.
            for _ in 0..3 {
                let _ = consumer.poll(Duration::from_millis(100));
            }
            let last = consumer
                .context()
                .last_error
                .lock()
                .ok()
                .and_then(|l| l.clone());
            match last {
                Some(why) => format!("cannot reach the brokers: {e}; {why}"),
                None => format!("cannot reach the brokers: {e}"),
            }
        })?;
    let security = kafka_security(source);
    match metadata.topics().iter().find(|t| t.name() == topic) {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(format!("{security}{} partitions", t.partitions().len()))
        }
        _ => Err(format!("{security}topic {topic:?} does not exist")),
    }
}

/// How the brokers were reached, as `security.protocol` and `sasl.mechanism` say (a
/// metadata answer over SSL means the handshake succeeded).
fn kafka_security(source: &KafkaSettings) -> String {
    let property = |name: &str| {
        source
            .properties
            .get(name)
            .map(|v| v.to_string())
            .unwrap_or_default()
    };
    let protocol = property("security.protocol").to_ascii_uppercase();
    let mechanism = match property("sasl.mechanism") {
        m if m.is_empty() => property("sasl.mechanisms"),
        m => m,
    };
    let mechanism = if mechanism.is_empty() {
        "GSSAPI".to_string()
    } else {
        mechanism.to_ascii_uppercase()
    };
    let verified = match property("enable.ssl.certificate.verification").as_str() {
        "false" => "certificate NOT verified",
        _ => "certificate verified",
    };
    match protocol.as_str() {
        "SSL" => format!("TLS handshake ok, {verified}; "),
        "SASL_SSL" => format!("TLS handshake ok, {verified}; SASL {mechanism} authenticated; "),
        "SASL_PLAINTEXT" => format!("without TLS; SASL {mechanism} authenticated; "),
        _ => "without TLS; ".to_string(),
    }
}
