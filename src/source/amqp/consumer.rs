//! The queue consumer: the [`Source`] that takes deliveries within the prefetch it sizes,
//! acknowledges settled ones and reconnects with backoff.

use std::time::Duration;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties, Consumer};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::broker::{ANSWER_WITHIN, answered, connect, passive_declare};
use super::headers::header_list;
use super::settings;
use crate::control::backoff::Backoff;
use crate::record::{Position, Record, SourceContext};
use crate::source::watermark::Watermark;
use crate::source::{Backlog, Pulled, Source, SourceError};

/// How long a pull waits for the first delivery when none is buffered.
const FIRST_DELIVERY_WAIT: Duration = Duration::from_millis(50);
/// How often an idle pull asks the broker whether the queue is empty.
const EMPTY_CHECK_EVERY: Duration = Duration::from_millis(500);
pub struct AmqpSource {
    url: String,
    tls: Option<crate::tls::TlsSettings>,
    queue: String,
    declare: bool,
    max_record_bytes: usize,
    prefetch: u16,
    live: Option<Live>,
    /// Bumped on every new channel: delivery tags of an older channel are void, and acks
    /// for them are dropped (the broker redelivers those messages).
    epoch: i32,
    watermark: Watermark,
    backoff: Backoff,
    failures: u32,
    reconnect_at: Option<Instant>,
    empty_checked: Option<(Instant, u32)>,
    /// `--until-empty`: the messages ready when the run began, taken at the first connect
    /// before consuming. The run takes no more than that (the broker queues in order, so
    /// they are the ones there at start); each worker on a queue counts the whole depth.
    bound: Option<u64>,
    /// Whether to take that bound at the first connect.
    bounded: bool,
    /// Messages acknowledged in this run, each counted once (an ack of a channel since
    /// lost is void: the message comes again and counts then).
    settled: u64,
    /// Of those, acknowledged on the current channel.
    settled_here: u64,
    /// Ready messages after close handed back what was not settled.
    left_at_close: Option<u64>,
}

struct Live {
    connection: Connection,
    channel: Channel,
    consumer: Consumer,
}

#[derive(Debug, thiserror::Error)]
#[error("amqp: {0}")]
pub(super) struct AmqpError(#[from] pub(super) lapin::Error);

impl From<AmqpError> for SourceError {
    fn from(e: AmqpError) -> Self {
        match crate::tls::certificate_refused(&e.0) {
            Some(why) => SourceError::Other(format!("amqp: TLS handshake failed: {why}")),
            None => SourceError::Other(e.to_string()),
        }
    }
}

impl AmqpSource {
    /// Connects once so that a wrong URL or a missing queue is reported at start.
    pub async fn open(
        settings: &settings::AmqpSettings,
        opening: &crate::source::Opening,
        bounded: bool,
    ) -> Result<Self, SourceError> {
        let url = settings.url.clone().unwrap_or_default();
        let queue = settings.queue.clone().unwrap_or_default();
        let mut source = AmqpSource {
            url,
            tls: settings.tls.clone(),
            queue,
            declare: settings.declare,
            max_record_bytes: settings.max_record_bytes,
            prefetch: prefetch_for(opening.held),
            live: None,
            epoch: 0,
            watermark: Watermark::new(1),
            backoff: opening.reconnect.clone(),
            failures: 0,
            reconnect_at: None,
            empty_checked: None,
            bound: None,
            bounded,
            settled: 0,
            settled_here: 0,
            left_at_close: None,
        };
        source.connect().await?;
        Ok(source)
    }

    async fn connect(&mut self) -> Result<(), AmqpError> {
        answered(self.handshake()).await.map_err(AmqpError)
    }

    async fn handshake(&mut self) -> Result<(), lapin::Error> {
        // Named after the queue, so an operator (and `rabbitmqctl list_connections`) can
        // tell which worker a connection belongs to.
        let properties = ConnectionProperties::default()
            .with_connection_name(format!("sluice: {}", self.queue).into());
        let connection = connect(&self.url, self.tls.as_ref(), properties).await?;
        let channel = connection.create_channel().await?;
        if self.declare {
            channel
                .queue_declare(
                    self.queue.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await?;
        }
        if self.bounded && self.bound.is_none() {
            let ready = passive_declare(&channel, &self.queue)
                .await?
                .message_count();
            tracing::info!(
                queue = %self.queue,
                "taking the {ready} messages ready now; later ones are left for the next run"
            );
            self.bound = Some(u64::from(ready));
        }
        channel
            .basic_qos(self.prefetch, BasicQosOptions { global: true })
            .await?;
        let consumer = channel
            .basic_consume(
                self.queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        self.epoch += 1;
        self.settled_here = 0;
        self.watermark = Watermark::new(1);
        self.live = Some(Live {
            connection,
            channel,
            consumer,
        });
        self.failures = 0;
        self.reconnect_at = None;
        Ok(())
    }

    /// Forgets the broken connection; the next pull reconnects after a backoff.
    fn lost(&mut self, why: impl std::fmt::Display) {
        if let Some(bound) = &mut self.bound {
            // Acks sent just before the loss may never have reached the broker: those
            // messages come again and would be counted twice. At most a prefetch of them
            // was unacked, so the bound grows by that much at most (a few later messages
            // may be taken; none of those there at start is left behind).
            *bound += self.settled_here.min(u64::from(self.prefetch));
            self.settled_here = 0;
        }
        if self.live.take().is_some() {
            tracing::warn!(
                "amqp connection lost ({why}); reconnecting, unacked messages will be redelivered"
            );
        }
        self.failures += 1;
        let wait = self.backoff.delay(self.failures, &mut rand::rng());
        self.reconnect_at = Some(Instant::now() + wait);
    }

    /// Reconnects if it is time; true when a live channel is there.
    async fn ensure_live(&mut self) -> bool {
        if self.live.is_some() {
            return true;
        }
        if self.reconnect_at.is_some_and(|t| Instant::now() < t) {
            return false;
        }
        match self.connect().await {
            Ok(()) => {
                tracing::info!(
                    "amqp connection re-established (channel epoch {})",
                    self.epoch
                );
                true
            }
            Err(e) => {
                self.lost(e);
                false
            }
        }
    }

    fn record(&mut self, delivery: lapin::message::Delivery) -> Record {
        let tag = delivery.delivery_tag;
        self.watermark.pulled(tag, tag + 1);
        let id = match delivery.properties.message_id() {
            Some(id) if !id.as_str().is_empty() => id.to_string(),
            _ => format!(
                "sha256:{}",
                hex::encode(&Sha256::digest(&delivery.data)[..16])
            ),
        };
        let context = SourceContext {
            key: None,
            headers: delivery
                .properties
                .headers()
                .as_ref()
                .map_or_else(Vec::new, header_list),
            tombstone: false,
        };
        let mut payload = delivery.data;
        // Cut here, as the other sources do: the decoder dead-letters it with the reason.
        let oversize = (payload.len() > self.max_record_bytes).then(|| {
            let len = payload.len() as u64;
            payload.truncate(self.max_record_bytes);
            payload.shrink_to_fit();
            len
        });
        Record {
            position: Position {
                lane: self.epoch,
                start: tag,
                end: tag + 1,
            },
            origin: format!("{}/{}", self.queue, id),
            fallback_key: id,
            payload,
            oversize,
            undecodable: None,
            context,
        }
    }

    /// Messages ready in the queue (not counting those delivered and unacked).
    async fn ready(&mut self) -> Result<u32, AmqpError> {
        let Some(live) = &self.live else {
            return Ok(u32::MAX);
        };
        Ok(answered(passive_declare(&live.channel, &self.queue))
            .await?
            .message_count())
    }

    /// Messages of the start bound still to be taken (not counting those in flight);
    /// None without a bound.
    fn bound_left(&self) -> Option<u64> {
        let bound = self.bound?;
        Some(bound.saturating_sub(self.settled + self.watermark.outstanding() as u64))
    }
}

fn prefetch_for(records: usize) -> u16 {
    records.clamp(1, usize::from(u16::MAX)) as u16
}

#[async_trait]
impl Source for AmqpSource {
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError> {
        if !self.ensure_live().await {
            return Ok(Pulled::default());
        }
        let max = match self.bound_left() {
            Some(0) => {
                // Everything there at start is taken: done once it is settled.
                return Ok(Pulled {
                    records: Vec::new(),
                    caught_up: self.watermark.outstanding() == 0,
                });
            }
            Some(left) => max.min(usize::try_from(left).unwrap_or(usize::MAX)),
            None => max,
        };
        let mut records = Vec::with_capacity(max.min(4096));
        let mut broken = None;
        {
            let live = self.live.as_mut().expect("live");
            let first = tokio::time::timeout(FIRST_DELIVERY_WAIT, live.consumer.next()).await;
            let mut next = first.ok();
            let mut deliveries = Vec::new();
            while let Some(item) = next.take() {
                match item {
                    Some(Ok(d)) => deliveries.push(d),
                    Some(Err(e)) => {
                        broken = Some(e.to_string());
                        break;
                    }
                    None => {
                        broken = Some("consumer cancelled by the broker".to_string());
                        break;
                    }
                }
                if deliveries.len() >= max {
                    break;
                }
                next = live.consumer.next().now_or_never();
            }
            for d in deliveries {
                records.push(self.record(d));
            }
        }
        if let Some(why) = broken {
            self.lost(why);
            return Ok(Pulled {
                records,
                caught_up: false,
            });
        }
        let mut caught_up = false;
        if records.is_empty() {
            let fresh = self
                .empty_checked
                .is_some_and(|(at, _)| at.elapsed() < EMPTY_CHECK_EVERY);
            let ready = match (fresh, self.empty_checked) {
                (true, Some((_, n))) => n,
                _ => match self.ready().await {
                    Ok(n) => {
                        self.empty_checked = Some((Instant::now(), n));
                        n
                    }
                    Err(e) => {
                        self.lost(e);
                        return Ok(Pulled::default());
                    }
                },
            };
            caught_up = ready == 0;
        }
        Ok(Pulled { records, caught_up })
    }

    async fn ack(&mut self, positions: &[Position]) -> Result<(), SourceError> {
        let mut upto = None;
        for p in positions.iter().filter(|p| p.lane == self.epoch) {
            self.settled += 1;
            self.settled_here += 1;
            if let Some(committed) = self.watermark.ack(p.start) {
                upto = Some(committed);
            }
        }
        let (Some(committed), Some(live)) = (upto, &self.live) else {
            return Ok(());
        };
        let result = answered(
            live.channel
                .basic_ack(committed - 1, BasicAckOptions { multiple: true }),
        )
        .await;
        if let Err(e) = result {
            self.lost(e);
        }
        Ok(())
    }

    async fn backlog(&mut self) -> Result<Backlog, SourceError> {
        match self.ready().await {
            Ok(u32::MAX) => Ok(Backlog::Unknown),
            Ok(n) => Ok(Backlog::Records(u64::from(n))),
            Err(e) => {
                self.lost(&e);
                Ok(Backlog::Unknown)
            }
        }
    }

    fn is_up(&self) -> bool {
        self.live.is_some()
    }

    async fn set_prefetch(&mut self, records: usize) -> Result<(), SourceError> {
        let prefetch = prefetch_for(records);
        if prefetch == self.prefetch {
            return Ok(());
        }
        self.prefetch = prefetch;
        if let Some(live) = &self.live
            && let Err(e) = answered(
                live.channel
                    .basic_qos(prefetch, BasicQosOptions { global: true }),
            )
            .await
        {
            self.lost(e);
        }
        Ok(())
    }

    async fn close(&mut self, _drained: bool) -> Result<(), SourceError> {
        let Some(live) = self.live.take() else {
            return Ok(());
        };
        // Hand back what was delivered but not settled, then leave politely.
        let queue = self.queue.clone();
        let goodbye = async {
            let tag = live.consumer.tag();
            let _ = live
                .channel
                .basic_cancel(tag.as_str().into(), BasicCancelOptions::default())
                .await;
            let _ = live
                .channel
                .basic_nack(
                    0,
                    BasicNackOptions {
                        multiple: true,
                        requeue: true,
                    },
                )
                .await;
            // Counted on a fresh channel once this one is closed: the broker has requeued
            // all it held then, whereas a count on it right after the nack missed the
            // messages being handed back (50 of 300 with 250 prefetched and unsettled).
            let _ = live.channel.close(200, "sluice done".into()).await;
            let left = match live.connection.create_channel().await {
                Ok(channel) => passive_declare(&channel, &queue)
                    .await
                    .ok()
                    .map(|q| u64::from(q.message_count())),
                Err(_) => None,
            };
            let _ = live.connection.close(200, "sluice done".into()).await;
            left
        };
        self.left_at_close = match tokio::time::timeout(ANSWER_WITHIN, goodbye).await {
            Ok(left) => left,
            Err(_) => {
                // Dropping the connection hands back the unsettled messages all the same.
                tracing::warn!(
                    "amqp: no answer from the broker within {ANSWER_WITHIN:?} while leaving; \
                     what this worker held unsettled goes back to the queue with its connection"
                );
                None
            }
        };
        Ok(())
    }

    /// What the next run reads: the messages ready once this worker's unsettled ones are
    /// back in the queue (messages other consumers hold unacked are not included: AMQP
    /// cannot count them); None when the connection was lost at the end.
    async fn remaining(&mut self) -> Option<u64> {
        self.left_at_close
    }
}
