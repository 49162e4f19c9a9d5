//! Storing a batch's dead letters, which must happen before the batch is acknowledged.

use std::sync::atomic::Ordering::Relaxed;

use super::{Delivery, FatalSinkError};
use crate::record::DeadLetter;
use crate::sink::WriteOutcome;
use crate::stats::Stats;

impl Delivery {
    /// Dead letters must be stored before the batch is acknowledged; their table takes
    /// anything, so only an outage or a fatal error can stand in the way. A store that keeps
    /// failing is an outage: retried without limit, the worker not ready meanwhile.
    pub(super) async fn store_dead_letters(
        &self,
        dead: &[DeadLetter],
    ) -> Result<(), FatalSinkError> {
        if dead.is_empty() {
            return Ok(());
        }
        let mut attempt = 0;
        let outcome = loop {
            match self.sink.dead_letter(dead).await {
                WriteOutcome::Written { .. }
                | WriteOutcome::SkippedBySink { .. }
                | WriteOutcome::Upserted { .. } => {
                    Stats::add(&self.stats.dead_lettered, dead.len() as u64);
                    break Ok(());
                }
                WriteOutcome::Fatal(reason)
                | WriteOutcome::Unexplained(reason)
                | WriteOutcome::Unreadable(reason)
                | WriteOutcome::Rejected { reason, .. } => {
                    break Err(FatalSinkError(format!(
                        "cannot store dead letters: {reason}"
                    )));
                }
                WriteOutcome::Items { .. } => {
                    break Err(FatalSinkError(
                        "cannot store dead letters: the store took only some of them".into(),
                    ));
                }
                WriteOutcome::Throttled { reason, .. }
                | WriteOutcome::Unavailable(reason)
                | WriteOutcome::ServerError(reason)
                | WriteOutcome::Transient(reason) => {
                    if attempt == 0 {
                        self.stats.dead_letter_outages.fetch_add(1, Relaxed);
                    }
                    attempt += 1;
                    Stats::add(&self.stats.retries, 1);
                    let wait = self.backoff.delay(attempt, &mut rand::rng());
                    tracing::warn!(
                        letters = dead.len(),
                        ?wait,
                        "storing dead letters failed, retrying; their records stay unacknowledged: {reason}"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        };
        if attempt > 0 {
            self.stats.dead_letter_outages.fetch_sub(1, Relaxed);
        }
        outcome
    }
}
