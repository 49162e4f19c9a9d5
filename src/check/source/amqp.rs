//! `sluice check` on an AMQP queue: the broker reached (TLS verified), the queue there.

pub(super) async fn queue(
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
