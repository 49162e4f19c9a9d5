//! Keeps this worker's leases: heartbeats, renews before expiry, acquires while there is
//! demand, gives back what exceeds the fair share, what it cannot use, what sits idle and
//! what belongs to an old definition of the pool, and sets the pipeline's rate to what it
//! holds. The decisions are the [`LeaseTable`]'s; this only carries them out.
//!
//! Rounds are local and frequent (deadlines, the rate); the store is contacted only when
//! [`StoreContact`] says so: a renewal or acquisition needs it, or a heartbeat period
//! passed. The connection is given back after each contact, so a worker holds none between
//! them. If the store cannot be reached — or was busy when the worker started, before it
//! could join — the worker holds no lease (its leases lapse at their local deadlines, its
//! rate is the reserved rate), says so in /readyz and the log, and tries again after the
//! outage backoff. Only what waiting cannot fix (credentials, a missing database or
//! privilege, a diverging pool definition) stops the worker.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use rand::RngExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{LeaseError, LeaseStore, check_definition};
use crate::control::backoff::Backoff;
use crate::control::lease_table::LeaseTable;
use crate::control::store_contact::StoreContact;
use crate::control::target_rate::TargetRate;
use crate::stats::Stats;
use tokio_util::sync::CancellationToken;

/// A pool this worker has yet to join: the store was busy when it started. Its
/// `[leases]` are checked against the stored definition once the store answers.
#[derive(Debug, Clone)]
pub struct Joining {
    pub pool: String,
    pub capacity: f64,
    pub partitions: u32,
}

pub struct LeaseKeeper {
    store: Arc<dyn LeaseStore>,
    table: LeaseTable,
    member: String,
    rate: TargetRate,
    stats: Arc<Stats>,
    /// Longest pause between two rounds.
    interval: Duration,
    contact: StoreContact,
    joining: Option<Joining>,
    /// Partitions the store last said were free (less what this worker took since).
    free: u32,
    /// When the store said it grants again, if it grants nothing now.
    grants_at: Option<Instant>,
}

impl LeaseKeeper {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn LeaseStore>,
        table: LeaseTable,
        member: String,
        rate: TargetRate,
        stats: Arc<Stats>,
        interval: Duration,
        heartbeat: Duration,
        outage: Backoff,
        joining: Option<Joining>,
    ) -> Self {
        LeaseKeeper {
            store,
            table,
            member,
            rate,
            stats,
            interval,
            contact: StoreContact::new(heartbeat, outage, Instant::now()),
            joining,
            free: 0,
            grants_at: None,
        }
    }

    /// Runs until `shutdown`; on an error waiting cannot fix, cancels `fatal` and returns
    /// the reason.
    pub fn spawn(
        self,
        shutdown: CancellationToken,
        fatal: CancellationToken,
    ) -> JoinHandle<Option<String>> {
        tokio::spawn(self.run(shutdown, fatal))
    }

    async fn run(
        mut self,
        shutdown: CancellationToken,
        fatal: CancellationToken,
    ) -> Option<String> {
        self.rate.set(self.table.rate(Instant::now()));
        if self.joining.is_some() {
            self.stats.set_lease_outage(Some(
                "lease store unreachable at start: not joined yet".into(),
            ));
        }
        let mut stopped_by = None;
        loop {
            // Half to all of the interval: workers started together drift apart.
            let pause = self.interval.mul_f64(rand::rng().random_range(0.5..=1.0));
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.cancelled() => break,
            }
            let now = Instant::now();
            // Writes held by the database's health (or the operator) are no demand: the
            // leases go after `idle_grace`, to workers writing elsewhere.
            let wants_more = self.table.observe(
                now,
                self.stats.pulled.load(Relaxed),
                self.stats.has_backlog() && !self.stats.held.load(Relaxed),
            );
            let needed = self.joining.is_some()
                || self.table.renewals_due(now)
                || (wants_more && self.free > 0);
            if self.contact.due(now, needed) {
                let outcome = self.talk(now, wants_more).await;
                self.store.rest().await;
                match outcome {
                    Ok(()) => self.answered(),
                    Err(e) if e.fatal => {
                        tracing::error!("{e}");
                        stopped_by = Some(e.to_string());
                        fatal.cancel();
                        break;
                    }
                    Err(e) => self.failed(e),
                }
            }
            self.table.expire(Instant::now());
            self.rate.set(self.table.rate(Instant::now()));
            self.stats
                .leases_held
                .store(self.table.held(Instant::now()).len() as u64, Relaxed);
        }
        self.rate.set(0.0);
        if self.joining.is_none() {
            if let Err(e) = self.store.leave(&self.member).await {
                tracing::debug!("leaving the pool failed (leases will expire): {e}");
            }
            self.store.rest().await;
        }
        stopped_by
    }

    fn answered(&mut self) {
        if self.contact.failures() > 0 {
            tracing::info!("lease store reachable again");
        }
        self.stats.set_lease_outage(None);
        let rng = &mut rand::rng();
        self.contact.answered(Instant::now(), rng);
        if let Some(at) = self.grants_at.take() {
            self.contact.grants_at(at, rng);
        }
    }

    fn failed(&mut self, e: LeaseError) {
        let joined = self.joining.is_none();
        if self.contact.failures() == 0 {
            if joined {
                tracing::warn!(
                    "{e}; leases lapse at their deadlines, rate falls to the reserved rate"
                );
            } else {
                tracing::warn!(
                    "{e}; not in the lease pool yet, running at the reserved rate until the store answers"
                );
            }
        }
        self.stats.set_lease_outage(Some(if joined {
            format!("lease store unreachable: {}", e.message)
        } else {
            format!("lease store unreachable at start: {}", e.message)
        }));
        let wait = self.contact.failed(Instant::now(), &mut rand::rng());
        tracing::debug!(?wait, "next attempt at the lease store");
    }

    /// One contact: joins first if the worker has not yet, then heartbeat, releases,
    /// renewals and an acquisition as the table plans them.
    async fn talk(&mut self, now: Instant, wants_more: bool) -> Result<(), LeaseError> {
        if let Some(j) = &self.joining {
            let stored = self.store.define(j.capacity, j.partitions).await?;
            check_definition(&j.pool, j.capacity, j.partitions, &stored)
                .map_err(|e| LeaseError::fatal(format!("bad configuration: {e}")))?;
            tracing::info!(
                generation = stored.generation,
                "joined the lease pool: the store answers again"
            );
            self.joining = None;
        }
        let held = self.table.held(now).len() as u32;
        let pool = self.store.heartbeat(&self.member, held, wants_more).await?;
        let generation = self.table.definition().generation;
        let plan = self.table.plan(now, pool);
        if generation != 0 && self.table.definition().generation != generation {
            let d = self.table.definition();
            tracing::info!(
                generation = d.generation,
                "the pool was resized to {} rec/s in {} leases; leases of the old size given back",
                d.capacity,
                d.partitions
            );
        }
        self.free = pool.free;
        self.grants_at = pool.grants_in.map(|d| now + d);
        if !plan.release.is_empty() {
            // Stop using them first, then tell the store.
            for p in &plan.release {
                self.table.forget(*p);
            }
            self.rate.set(self.table.rate(Instant::now()));
            if let Err(e) = self.store.release(&self.member, &plan.release).await {
                tracing::debug!("release failed (the leases will expire): {e}");
            }
        }
        if !plan.renew.is_empty() {
            let sent = Instant::now();
            match self.store.renew(&self.member, &plan.renew).await {
                Ok(kept) => self.table.renewed(&plan.renew, &kept, sent),
                Err(e) => tracing::debug!("renewal failed: {e}"),
            }
        }
        if plan.acquire {
            let sent = Instant::now();
            let generation = self.table.definition().generation;
            match self.store.acquire(&self.member, generation).await {
                Ok(Some(p)) => {
                    self.table.granted(p, sent);
                    self.free = self.free.saturating_sub(1);
                    tracing::debug!(partition = p, "lease acquired");
                }
                // Another worker won it: wait for the next heartbeat's view.
                Ok(None) => self.free = 0,
                Err(e) => tracing::debug!("acquire failed: {e}"),
            }
        }
        Ok(())
    }
}
