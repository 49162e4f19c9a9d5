//! What `sluice check` reaches of the source: the file, the AMQP queue, the Kafka topic.

use std::time::Duration;

use super::{Probe, within, writable};
use crate::source::kafka::settings::KafkaSettings;
use crate::source::settings::SourceSettings;

pub(super) async fn probes(source: &SourceSettings, timeout: Duration) -> Vec<Probe> {
    match source {
        SourceSettings::File(s) => {
            let path = s.path.clone().unwrap_or_default();
            if path.as_os_str() == "-" {
                return vec![Probe {
                    what: "source stdin".into(),
                    result: Ok("read as it comes".into()),
                }];
            }
            let mut probes = vec![Probe {
                what: format!("source file {}", path.display()),
                result: std::fs::File::open(&path)
                    .and_then(|f| f.metadata())
                    .map(|m| format!("readable, {} bytes", m.len()))
                    .map_err(|e| e.to_string()),
            }];
            if let Some(cp) = s.checkpoint_path() {
                probes.push(Probe {
                    what: format!("checkpoint {}", cp.display()),
                    result: writable(&cp).map(|()| "writable".into()),
                });
            }
            probes
        }
        SourceSettings::Amqp(s) => {
            let url = s.url.clone().unwrap_or_default();
            let queue = s.queue.clone().unwrap_or_default();
            vec![Probe {
                what: format!("source {url} queue {queue}"),
                result: within(timeout, amqp(&url, s.tls.as_ref(), &queue, s.declare)).await,
            }]
        }
        SourceSettings::Kafka(s) => {
            let brokers = s.brokers.clone().unwrap_or_default();
            let topic = s.topic.clone().unwrap_or_default();
            let settings = s.clone();
            let blocking = tokio::task::spawn_blocking(move || kafka(&settings, timeout));
            let result = within(timeout + Duration::from_millis(500), async {
                blocking.await.map_err(|e| e.to_string())?
            })
            .await;
            vec![Probe {
                what: format!("source kafka {brokers} topic {topic}"),
                result,
            }]
        }
    }
}

async fn amqp(
    url: &str,
    tls: Option<&crate::tls::TlsSettings>,
    queue: &str,
    declare: bool,
) -> Result<String, String> {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::FieldTable;
    let properties = lapin::ConnectionProperties::default();
    let connection = crate::source::amqp::connect(url, tls, properties)
        .await
        .map_err(|e| match crate::tls::certificate_refused(&e) {
            Some(why) => format!("cannot connect: TLS handshake failed: {why}"),
            None => format!("cannot connect: {e}"),
        })?;
    let over = if url.starts_with("amqps:") {
        "over TLS, certificate verified; "
    } else {
        ""
    };
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| format!("cannot open a channel: {e}"))?;
    // Passive: asks whether the queue exists without declaring it.
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let answer = channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await;
    let _ = connection.close(200, "sluice check".into()).await;
    match answer {
        Ok(q) => Ok(format!("{over}{} messages ready", q.message_count())),
        Err(_) if declare => Ok(format!(
            "{over}the queue does not exist yet; run declares it"
        )),
        Err(e) => Err(format!(
            "queue {queue:?} does not exist and source.declare = false: {e}"
        )),
    }
}

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

fn kafka(source: &KafkaSettings, timeout: Duration) -> Result<String, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let topic = source.topic.clone().unwrap_or_default();
    // A consumer that never subscribes: no group join, no rebalance of live workers.
    let consumer: BaseConsumer<KafkaCheckContext> =
        crate::source::kafka::settings::consumer(source)
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
