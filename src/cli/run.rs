//! `sluice run`: opens the source and the sink, wires the pipeline, drains, and reports
//! what was done.

use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use clap::{Args, ValueEnum};

use super::leases::{KeeperSettings, StartingPool, join_pool, lease_keeper};
use super::{ConfigArgs, EXIT_CONFIG, EXIT_RUNTIME, load};
use crate::config::{Config, Overrides, RecordsPerSecond, Unbounded};
use crate::control::cadence::Cadence;
use crate::decode::Decoder;
use crate::pipeline::clock::TokioClock;
use crate::pipeline::{Pipeline, RunOptions};
use crate::progress::Progress;
use crate::stats::{Stats, Summary};
use crate::write::{WritePath, WriteSettings};
use crate::{shutdown, sink, source};

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Exit 0 once the source is drained and everything pulled is written or
    /// dead-lettered. `start` (the default): drain what was there when the run began (end
    /// offsets, queue depth, file size), leaving later records for the next run, so the
    /// run ends even while producers outpace the sink. `caught-up`: also take what arrives
    /// meanwhile, until nothing is left.
    #[arg(long, value_enum, value_name = "WHEN", num_args = 0..=1, require_equals = true, default_missing_value = "start")]
    until_empty: Option<UntilEmpty>,
    /// Kafka, with --until-empty: read every partition of the topic by direct
    /// assignment instead of joining the consumer group (no join wait: the first rows are
    /// written within a second). Offsets are still committed to source.group, so a daemon
    /// started later resumes where this run stopped. Refused (exit 2) while another
    /// member of the group is active.
    #[arg(long)]
    direct_assignment: bool,
    /// Stop pulling this long after the start (e.g. 10m), finish the batches in flight,
    /// checkpoint and exit 0; the summary says how many records are left.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    deadline: Option<std::time::Duration>,
    /// Stop after pulling this many records.
    #[arg(long, value_name = "N")]
    max_records: Option<u64>,
    /// Print a summary of the run on stdout in this format.
    #[arg(long, value_enum, value_name = "FORMAT")]
    summary: Option<SummaryFormat>,
    /// Overrides rate.records_per_second: a number, `auto` or `off`.
    #[arg(long, value_name = "REC_PER_S|auto|off")]
    rate: Option<crate::config::RecordsPerSecond>,
    /// Overrides source.path (file source; "-" is stdin).
    #[arg(long, value_name = "PATH")]
    input: Option<PathBuf>,
    /// Overrides sink.url. A password here shows in `ps`: prefer SLUICE_SINK__URL or
    /// sink.url_file.
    #[arg(long, value_name = "URL")]
    sink_url: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum UntilEmpty {
    /// What the source held when the run began.
    Start,
    /// Until nothing is left, records arriving meanwhile included.
    CaughtUp,
}

impl RunArgs {
    fn extent(&self) -> source::Extent {
        match self.until_empty {
            None => source::Extent::Follow,
            Some(UntilEmpty::Start) => source::Extent::AtStart,
            Some(UntilEmpty::CaughtUp) => source::Extent::CaughtUp,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SummaryFormat {
    Json,
}

pub(super) async fn run(args: RunArgs) -> u8 {
    let overrides = Overrides {
        records_per_second: args.rate,
        input: args.input.clone(),
        sink_url: args.sink_url.clone(),
    };
    if let Some(url) = &args.sink_url
        && carries_secret(url)
    {
        tracing::warn!(
            "--sink-url carries a password or token, which any user can read in `ps`: set SLUICE_SINK__URL or sink.url_file instead"
        );
    }
    let (config, _) = match load(&args.config, &overrides) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if args.max_records == Some(0) {
        say!("sluice: --max-records must be at least 1");
        return EXIT_CONFIG;
    }
    if args.direct_assignment {
        if args.until_empty.is_none() {
            say!(
                "sluice: --direct-assignment is for one-shot runs (--until-empty): a daemon shares the partitions through the group"
            );
            return EXIT_CONFIG;
        }
        if config.source.kafka().is_none() {
            say!("sluice: --direct-assignment applies to a Kafka source (source.kind = \"kafka\")");
            return EXIT_CONFIG;
        }
    }
    if args.deadline.is_some_and(|d| d.is_zero()) {
        say!("sluice: --deadline must be longer than zero");
        return EXIT_CONFIG;
    }
    // Found now, not after the first rows are written and the checkpoint cannot be saved.
    if let Some(cp) = config.source.file().and_then(|f| f.checkpoint_path())
        && let Err(e) = crate::check::writable(&cp)
    {
        say!("sluice: source.checkpoint: {e}");
        return EXIT_CONFIG;
    }
    let started = tokio::time::Instant::now();
    // Join the pool before anything starts: a worker whose definition differs must not.
    let pool = match &config.leases {
        Some(l) if !l.by_assignment() => match join_pool(l).await {
            Ok(joined) => Some(joined),
            Err(code) => {
                let mut summary = Stats::default().summary(started.elapsed());
                summary.error = Some("cannot join the lease pool".into());
                return report(&args, summary, code);
            }
        },
        _ => None,
    };
    let stats = Arc::new(Stats::default());
    let (code, summary) = match drain(&args, &config, pool, stats.clone()).await {
        Ok(summary) => (0, summary),
        Err(Failure { code, message }) => {
            say!("sluice: {message}");
            let mut summary = stats.summary(started.elapsed());
            summary.error = Some(crate::redact::redact(&message));
            (code, summary)
        }
    };
    report(&args, summary, code)
}

/// Prints the summary, in every case, so that a job's log says what was done before it
/// failed; returns `code`.
fn report(args: &RunArgs, summary: Summary, code: u8) -> u8 {
    say!("sluice: {summary}");
    if let Some(SummaryFormat::Json) = args.summary {
        let json = serde_json::to_string(&summary).expect("summary serializes");
        if let Err(e) = super::write_out(format_args!("{json}")) {
            // Asked for and not delivered: the run did not do all it was asked.
            say!("sluice: cannot write the summary to standard output: {e}");
            return code.max(super::EXIT_RUNTIME);
        }
    }
    code
}

/// Why a run failed, and its exit code.
struct Failure {
    code: u8,
    message: String,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure {
            code: EXIT_RUNTIME,
            message,
        }
    }
}

/// Opens the source and sink, wires the pipeline and runs it; the error says why it
/// failed at whatever stage.
async fn drain(
    args: &RunArgs,
    config: &Config,
    pool: Option<StartingPool>,
    stats: Arc<Stats>,
) -> Result<Summary, Failure> {
    let started = tokio::time::Instant::now();
    let deadline_reached = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shutdown = shutdown::on_signals_or_deadline(
        args.deadline.map(|d| started + d),
        deadline_reached.clone(),
    );
    let mut source = source::open(
        &config.source,
        &config.opening(args.extent(), args.direct_assignment),
    )
    .await
    .map_err(|e| match e {
        source::SourceError::Refused(why) => Failure {
            code: EXIT_CONFIG,
            message: why,
        },
        e => format!("cannot open the source: {e}").into(),
    })?;
    let sink = match sink::open_when_ready(&config.sink, &config.sink_opening(), &shutdown).await {
        Ok(Some(sink)) => sink,
        Ok(None) => {
            note_remaining(source.as_mut(), &stats).await;
            let mut summary = stats.summary(started.elapsed());
            summary.deadline_reached = deadline_reached.load(std::sync::atomic::Ordering::Relaxed);
            return Ok(summary);
        }
        Err(e) => {
            note_remaining(source.as_mut(), &stats).await;
            return Err(e.to_string().into());
        }
    };
    // With leases the worker starts with its reserved rate and earns the rest.
    let initial_rate = match &config.leases {
        Some(l) if l.by_assignment() => l.reserved.max(1.0),
        Some(l) => l.reserved,
        None => config.rate.records_per_second.cadence_rate(),
    };
    let cadence = Cadence::new(initial_rate, config.rate.tick, TokioClock::default());
    tracing::info!(
        rate = initial_rate,
        per_tick = cadence.quantum(),
        tick = ?config.rate.tick,
        "draining {} into {}",
        config.source.describe(),
        config.sink.table
    );
    let mut health = crate::health::Health::new(&config.health.probe, stats.clone());
    if config.rate.records_per_second == RecordsPerSecond::Unbounded(Unbounded::Off) {
        if config.health.probe.iter().any(|p| p.target.is_some()) {
            tracing::warn!(
                "rate.records_per_second = \"off\": the probes' targets steer nothing (\"auto\" lets them)"
            );
        }
        health = health.without_steering();
    }
    let health = Arc::new(health);
    let pipeline = Pipeline::new(
        source,
        Decoder::new(config.sink.key.clone())
            .with_upsert(crate::sink::upsert::Upsert::from_config(&config.sink)),
        cadence,
        WritePath::new(sink, &WriteSettings::of(config), stats.clone()),
        stats.clone(),
        RunOptions {
            until_empty: args.until_empty.is_some(),
            max_records: args.max_records,
            max_batch: config.sink.max_batch,
            max_batch_bytes: config.sink.max_batch_bytes,
            max_in_flight: config.concurrency.max,
            grace: config.shutdown.grace,
            capacity_by_share: config
                .leases
                .as_ref()
                .filter(|l| l.by_assignment())
                .map(|l| (l.capacity, l.reserved)),
            rate_ceiling: config.rate_ceiling(),
        },
    )
    .with_health(health.clone());
    let pipeline = if config.leases.is_some() {
        pipeline.leased()
    } else {
        pipeline
    };
    let probes = crate::health::probe::spawn_all(&config.health.probe, &config.sink, &health);
    for probe in &config.health.probe {
        tracing::info!("health probe {}: {}", probe.name(), probe.describe_limits());
    }
    let keeper_shutdown = CancellationToken::new();
    let keeper_stop = keeper_shutdown.clone();
    // The keeper stops the worker when the store refuses it for good: the pipeline's token
    // is a child of the run's, cancelled by either.
    let stop = shutdown.child_token();
    let keeper_fatal = stop.clone();
    let keeper = match (&config.leases, pool) {
        (Some(l), Some(pool)) => {
            let keeper = lease_keeper(
                l,
                pool,
                KeeperSettings {
                    ceiling: config.rate_ceiling(),
                    tick: config.rate.tick,
                    outage: config.backoffs().outage,
                },
                pipeline.target_rate(),
                stats.clone(),
            );
            Some(keeper.spawn(keeper_shutdown, keeper_fatal))
        }
        _ => None,
    };
    let telemetry = match config.telemetry.listen {
        None => None,
        Some(listen) => {
            let (addr, task) = crate::telemetry::server::serve(
                listen,
                stats.clone(),
                pipeline.sink(),
                health.clone(),
                config.telemetry.token.clone(),
            )
            .await
            .map_err(|e| format!("cannot listen on {listen} (telemetry.listen): {e}"))?;
            tracing::info!("serving /metrics /healthz /readyz /control on http://{addr}");
            if config.telemetry.token.is_none() && listen.ip().is_loopback() {
                tracing::warn!(
                    "telemetry.token is not set: any local user can pause or speed up this worker through http://{addr}/control"
                );
            }
            Some(task)
        }
    };
    let progress = Progress::start(stats.clone());
    let mut result = pipeline.run(stop).await;
    progress.finish();
    let bounds = crate::lock::lock(&stats.bounded_by).bounds();
    if crate::control::bounded_by::ceiling_all_along(&bounds) {
        tracing::warn!(
            "rate.records_per_second = {} {}bounded the rate the whole run, not the sink: raise it, or set it to \"auto\" (with a canary probe for a database serving others)",
            config.rate.records_per_second,
            if config.rate_set() {
                ""
            } else {
                "(its default) "
            }
        );
    }
    for probe in probes {
        probe.abort();
    }
    if deadline_reached.load(std::sync::atomic::Ordering::Relaxed) {
        stats
            .deadline_reached
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Ok(summary) = &mut result {
            summary.deadline_reached = true;
        }
    }
    if let Some(t) = telemetry {
        t.abort();
    }
    keeper_stop.cancel();
    if let Some(k) = keeper
        && let Ok(Some(refusal)) = k.await
    {
        return Err(Failure {
            code: EXIT_CONFIG,
            message: refusal,
        });
    }
    result.map_err(|e| e.to_string().into())
}

/// A run that ends before its pipeline starts (the sink cannot be opened, or shutdown
/// came first) still says what the next run will read.
async fn note_remaining(source: &mut dyn source::Source, stats: &Stats) {
    if let Err(e) = source.close(false).await {
        tracing::warn!("closing the source: {e}");
    }
    let _ = stats.remaining.set(source.remaining().await);
}

/// Whether a URL given on the command line carries a password or a secret query value.
fn carries_secret(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| {
        u.password().is_some()
            || u.query_pairs()
                .any(|(k, _)| crate::redact::is_secret_param(&k, true))
    })
}
