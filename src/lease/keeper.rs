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
use crate::control::peak_usage::SPAN;
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
    /// Leases no longer used, and when the store may have them: once the pipeline runs at
    /// the rate without them and its last second holds nothing sent under them.
    releasing: Vec<(Instant, u32)>,
    /// How long after its last use a lease is given back.
    release_after: Duration,
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
            releasing: Vec::new(),
            release_after: SPAN,
        }
    }

    /// A lease given back goes to the store `after` its last use: the pipeline applies a
    /// lower rate at its next tick, and a lease handed on at once would let the records
    /// sent under it in the last second and the next holder's add up within one second.
    pub fn releasing_after(mut self, after: Duration) -> Self {
        self.release_after = after;
        self
    }

    /// Whether a lease given back is due at the store.
    fn release_due(&self, now: Instant) -> bool {
        self.releasing.iter().any(|(at, _)| *at <= now)
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
                || self.release_due(now)
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
            // Stop using them first, then tell the store once their last second is over.
            for p in &plan.release {
                self.table.forget(*p);
            }
            self.rate.set(self.table.rate(Instant::now()));
            let at = Instant::now() + self.release_after;
            self.releasing.extend(plan.release.iter().map(|p| (at, *p)));
        }
        let now = Instant::now();
        let due: Vec<u32> = self
            .releasing
            .extract_if(.., |(at, _)| *at <= now)
            .map(|(_, p)| p)
            .collect();
        if !due.is_empty()
            && let Err(e) = self.store.release(&self.member, &due).await
        {
            tracing::debug!("release failed (the leases will expire): {e}");
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::control::lease_table::{PoolDefinition, PoolView, WorkerLimits};
    use crate::lease::{LeaseRow, MemberRow};

    const POOL: PoolDefinition = PoolDefinition {
        capacity: 600.0,
        partitions: 6,
        generation: 1,
    };

    /// A store with the pool to itself: grants partitions in turn, renews all, and notes
    /// when leases come back.
    #[derive(Default)]
    struct Store {
        next: Mutex<u32>,
        released: Mutex<Vec<(Instant, Vec<u32>)>>,
    }

    #[async_trait]
    impl LeaseStore for Store {
        async fn define(&self, _: f64, _: u32) -> Result<PoolDefinition, LeaseError> {
            Ok(POOL)
        }
        async fn definition(&self) -> Result<Option<PoolDefinition>, LeaseError> {
            Ok(Some(POOL))
        }
        async fn resize(&self, _: f64, _: u32) -> Result<PoolDefinition, LeaseError> {
            Ok(POOL)
        }
        async fn heartbeat(&self, _: &str, _: u32, _: bool) -> Result<PoolView, LeaseError> {
            let next = *self.next.lock().unwrap();
            Ok(PoolView {
                active_members: 1,
                other_waiting: false,
                free: POOL.partitions - next.min(POOL.partitions),
                definition: POOL,
                grants_in: None,
            })
        }
        async fn acquire(&self, _: &str, _: u32) -> Result<Option<u32>, LeaseError> {
            let mut next = self.next.lock().unwrap();
            let granted = (*next < POOL.partitions).then_some(*next);
            *next += 1;
            Ok(granted)
        }
        async fn renew(&self, _: &str, partitions: &[u32]) -> Result<Vec<u32>, LeaseError> {
            Ok(partitions.to_vec())
        }
        async fn release(&self, _: &str, partitions: &[u32]) -> Result<(), LeaseError> {
            let mut released = self.released.lock().unwrap();
            released.push((Instant::now(), partitions.to_vec()));
            Ok(())
        }
        async fn leave(&self, _: &str) -> Result<(), LeaseError> {
            Ok(())
        }
        async fn leases(&self) -> Result<Vec<LeaseRow>, LeaseError> {
            Ok(Vec::new())
        }
        async fn members(&self) -> Result<Vec<MemberRow>, LeaseError> {
            Ok(Vec::new())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_given_back_reaches_the_store_a_second_and_a_tick_after_its_last_use() {
        let store = Arc::new(Store::default());
        let stats = Arc::new(Stats::default());
        let rate = TargetRate::new(0.0);
        let limits = WorkerLimits {
            reserved: 0.0,
            ceiling: None,
            ttl: Duration::from_secs(15),
            idle_grace: Duration::from_secs(3),
            last_use: Duration::from_millis(1700),
        };
        let after = SPAN + Duration::from_millis(200);
        let keeper = LeaseKeeper::new(
            store.clone(),
            LeaseTable::new(POOL, limits),
            "w".into(),
            rate.clone(),
            stats.clone(),
            Duration::from_millis(250),
            Duration::from_secs(5),
            Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 2.0),
            None,
        )
        .releasing_after(after);
        let shutdown = CancellationToken::new();
        let task = keeper.spawn(shutdown.clone(), CancellationToken::new());
        // A backlog: the worker takes leases; then none, and after the idle grace it gives
        // them all back. Each step of the rate is noted as the pipeline would see it.
        let mut seen: Vec<(Instant, f64)> = Vec::new();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(12) {
            let backlog = started.elapsed() < Duration::from_secs(4);
            stats.source_caught_up.store(!backlog, Relaxed);
            if backlog {
                stats.pulled.fetch_add(10, Relaxed);
            }
            let r = rate.get();
            if seen.last().is_none_or(|(_, last)| *last != r) {
                seen.push((Instant::now(), r));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        task.await.unwrap();
        let released = store.released.lock().unwrap().clone();
        let (last_use, _) = *seen
            .iter()
            .rfind(|(_, r)| *r == 0.0)
            .expect("the rate fell to nothing");
        assert!(
            seen.iter().any(|(_, r)| *r > 0.0),
            "leases were held: {seen:?}"
        );
        assert!(!released.is_empty(), "leases were given back: {seen:?}");
        for (at, partitions) in &released {
            assert!(
                *at >= last_use + after - Duration::from_millis(10),
                "{partitions:?} given back {:?} after the rate fell",
                at.duration_since(last_use)
            );
            assert!(
                *at <= last_use + after + Duration::from_millis(500),
                "{partitions:?} given back {:?} after the rate fell",
                at.duration_since(last_use)
            );
        }
    }
}
