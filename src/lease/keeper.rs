//! Keeps this worker's leases: heartbeats, renews before expiry, acquires while there is
//! demand (at jittered intervals so workers do not stampede), gives back what exceeds the
//! fair share, what it cannot use, what sits idle and what belongs to an old definition of
//! the pool, and sets the pipeline's rate to what it holds. The decisions are the
//! [`LeaseTable`]'s; this only carries them out. If the store
//! cannot be reached, leases lapse at their local deadlines and the rate falls to the
//! reserved rate until the store answers again.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use rand::RngExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::LeaseStore;
use crate::control::lease_table::{LeaseTable, PoolView};
use crate::control::target_rate::TargetRate;
use crate::stats::Stats;
use tokio_util::sync::CancellationToken;

pub struct LeaseKeeper {
    store: Arc<dyn LeaseStore>,
    table: LeaseTable,
    member: String,
    rate: TargetRate,
    stats: Arc<Stats>,
    /// Longest pause between two rounds.
    interval: Duration,
}

impl LeaseKeeper {
    pub fn new(
        store: Arc<dyn LeaseStore>,
        table: LeaseTable,
        member: String,
        rate: TargetRate,
        stats: Arc<Stats>,
        interval: Duration,
    ) -> Self {
        LeaseKeeper {
            store,
            table,
            member,
            rate,
            stats,
            interval,
        }
    }

    pub fn spawn(self, shutdown: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(self.run(shutdown))
    }

    async fn run(mut self, shutdown: CancellationToken) {
        let mut store_down = false;
        self.rate.set(self.table.rate(Instant::now()));
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
            let held = self.table.held(now).len() as u32;
            let pool = match self.store.heartbeat(&self.member, held, wants_more).await {
                Ok(view) => {
                    if store_down {
                        tracing::info!("lease store reachable again");
                        store_down = false;
                    }
                    view
                }
                Err(e) => {
                    if !store_down {
                        tracing::warn!(
                            "{e}; leases lapse at their deadlines, rate falls to the reserved rate"
                        );
                        store_down = true;
                    }
                    // Nothing to acquire, but renewals are still worth a try below.
                    PoolView {
                        active_members: 1,
                        other_waiting: false,
                        free: 0,
                        definition: self.table.definition(),
                    }
                }
            };
            let generation = self.table.definition().generation;
            let plan = self.table.plan(now, pool);
            if self.table.definition().generation != generation {
                let d = self.table.definition();
                tracing::info!(
                    generation = d.generation,
                    "the pool was resized to {} rec/s in {} leases; leases of the old size given back",
                    d.capacity,
                    d.partitions
                );
            }
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
            if !plan.renew.is_empty() && !store_down {
                let sent = Instant::now();
                match self.store.renew(&self.member, &plan.renew).await {
                    Ok(kept) => self.table.renewed(&plan.renew, &kept, sent),
                    Err(e) => tracing::debug!("renewal failed: {e}"),
                }
            }
            if plan.acquire && !store_down {
                let sent = Instant::now();
                let generation = self.table.definition().generation;
                match self.store.acquire(&self.member, generation).await {
                    Ok(Some(p)) => {
                        self.table.granted(p, sent);
                        tracing::debug!(partition = p, "lease acquired");
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!("acquire failed: {e}"),
                }
            }
            self.table.expire(Instant::now());
            self.rate.set(self.table.rate(Instant::now()));
            self.stats
                .leases_held
                .store(self.table.held(Instant::now()).len() as u64, Relaxed);
        }
        self.rate.set(0.0);
        if let Err(e) = self.store.leave(&self.member).await {
            tracing::debug!("leaving the pool failed (leases will expire): {e}");
        }
    }
}
