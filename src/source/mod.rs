//! Sources: where records come from. Each one pulls at most what it is asked for, so
//! nothing is held that cannot be written now, and advances its durable position only
//! over records the pipeline acknowledged.

pub mod amqp;
pub mod decoding;
pub mod file;
pub mod kafka;
pub mod settings;
pub mod watermark;

use async_trait::async_trait;

use crate::control::backoff::Backoff;
use crate::record::{Position, Record};
use settings::SourceSettings;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A file the source reads or keeps its checkpoint in, named.
    #[error("{}: {source}", path.display())]
    File {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
    /// Starting would break a rule of the setup (another group member is active):
    /// refused like bad configuration.
    #[error("{0}")]
    Refused(String),
}

/// What a pull returned.
#[derive(Debug, Default)]
pub struct Pulled {
    pub records: Vec<Record>,
    /// Nothing more is available right now: the file is at its end, the queue is drained.
    pub caught_up: bool,
}

/// How much is left, in whatever unit the source can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backlog {
    Records(u64),
    Bytes { done: u64, total: u64 },
    Unknown,
}

#[async_trait]
pub trait Source: Send {
    /// Up to `max` records that are available now (waiting briefly at most).
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError>;

    /// The records at these positions are written or dead-lettered: never deliver them again.
    async fn ack(&mut self, positions: &[Position]) -> Result<(), SourceError>;

    async fn backlog(&mut self) -> Result<Backlog, SourceError>;

    /// Called on ticks that pulled nothing (no allowance, paused, no free slot): keeps the
    /// source's own machinery served and tells whether records are waiting, without
    /// handing any out. A worker granted nothing must still learn of new records, since
    /// its backlog is what earns it capacity. False: none known (then `backlog()` tells).
    async fn watch(&mut self) -> Result<bool, SourceError> {
        Ok(false)
    }

    /// Records waiting, counted exactly even where that costs a scan (for `sluice plan`);
    /// None when the source cannot tell.
    async fn count_backlog(&mut self) -> Result<Option<u64>, SourceError> {
        Ok(match self.backlog().await? {
            Backlog::Records(n) => Some(n),
            _ => None,
        })
    }

    /// The share of a partitioned capacity this worker holds now, for sources that divide
    /// work among workers themselves (Kafka: assigned / topic partitions).
    fn capacity_share(&self) -> Option<f64> {
        None
    }

    /// Whether the source can deliver now (a queue source: connected).
    fn is_up(&self) -> bool {
        true
    }

    /// The most records the pipeline may hold unacknowledged at the current rate; a queue
    /// source bounds its broker-side prefetch by it so memory stays flat.
    async fn set_prefetch(&mut self, _records: usize) -> Result<(), SourceError> {
        Ok(())
    }

    /// Makes acknowledged progress durable and lets go of anything unacknowledged.
    /// `drained` is true when a one-shot run consumed everything.
    async fn close(&mut self, drained: bool) -> Result<(), SourceError>;

    /// What the next run will read, asked after `close` (for the summary and `/metrics`):
    /// from the durable position (checkpoint, committed offsets, the queue with the
    /// unsettled messages handed back), so records pulled and never written or
    /// dead-lettered count. None when the source cannot tell.
    async fn remaining(&mut self) -> Option<u64> {
        match self.backlog().await {
            Ok(Backlog::Records(n)) => Some(n),
            _ => None,
        }
    }
}

/// How far a run reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// On and on, waiting for new records at the end (a daemon).
    Follow,
    /// Until nothing is left, records that arrive meanwhile included
    /// (`--until-empty=caught-up`): never ends while producers outpace the sink.
    CaughtUp,
    /// The records there when the run began: the end offsets, queue depth or file size
    /// observed at start (`--until-empty`). A one-shot job always ends.
    AtStart,
}

/// How a source is opened, besides its settings: what the run and the rest of the
/// configuration ask of it.
#[derive(Debug, Clone)]
pub struct Opening {
    /// How far to read.
    pub extent: Extent,
    /// Kafka, one-shot runs: take every partition by direct assignment instead of joining
    /// the group.
    pub direct: bool,
    /// The records the pipeline may hold at once: what an AMQP prefetch starts at.
    pub held: usize,
    /// Between attempts to reconnect to a broker.
    pub reconnect: Backoff,
}

/// Opens the source `settings` describe, as `opening` says.
pub async fn open(
    settings: &SourceSettings,
    opening: &Opening,
) -> Result<Box<dyn Source>, SourceError> {
    let follow = opening.extent == Extent::Follow;
    let at_start = opening.extent == Extent::AtStart;
    match settings {
        SourceSettings::File(settings) => {
            let mut source = file::FileSource::open(settings, follow).await?;
            if at_start {
                source.bound_at_start()?;
            }
            Ok(Box::new(source))
        }
        #[cfg(feature = "amqp")]
        SourceSettings::Amqp(settings) => Ok(Box::new(
            amqp::AmqpSource::open(settings, opening, at_start).await?,
        )),
        #[cfg(feature = "kafka")]
        SourceSettings::Kafka(settings) => {
            let mut source = kafka::KafkaSource::open(settings, follow).await?;
            if at_start {
                source.bound_at_start();
            }
            if opening.direct {
                source.assign_all().await?;
            }
            with_decoder(Box::new(source), settings).await
        }
        // Refused by the settings' validation before anything opens.
        #[cfg(not(all(feature = "kafka", feature = "amqp")))]
        other => Err(SourceError::Refused(format!(
            "source.kind = {:?} is not in this build",
            other.kind()
        ))),
    }
}

/// The Kafka source as it is, or decoding its wire format; a registry that refuses the
/// credentials at start is refused like bad configuration, one that does not answer is
/// waited for when a record needs it.
#[cfg(feature = "kafka")]
async fn with_decoder(
    source: Box<dyn Source>,
    settings: &kafka::settings::KafkaSettings,
) -> Result<Box<dyn Source>, SourceError> {
    use crate::format::registry::RegistryError;
    let decoder = crate::format::MessageDecoder::new(
        &settings.value,
        &settings.key,
        settings.schema_registry.as_deref(),
    )
    .map_err(SourceError::Refused)?;
    let Some(decoder) = decoder else {
        return Ok(source);
    };
    match decoder.check_registry().await {
        // A registry without `GET /subjects` still serves schemas by id.
        Ok(()) | Err(RegistryError::Missing(_)) => {}
        Err(e @ RegistryError::Refused(_)) => return Err(SourceError::Refused(e.to_string())),
        Err(e) => tracing::warn!("{e}: starting anyway; records wait for it"),
    }
    Ok(Box::new(decoding::DecodingSource::new(source, decoder)))
}

/// The backlog as `sluice plan` reports it: records waiting, and what the count leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BacklogReport {
    pub records: Option<u64>,
    pub note: Option<String>,
}

/// Counts the backlog without consuming or acknowledging anything: a queue is inspected
/// with a passive declare (a consumer would take messages and hand them back redelivered).
pub async fn inspect_backlog(
    settings: &SourceSettings,
    opening: &Opening,
) -> Result<BacklogReport, SourceError> {
    #[cfg(feature = "amqp")]
    if let SourceSettings::Amqp(amqp) = settings {
        let depth = amqp::inspect(amqp).await?;
        return Ok(BacklogReport {
            records: Some(u64::from(depth.ready)),
            note: Some(format!(
                "ready messages only: messages delivered to consumers ({} attached) and not yet acknowledged are not included (AMQP cannot count them)",
                depth.consumers
            )),
        });
    }
    let mut source = open(settings, opening).await?;
    let records = source.count_backlog().await;
    // Closing a file source saves its checkpoint: an inspection writes nothing.
    if settings.file().is_none() {
        let _ = source.close(false).await;
    }
    Ok(BacklogReport {
        records: records?,
        note: None,
    })
}
