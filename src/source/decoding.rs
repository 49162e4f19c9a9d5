//! A source whose records arrive in a wire format (Avro, Protobuf, JSON Schema): hands
//! them on decoded to JSON. A record whose schema the registry cannot serve now stays here,
//! unacknowledged, with the records behind it, until the registry answers; a record that
//! cannot be decoded goes on marked, to become a dead letter.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{Backlog, Pulled, Source, SourceError};
use crate::control::backoff::Backoff;
use crate::format::MessageDecoder;
use crate::format::registry::RegistryError;
use crate::record::{Position, Record};

pub struct DecodingSource {
    inner: Box<dyn Source>,
    decoder: MessageDecoder,
    /// Pulled and not yet decoded: the registry was down when they came.
    waiting: VecDeque<Record>,
    backoff: Backoff,
    /// While the registry is down: failed attempts so far, and when to ask again.
    outage: Option<(u32, Instant)>,
}

impl DecodingSource {
    pub fn new(inner: Box<dyn Source>, decoder: MessageDecoder) -> Self {
        DecodingSource {
            inner,
            decoder,
            waiting: VecDeque::new(),
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10), 2.0),
            outage: None,
        }
    }
}

#[async_trait]
impl Source for DecodingSource {
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError> {
        if let Some((_, retry_at)) = self.outage
            && Instant::now() < retry_at
        {
            // Keeps the source's machinery served (commits, group membership) meanwhile.
            self.inner.watch().await?;
            return Ok(Pulled::default());
        }
        let mut caught_up = false;
        if self.waiting.is_empty() {
            let pulled = self.inner.pull(max).await?;
            caught_up = pulled.caught_up;
            self.waiting.extend(pulled.records);
        }
        let mut records = Vec::with_capacity(self.waiting.len().min(max));
        while records.len() < max
            && let Some(mut record) = self.waiting.pop_front()
        {
            match self.decoder.decode(&mut record).await {
                Ok(()) => records.push(record),
                Err(RegistryError::Refused(why)) => {
                    self.waiting.push_front(record);
                    return Err(SourceError::Refused(why));
                }
                Err(e) => {
                    self.waiting.push_front(record);
                    let attempts = self.outage.map_or(1, |(n, _)| n + 1);
                    let wait = self.backoff.delay(attempts, &mut rand::rng());
                    if attempts == 1 || attempts.is_power_of_two() {
                        tracing::warn!(
                            waiting = self.waiting.len(),
                            "{e}; holding the records that need it (nothing is acknowledged) and asking again in {wait:?}"
                        );
                    }
                    self.outage = Some((attempts, Instant::now() + wait));
                    self.inner.watch().await?;
                    return Ok(Pulled {
                        records,
                        caught_up: false,
                    });
                }
            }
        }
        if self.outage.take().is_some() {
            tracing::info!("the schema registry answers again");
        }
        Ok(Pulled {
            caught_up: caught_up && self.waiting.is_empty(),
            records,
        })
    }

    async fn ack(&mut self, positions: &[Position]) -> Result<(), SourceError> {
        self.inner.ack(positions).await
    }

    async fn backlog(&mut self) -> Result<Backlog, SourceError> {
        Ok(match self.inner.backlog().await? {
            Backlog::Records(n) => Backlog::Records(n + self.waiting.len() as u64),
            other => other,
        })
    }

    async fn watch(&mut self) -> Result<bool, SourceError> {
        Ok(!self.waiting.is_empty() || self.inner.watch().await?)
    }

    async fn count_backlog(&mut self) -> Result<Option<u64>, SourceError> {
        Ok(self
            .inner
            .count_backlog()
            .await?
            .map(|n| n + self.waiting.len() as u64))
    }

    fn capacity_share(&self) -> Option<f64> {
        self.inner.capacity_share()
    }

    /// Down while the registry is: `/readyz` says so.
    fn is_up(&self) -> bool {
        self.outage.is_none() && self.inner.is_up()
    }

    async fn set_prefetch(&mut self, records: usize) -> Result<(), SourceError> {
        self.inner.set_prefetch(records).await
    }

    async fn close(&mut self, drained: bool) -> Result<(), SourceError> {
        self.inner.close(drained && self.waiting.is_empty()).await
    }

    async fn remaining(&mut self) -> Option<u64> {
        self.inner.remaining().await
    }
}
