//! `sluice leases`: the lease pool as stored (`leases resize` changes its definition),
//! and joining it when a run starts.

use std::sync::Arc;

use clap::{Args, Subcommand};

use super::{ConfigArgs, EXIT_CONFIG, EXIT_RUNTIME, ReportArgs, load};
use crate::config::{LeasesSettings, Overrides};
use crate::control::lease_table::{LeaseTable, PoolDefinition, WorkerLimits};
use crate::lease::keeper::{Joining, LeaseKeeper};
use crate::lease::postgres::PgLeaseStore;
use crate::lease::redis::{RedisLeaseStore, is_redis_url};
use crate::lease::{LeaseError, LeaseStore, check_definition, member_id};
use crate::settings::bounds::rate_problem;
use crate::stats::Stats;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct LeasesArgs {
    #[command(flatten)]
    report: ReportArgs,
    #[command(subcommand)]
    action: Option<LeasesAction>,
}

#[derive(Debug, Subcommand)]
enum LeasesAction {
    /// Change the pool's capacity and/or partitions for every worker sharing it. Workers
    /// give back their leases of the old size at their next round and take new ones once
    /// no old lease is left, so old and new never add up. Then set the same values in
    /// every worker's configuration: a worker whose [leases] differ refuses to start.
    Resize(ResizeArgs),
}

#[derive(Debug, Args)]
struct ResizeArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The pool's new capacity, records per second (default: unchanged).
    #[arg(long, value_name = "REC_PER_S")]
    capacity: Option<f64>,
    /// The number of leases it is cut into (default: unchanged).
    #[arg(long, value_name = "N")]
    partitions: Option<u32>,
}

/// `sluice leases [resize]`.
pub(super) async fn command(args: LeasesArgs) -> u8 {
    match args.action {
        Some(LeasesAction::Resize(resize_args)) => resize(resize_args).await,
        None => show(args.report).await,
    }
}

/// The lease store; `read_only` (inspection commands) creates no table: a pool whose
/// tables do not exist yet reads as empty.
pub(super) async fn lease_store(
    l: &LeasesSettings,
    read_only: bool,
) -> Result<Arc<dyn LeaseStore>, LeaseError> {
    if l.by_assignment() {
        return Err(LeaseError::fatal(
            "store = \"kafka\" keeps no leases: the capacity follows the consumer group's assignment",
        ));
    }
    if is_redis_url(&l.store) {
        return Ok(Arc::new(if read_only {
            RedisLeaseStore::open_existing(&l.store, &l.pool, l.ttl)?
        } else {
            RedisLeaseStore::new(&l.store, &l.pool, l.ttl)?
        }));
    }
    let store = if read_only {
        PgLeaseStore::open_existing(&l.store, &l.pool, l.ttl).await?
    } else {
        PgLeaseStore::new(&l.store, &l.pool, l.ttl)?
    };
    Ok(Arc::new(store))
}

/// A worker's lease pool as it starts: joined (the definition is the stored one), or
/// still to join because the store was busy (the definition is the configured one until
/// the store answers).
pub(super) struct StartingPool {
    pub store: Arc<dyn LeaseStore>,
    pub definition: PoolDefinition,
    pub joining: Option<Joining>,
}

/// Connects to the lease store and checks this worker's [leases] against the pool's stored
/// definition (storing it if the pool has none): exit 2 if they differ, or if the store
/// refuses this worker for good (credentials, database, privilege). A busy or unreachable
/// store is an outage: the worker starts without leases and joins when it answers.
pub(super) async fn join_pool(l: &LeasesSettings) -> Result<StartingPool, u8> {
    let store = lease_store(l, false).await.map_err(|e| {
        say!("sluice: {e}");
        EXIT_CONFIG
    })?;
    let definition = match store.define(l.capacity, l.partitions).await {
        Ok(d) => d,
        Err(e) if e.fatal => {
            say!("sluice: {e}");
            return Err(EXIT_CONFIG);
        }
        Err(e) => {
            store.rest().await;
            tracing::warn!(
                "{e}; starting without leases (reserved rate), joining the pool when the store answers"
            );
            return Ok(StartingPool {
                store,
                definition: PoolDefinition {
                    capacity: l.capacity,
                    partitions: l.partitions,
                    generation: 0,
                },
                joining: Some(Joining {
                    pool: l.pool.clone(),
                    capacity: l.capacity,
                    partitions: l.partitions,
                }),
            });
        }
    };
    store.rest().await;
    check_definition(&l.pool, l.capacity, l.partitions, &definition).map_err(|e| {
        say!("sluice: bad configuration: {e}");
        EXIT_CONFIG
    })?;
    Ok(StartingPool {
        store,
        definition,
        joining: None,
    })
}

/// How often a worker heartbeats when it needs nothing else of the store. One holding
/// leases talks to the store at its renewals (every third of the ttl), which heartbeat
/// too; one holding none heartbeats every 37–50% of the ttl (the period, jittered), well
/// within the ttl that keeps it an active member.
fn heartbeat_period(ttl: std::time::Duration) -> std::time::Duration {
    ttl / 2
}

pub(super) struct KeeperSettings {
    pub ceiling: Option<f64>,
    pub tick: std::time::Duration,
    pub outage: crate::control::backoff::Backoff,
}

pub(super) fn lease_keeper(
    l: &LeasesSettings,
    pool: StartingPool,
    settings: KeeperSettings,
    rate: crate::control::target_rate::TargetRate,
    stats: Arc<Stats>,
) -> LeaseKeeper {
    let KeeperSettings {
        ceiling,
        tick,
        outage,
    } = settings;
    let definition = pool.definition;
    // A round at least twice per safety margin, minus a tick for the rate to apply.
    let interval =
        std::time::Duration::from_millis(500).min((l.ttl / 20).saturating_sub(tick).max(tick));
    // A lease stopped being used at the keeper's round; the pipeline applies the rate at
    // its next tick; its records count in the sink's second after that.
    let second = crate::control::peak_usage::SPAN;
    let table = LeaseTable::new(
        definition,
        WorkerLimits {
            reserved: l.reserved,
            ceiling,
            ttl: l.ttl,
            idle_grace: l.idle_grace,
            last_use: interval + tick + second,
        },
    );
    let member = member_id();
    tracing::info!(
        pool = %l.pool,
        %member,
        generation = definition.generation,
        "sharing {} rec/s in {} leases{}",
        definition.capacity,
        definition.partitions,
        ceiling.map_or(String::new(), |c| format!(", using at most {c} rec/s (rate.records_per_second)"))
    );
    LeaseKeeper::new(
        pool.store,
        table,
        member,
        rate,
        stats,
        interval,
        heartbeat_period(l.ttl),
        outage,
        pool.joining,
    )
    .releasing_after(tick + second)
}

/// `sluice leases resize`: a new definition (and generation) for the pool.
async fn resize(args: ResizeArgs) -> u8 {
    let (config, origin) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(l) = &config.leases else {
        say!("sluice: {origin} has no [leases] section");
        return EXIT_CONFIG;
    };
    if l.by_assignment() {
        say!(
            "sluice: store = \"kafka\" keeps no pool definition to resize: set leases.capacity in every worker's configuration and restart them (each topic partition is read by one worker, so during the restart the sink sees at most the larger of the old and new capacity)"
        );
        return EXIT_CONFIG;
    }
    if args.capacity.is_none() && args.partitions.is_none() {
        say!("sluice: leases resize needs --capacity and/or --partitions");
        return EXIT_CONFIG;
    }
    // The bounds leases.capacity and leases.partitions are held to in the configuration:
    // every worker of the pool reads what is stored here.
    if let Some(problem) = args.capacity.and_then(|c| rate_problem(c, false)) {
        say!("sluice: --capacity {problem}");
        return EXIT_CONFIG;
    }
    if args
        .partitions
        .is_some_and(|p| !(1..=crate::config::MAX_PARTITIONS).contains(&p))
    {
        say!(
            "sluice: --partitions must be between 1 and {}",
            crate::config::MAX_PARTITIONS
        );
        return EXIT_CONFIG;
    }
    // A deliberate change: the tables are created if this is the pool's first definition.
    let store = match lease_store(l, false).await {
        Ok(s) => s,
        Err(e) => {
            say!("sluice: {e}");
            return EXIT_RUNTIME;
        }
    };
    let old = match store.definition().await {
        Ok(d) => d,
        Err(e) => {
            say!("sluice: {e}");
            return EXIT_RUNTIME;
        }
    };
    let base = old.unwrap_or(PoolDefinition {
        capacity: l.capacity,
        partitions: l.partitions,
        generation: 0,
    });
    let capacity = args.capacity.unwrap_or(base.capacity);
    let partitions = args.partitions.unwrap_or(base.partitions);
    if old.is_some_and(|d| d.capacity == capacity && d.partitions == partitions) {
        say!(
            "sluice: pool {:?} is already {capacity} rec/s in {partitions} leases; nothing changed",
            l.pool
        );
        return 0;
    }
    match store.resize(capacity, partitions).await {
        Ok(new) => {
            say!(
                "sluice: pool {:?}: {} rec/s in {} leases -> {} rec/s in {} leases (generation {}). \
                 Running workers give back their old leases at their next round; new ones are \
                 granted once no old lease is left (within the ttl, {:?}). Set leases.capacity = {} \
                 and leases.partitions = {} in every worker's configuration: a worker started \
                 with other values refuses to.",
                l.pool,
                base.capacity,
                base.partitions,
                new.capacity,
                new.partitions,
                new.generation,
                l.ttl,
                new.capacity,
                new.partitions
            );
            0
        }
        Err(e) => {
            say!("sluice: {e}");
            EXIT_RUNTIME
        }
    }
}

async fn show(args: ReportArgs) -> u8 {
    let (config, origin) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(l) = &config.leases else {
        say!("sluice: {origin} has no [leases] section");
        return EXIT_CONFIG;
    };
    let store = match lease_store(l, true).await {
        Ok(s) => s,
        Err(e) => {
            say!("sluice: {e}");
            return EXIT_RUNTIME;
        }
    };
    let (leases, members, stored) = match (
        store.leases().await,
        store.members().await,
        store.definition().await,
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            say!("sluice: {e}");
            return EXIT_RUNTIME;
        }
    };
    // The store's definition is the pool's; the file's only until a worker stored it.
    let (capacity, partitions, generation) = match stored {
        Some(d) => (d.capacity, d.partitions, Some(d.generation)),
        None => (l.capacity, l.partitions, None),
    };
    if args.json {
        let doc = serde_json::json!({
            "pool": l.pool, "capacity": capacity, "partitions": partitions,
            "generation": generation, "leases": leases, "members": members,
        });
        out!("{doc}");
        return 0;
    }
    let per = capacity / f64::from(partitions);
    out!(
        "pool {}: {} rec/s in {} partitions of {per:.1} rec/s ({})",
        l.pool,
        capacity,
        partitions,
        generation.map_or("not yet stored".to_string(), |g| format!("generation {g}"))
    );
    if stored.is_some_and(|d| check_definition(&l.pool, l.capacity, l.partitions, &d).is_err()) {
        say!(
            "sluice: {origin} differs from the stored definition: workers started with it refuse to start"
        );
    }
    out!("{:>9}  {:<40} {:>12}", "partition", "holder", "expires in");
    for p in 0..partitions {
        match leases
            .iter()
            .find(|r| r.partition == p && r.expires_in_s > 0.0)
        {
            Some(r) => out!("{p:>9}  {:<40} {:>11.1}s", r.holder, r.expires_in_s),
            None => out!("{p:>9}  {:<40} {:>12}", "(free)", "-"),
        }
    }
    out!("members:");
    for m in &members {
        out!(
            "  {:<40} holds {:>3}  wants more: {:<5}  seen {:.1}s ago",
            m.member,
            m.held,
            m.wants_more,
            m.last_seen_s
        );
    }
    0
}
