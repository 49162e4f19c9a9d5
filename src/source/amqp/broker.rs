//! Reaching the broker: a connection (with `[source.tls]` for `amqps://`), and a queue's
//! depth read without touching its messages.

use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};

use super::consumer::AmqpError;
use super::settings::AmqpSettings;
use crate::source::SourceError;

/// The longest sluice waits for the broker to answer (a connection's handshake, a
/// request, the goodbye at the end): a broker that stops answering — a frozen host, a
/// network that drops packets — is a lost connection then, not a worker stuck until
/// heartbeats notice, or a one-shot run that never ends.
pub(super) const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// `request`, failed as a lost connection would fail it if no answer came in time.
pub(super) async fn answered<T>(
    request: impl std::future::Future<Output = Result<T, lapin::Error>>,
) -> Result<T, lapin::Error> {
    tokio::time::timeout(ANSWER_WITHIN, request)
        .await
        .unwrap_or_else(|_| {
            Err(lapin::Error::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from the broker within {ANSWER_WITHIN:?}"),
            )))
        })
}

/// Connects to the broker; an `amqps://` URL with `[source.tls]`'s CA (added to the
/// system's roots) and client certificate, when set.
pub async fn connect(
    url: &str,
    tls: Option<&crate::tls::TlsSettings>,
    properties: ConnectionProperties,
) -> Result<Connection, lapin::Error> {
    let config = match tls {
        Some(tls) => tls_config(tls).map_err(|e| lapin::Error::from(std::io::Error::other(e)))?,
        None => Default::default(),
    };
    Connection::connect_with_config(url, properties, config, lapin::runtime::default_runtime()?)
        .await
}

fn tls_config(tls: &crate::tls::TlsSettings) -> Result<lapin::tcp::OwnedTLSConfig, String> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let cert_chain = match &tls.ca_file {
        Some(path) => Some(String::from_utf8_lossy(&read(path)?).into_owned()),
        None => None,
    };
    let identity = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some(lapin::tcp::OwnedIdentity::PKCS8 {
            pem: read(cert)?,
            key: read(key)?,
        }),
        _ => None,
    };
    Ok(lapin::tcp::OwnedTLSConfig {
        identity,
        cert_chain,
    })
}

/// The queue as it is, changing nothing (declare-ok carries the ready count).
pub(super) async fn passive_declare(
    channel: &Channel,
    queue: &str,
) -> Result<lapin::Queue, lapin::Error> {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
}

/// What a queue holds, as a passive declare tells it: nothing is consumed, declared or
/// changed. Messages delivered to consumers and not yet acknowledged are not in `ready`;
/// AMQP itself has no way to count them (RabbitMQ's management API has).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepth {
    pub ready: u32,
    pub consumers: u32,
}

/// Reads the queue's depth without touching its messages (for `sluice plan`).
pub async fn inspect(settings: &AmqpSettings) -> Result<QueueDepth, SourceError> {
    let url = settings.url.clone().unwrap_or_default();
    let queue = settings.queue.clone().unwrap_or_default();
    let tls = settings.tls.as_ref();
    let connection = answered(connect(&url, tls, ConnectionProperties::default()))
        .await
        .map_err(AmqpError)?;
    let depth = answered(async {
        let channel = connection.create_channel().await?;
        let q = passive_declare(&channel, &queue).await?;
        Ok::<_, lapin::Error>(QueueDepth {
            ready: q.message_count(),
            consumers: q.consumer_count(),
        })
    })
    .await;
    let _ = answered(connection.close(200, "sluice plan done".into())).await;
    depth.map_err(|e| SourceError::Other(format!("amqp: queue {queue:?}: {e}")))
}
