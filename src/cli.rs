//! The command line: parses flags, loads the configuration, wires the pipeline, and maps
//! the outcome to exit codes (0 done, 1 runtime failure, 2 bad configuration or usage).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::backpressure::Backpressure;
use crate::config::{Config, ConfigError, ConfigOrigin, LeasesConfig, Overrides};
use crate::control::cadence::Cadence;
use crate::control::clock::TokioClock;
use crate::control::lease_table::{LeaseTable, PoolDefinition, WorkerLimits};
use crate::decode::Decoder;
use crate::delivery::Delivery;
use crate::lease::keeper::LeaseKeeper;
use crate::lease::postgres::PgLeaseStore;
use crate::lease::{LeaseError, LeaseStore, check_definition, member_id};
use crate::pipeline::{Pipeline, RunOptions};
use crate::produce::ProduceError;
use crate::progress::Progress;
use crate::stats::{Stats, Summary};
use crate::{produce, shutdown, sink, source};

/// A line for the person at the terminal, with credentials redacted.
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("{}", crate::redact::redact(&format!($($arg)*)))
    };
}

const EXIT_RUNTIME: u8 = 1;
const EXIT_CONFIG: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Drain a durable queue into a database without overrunning it"
)]
struct Cli {
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drain the source into the sink.
    Run(RunArgs),
    /// Validate the configuration and reach everything `run` needs (source, sink,
    /// dead-letter and lease stores, checkpoint directory), changing nothing.
    Check(CheckArgs),
    /// Write a commented starter configuration.
    Init(InitArgs),
    /// Show the lease pool: its definition, partitions, holders, expiries and members; or
    /// change its definition (`sluice leases resize`).
    Leases(LeasesArgs),
    /// Show the backlog, the rate this worker may use, how long the drain will take, and
    /// what the health probes read now.
    Plan(ReportArgs),
    /// Operator controls of a running worker, through its telemetry listener: pause,
    /// resume, the rate ceiling, the batch size, status. A change applies from the
    /// worker's next tick and lasts until it exits (the configuration is the truth on
    /// restart). The token is telemetry.token (or SLUICE_TELEMETRY__TOKEN).
    Ctl(CtlArgs),
    /// Emulate a capacity-limited database behind HTTP (429s, latency, outages).
    SimSink(crate::sim_sink::SimSinkArgs),
    /// Publish NDJSON lines to the configured queue, one message per line, keyed by
    /// `sink.key`; prints how many the queue confirmed.
    Produce(ProduceArgs),
    /// The configuration file itself: `sluice config schema`.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigAction {
    /// Print the JSON Schema (draft 7) of the configuration file, so editors complete and
    /// check it: `sluice config schema > sluice.schema.json`, then `#:schema
    /// ./sluice.schema.json` atop sluice.toml (Taplo, Even Better TOML).
    Schema,
}

#[derive(Debug, Args)]
struct CtlArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The worker's telemetry address, e.g. http://10.0.0.5:9898 (default: telemetry.listen).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    #[command(subcommand)]
    action: CtlAction,
}

#[derive(Debug, Subcommand)]
enum CtlAction {
    /// Hold new writes (batches in flight finish).
    Pause,
    /// Let writes go again (from a share of the rate, climbing to all of it).
    Resume,
    /// Records per second at most; "off" goes back to the configuration.
    Rate {
        #[arg(value_name = "REC_PER_S|off")]
        value: String,
    },
    /// Records per batch at most; "off" goes back to sink.max_batch.
    Batch {
        #[arg(value_name = "N|off")]
        value: String,
    },
    /// What the operator set, why writes are held, and each probe's last value.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct ProduceArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// NDJSON input; "-" reads stdin.
    #[arg(value_name = "INPUT", default_value = "-")]
    input: PathBuf,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
struct LeasesArgs {
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

#[derive(Debug, Args)]
struct ReportArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ConfigArgs {
    /// Configuration file (TOML); `SLUICE_*` environment variables override it. Without
    /// it: ./sluice.toml, the user's then the system's config directory, then the
    /// built-in default.
    #[arg(long, short)]
    config: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CheckArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// How long each probe may take.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

#[derive(Debug, Args)]
struct InitArgs {
    /// Where to write it.
    #[arg(value_name = "PATH", default_value = crate::config::origin::FILE_NAME)]
    path: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
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
    /// Overrides rate.records_per_second.
    #[arg(long, value_name = "REC_PER_S")]
    rate: Option<f64>,
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

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::logging::init(matches!(cli.log_format, LogFormat::Json));
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            say!("sluice: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    let code = match cli.command {
        Command::Run(args) => runtime.block_on(run(args)),
        Command::Check(args) => runtime.block_on(check(args)),
        Command::Init(args) => init(args),
        Command::Leases(LeasesArgs {
            action: Some(LeasesAction::Resize(args)),
            ..
        }) => runtime.block_on(resize(args)),
        Command::Leases(args) => runtime.block_on(leases(args.report)),
        Command::Plan(args) => runtime.block_on(plan(args)),
        Command::SimSink(args) => runtime.block_on(crate::sim_sink::run(args)),
        Command::Produce(args) => runtime.block_on(produce(args)),
        Command::Ctl(args) => runtime.block_on(ctl(args)),
        Command::Config {
            action: ConfigAction::Schema,
        } => print_schema(),
    };
    // Do not wait for stdin readers or lingering connections on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    ExitCode::from(code)
}

/// Prints the configuration's JSON Schema on stdout.
fn print_schema() -> u8 {
    use std::io::Write;
    let text = crate::config::schema::text();
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => 0,
        Err(e) => {
            say!("sluice: cannot write the schema: {e}");
            EXIT_RUNTIME
        }
    }
}

fn load(args: &ConfigArgs, overrides: &Overrides) -> Result<(Config, ConfigOrigin), u8> {
    let origin = ConfigOrigin::discover(args.config.as_deref());
    tracing::info!("configuration: {origin}");
    match Config::load_from(&origin, overrides) {
        Ok(config) => Ok((config, origin)),
        Err(e @ ConfigError::MissingFile(_)) => {
            say!("sluice: {e}");
            Err(EXIT_CONFIG)
        }
        Err(e) => {
            say!("sluice: bad configuration ({origin}): {e}");
            Err(EXIT_CONFIG)
        }
    }
}

async fn run(args: RunArgs) -> u8 {
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
        if config.source.kind != crate::config::SourceKind::Kafka {
            say!("sluice: --direct-assignment applies to a Kafka source (source.kind = \"kafka\")");
            return EXIT_CONFIG;
        }
    }
    if args.deadline.is_some_and(|d| d.is_zero()) {
        say!("sluice: --deadline must be longer than zero");
        return EXIT_CONFIG;
    }
    // Found now, not after the first rows are written and the checkpoint cannot be saved.
    if let Some(cp) = config.checkpoint_path()
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
            Err(EXIT_RUNTIME) => {
                let mut summary = Stats::default().summary(started.elapsed());
                summary.error = Some("cannot join the lease pool".into());
                return report(&args, summary, EXIT_RUNTIME);
            }
            Err(code) => return code,
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
        println!(
            "{}",
            serde_json::to_string(&summary).expect("summary serializes")
        );
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
    pool: Option<(Arc<dyn LeaseStore>, PoolDefinition)>,
    stats: Arc<Stats>,
) -> Result<Summary, Failure> {
    let started = tokio::time::Instant::now();
    let deadline_reached = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut shutdown = shutdown::on_signals_or_deadline(
        args.deadline.map(|d| started + d),
        deadline_reached.clone(),
    );
    let source = source::open(config, args.extent(), args.direct_assignment)
        .await
        .map_err(|e| match e {
            source::SourceError::Refused(why) => Failure {
                code: EXIT_CONFIG,
                message: why,
            },
            e => format!("cannot open the source: {e}").into(),
        })?;
    let Some(sink) = sink::open_when_ready(config, &mut shutdown)
        .await
        .map_err(|e| e.to_string())?
    else {
        let mut summary = stats.summary(started.elapsed());
        summary.deadline_reached = deadline_reached.load(std::sync::atomic::Ordering::Relaxed);
        return Ok(summary);
    };
    // With leases the worker starts with its reserved rate and earns the rest.
    let initial_rate = match &config.leases {
        Some(l) if l.by_assignment() => l.reserved.max(1.0),
        Some(l) => l.reserved,
        None => config.rate.records_per_second,
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
    let health = Arc::new(crate::health::Health::new(
        &config.health.probe,
        stats.clone(),
    ));
    let pipeline = Pipeline::new(
        source,
        sink.clone(),
        Decoder::new(config.sink.key.clone())
            .with_upsert(crate::sink::upsert::Upsert::from_config(&config.sink)),
        cadence,
        Delivery::new(sink, &config.retry, stats.clone())
            .with_limit(Arc::new(
                crate::control::limit::gate::LimitGate::new(config.concurrency.build())
                    .with_cuts(config.concurrency.cuts_overdue()),
            ))
            .with_backpressure(Arc::new(Backpressure::new(
                &config.throttle,
                &config.retry,
                &config.rate,
                stats.clone(),
            ))),
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
    let probes = crate::health::probe::spawn_all(&config.health.probe, &config.sink, &health);
    for probe in &config.health.probe {
        tracing::info!(
            "health probe {}: new writes held above {}, stopping above {}",
            probe.name(),
            probe.max(),
            probe
                .critical()
                .map_or("(no critical limit)".to_string(), |c| c.to_string())
        );
    }
    let (keeper_stop, keeper_shutdown) = shutdown::channel();
    let keeper = match (&config.leases, pool) {
        (Some(l), Some((store, definition))) => {
            let keeper = lease_keeper(
                l,
                store,
                definition,
                config.rate_ceiling(),
                config.rate.tick,
                pipeline.target_rate(),
                stats.clone(),
            );
            Some(keeper.spawn(keeper_shutdown))
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
    let mut result = pipeline.run(shutdown).await;
    progress.finish();
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
    keeper_stop.trigger();
    if let Some(k) = keeper {
        let _ = k.await;
    }
    result.map_err(|e| e.to_string().into())
}

/// Whether a URL given on the command line carries a password or a secret query value.
fn carries_secret(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| {
        u.password().is_some()
            || u.query_pairs()
                .any(|(k, _)| crate::redact::is_secret_param(&k, true))
    })
}

/// The lease store; `read_only` (inspection commands) creates no table: a pool whose
/// tables do not exist yet reads as empty.
async fn lease_store(l: &LeasesConfig, read_only: bool) -> Result<Arc<dyn LeaseStore>, LeaseError> {
    if l.by_assignment() {
        return Err(LeaseError(
            "store = \"kafka\" keeps no leases: the capacity follows the consumer group's assignment".into(),
        ));
    }
    let store = if read_only {
        PgLeaseStore::open_existing(&l.store, &l.pool, l.ttl).await?
    } else {
        PgLeaseStore::connect(&l.store, &l.pool, l.ttl).await?
    };
    Ok(Arc::new(store))
}

/// Connects to the lease store and checks this worker's [leases] against the pool's stored
/// definition (storing it if the pool has none): exit 2 if they differ.
async fn join_pool(l: &LeasesConfig) -> Result<(Arc<dyn LeaseStore>, PoolDefinition), u8> {
    let store = lease_store(l, false).await.map_err(|e| {
        say!("sluice: {e}");
        EXIT_RUNTIME
    })?;
    let definition = store.define(l.capacity, l.partitions).await.map_err(|e| {
        say!("sluice: {e}");
        EXIT_RUNTIME
    })?;
    check_definition(&l.pool, l.capacity, l.partitions, &definition).map_err(|e| {
        say!("sluice: bad configuration: {e}");
        EXIT_CONFIG
    })?;
    Ok((store, definition))
}

fn lease_keeper(
    l: &LeasesConfig,
    store: Arc<dyn LeaseStore>,
    definition: PoolDefinition,
    ceiling: Option<f64>,
    tick: std::time::Duration,
    rate: crate::control::target_rate::TargetRate,
    stats: Arc<Stats>,
) -> LeaseKeeper {
    let table = LeaseTable::new(
        definition,
        WorkerLimits {
            reserved: l.reserved,
            ceiling,
            ttl: l.ttl,
            idle_grace: l.idle_grace,
        },
    );
    // A round at least twice per safety margin, minus a tick for the rate to apply.
    let interval =
        std::time::Duration::from_millis(500).min((l.ttl / 20).saturating_sub(tick).max(tick));
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
    LeaseKeeper::new(store, table, member, rate, stats, interval)
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
    if let Some(c) = args.capacity
        && !(c.is_finite() && c > 0.0)
    {
        say!("sluice: --capacity must be a positive number, got {c}");
        return EXIT_CONFIG;
    }
    if args.partitions == Some(0) {
        say!("sluice: --partitions must be at least 1");
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

async fn leases(args: ReportArgs) -> u8 {
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
        println!("{doc}");
        return 0;
    }
    let per = capacity / f64::from(partitions);
    println!(
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
    println!("{:>9}  {:<40} {:>12}", "partition", "holder", "expires in");
    for p in 0..partitions {
        match leases
            .iter()
            .find(|r| r.partition == p && r.expires_in_s > 0.0)
        {
            Some(r) => println!("{p:>9}  {:<40} {:>11.1}s", r.holder, r.expires_in_s),
            None => println!("{p:>9}  {:<40} {:>12}", "(free)", "-"),
        }
    }
    println!("members:");
    for m in &members {
        println!(
            "  {:<40} holds {:>3}  wants more: {:<5}  seen {:.1}s ago",
            m.member, m.held, m.wants_more, m.last_seen_s
        );
    }
    0
}

async fn plan(args: ReportArgs) -> u8 {
    let (config, _) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let backlog = match source::inspect_backlog(&config).await {
        Ok(b) => b,
        Err(e) => {
            say!("sluice: cannot read the backlog: {e}");
            return EXIT_RUNTIME;
        }
    };
    let mut plan = crate::plan::Plan::new(&config, backlog.records);
    plan.backlog_note = backlog.note;
    for probe in &config.health.probe {
        plan.health
            .push(crate::plan::ProbeReport::read(probe, &config).await);
    }
    if let Some(l) = &config.leases {
        let pooled = match lease_store(l, true).await {
            Ok(store) => plan.clone().with_pool(&config, store.as_ref()).await,
            Err(e) => Err(e),
        };
        match pooled {
            Ok(p) => plan = p,
            Err(e) => say!("sluice: lease pool unknown: {e}"),
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&plan).expect("plan serializes"));
    } else {
        println!("{plan}");
    }
    0
}

async fn check(args: CheckArgs) -> u8 {
    let (config, origin) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let probes = crate::check::probe_all(&config, args.timeout).await;
    for probe in &probes {
        say!("{probe}");
    }
    let failed = probes.iter().filter(|p| p.result.is_err()).count();
    if failed > 0 {
        say!(
            "sluice: configuration {origin} is valid, but {failed} of {} checks failed",
            probes.len()
        );
        return EXIT_RUNTIME;
    }
    say!("sluice: configuration {origin} is valid; everything run needs is reachable");
    0
}

fn init(args: InitArgs) -> u8 {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if args.force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let written = options.open(&args.path).and_then(|mut f| {
        std::io::Write::write_all(&mut f, crate::config::origin::STARTER.as_bytes())
    });
    match written {
        Ok(()) => {
            say!(
                "sluice: wrote {}; edit it, then `sluice check`",
                args.path.display()
            );
            0
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            say!(
                "sluice: {} exists; --force replaces it",
                args.path.display()
            );
            EXIT_CONFIG
        }
        Err(e) => {
            say!("sluice: cannot write {}: {e}", args.path.display());
            EXIT_RUNTIME
        }
    }
}

async fn produce(args: ProduceArgs) -> u8 {
    let (config, _) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match produce::produce(&config, &args.input).await {
        Ok(tally) => {
            println!("{}", tally.delivered);
            match tally.first_error {
                Some(error) => {
                    say!(
                        "sluice: {} delivered, {} not delivered (first error: {error})",
                        tally.delivered,
                        tally.failed
                    );
                    EXIT_RUNTIME
                }
                None => {
                    say!("sluice: {} records delivered", tally.delivered);
                    0
                }
            }
        }
        Err(e @ ProduceError::NotAQueue(_)) => {
            say!("sluice: {e}");
            EXIT_CONFIG
        }
        Err(e) => {
            say!("sluice: {e}");
            EXIT_RUNTIME
        }
    }
}

/// `sluice ctl`: one request to a running worker's operator controls.
async fn ctl(args: CtlArgs) -> u8 {
    use crate::telemetry::control::{SetValue, Status};
    let (config, origin) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let base = match (&args.url, config.telemetry.listen) {
        (Some(url), _) => url.trim_end_matches('/').to_string(),
        (None, Some(listen)) => format!("http://{listen}"),
        (None, None) => {
            say!("sluice: {origin} sets no telemetry.listen: give the worker's address with --url");
            return EXIT_CONFIG;
        }
    };
    let value = |text: &str, what: &str| -> Result<Option<f64>, u8> {
        if text == "off" {
            return Ok(None);
        }
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
            _ => {
                say!("sluice: ctl {what} takes a number of at least 0 or \"off\", got {text:?}");
                Err(EXIT_CONFIG)
            }
        }
    };
    let client = reqwest::Client::new();
    let request = match &args.action {
        CtlAction::Pause => client.post(format!("{base}/control/pause")),
        CtlAction::Resume => client.post(format!("{base}/control/resume")),
        CtlAction::Rate { value: text } => match value(text, "rate") {
            Ok(v) => client
                .post(format!("{base}/control/rate"))
                .json(&SetValue { value: v }),
            Err(code) => return code,
        },
        CtlAction::Batch { value: text } => match value(text, "batch") {
            Ok(v) => client
                .post(format!("{base}/control/batch"))
                .json(&SetValue { value: v }),
            Err(code) => return code,
        },
        CtlAction::Status { .. } => client.get(format!("{base}/control/status")),
    };
    let request = match &config.telemetry.token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    let response = match request
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            say!("sluice: cannot reach the worker at {base}: {e}");
            return EXIT_RUNTIME;
        }
    };
    let code = response.status();
    let body = response.text().await.unwrap_or_default();
    if code == reqwest::StatusCode::UNAUTHORIZED {
        say!(
            "sluice: the worker refused the request (401): telemetry.token is missing or differs from the worker's"
        );
        return EXIT_RUNTIME;
    }
    if !code.is_success() {
        say!("sluice: the worker answered {code}: {}", body.trim());
        return if code.is_client_error() {
            EXIT_CONFIG
        } else {
            EXIT_RUNTIME
        };
    }
    match &args.action {
        CtlAction::Status { json: true } => println!("{}", body.trim()),
        CtlAction::Status { json: false } => match serde_json::from_str::<Status>(&body) {
            Ok(status) => print_status(&status),
            Err(e) => {
                say!("sluice: unexpected answer from {base}: {e}");
                return EXIT_RUNTIME;
            }
        },
        _ => say!(
            "sluice: done; the worker applies it from its next tick ({})",
            body.trim()
        ),
    }
    0
}

fn print_status(status: &crate::telemetry::control::Status) {
    let c = &status.controls;
    println!(
        "writes: {}",
        match &status.held_by {
            None => "going".to_string(),
            Some(reason) => format!("held by {reason}"),
        }
    );
    println!(
        "operator: {}, rate ceiling {}, batch {}",
        if c.paused { "paused" } else { "not paused" },
        c.rate
            .map_or("as configured".into(), |r| format!("{r} rec/s")),
        c.batch
            .map_or("as configured".into(), |b| format!("{b} records"))
    );
    println!(
        "rate now: {} rec/s in batches of {}; written: {}",
        status.rate_limit, status.batch_records, status.written
    );
    for p in &status.probes {
        println!(
            "probe {}: {} (max {}{})  {}",
            p.name,
            p.value.map_or("-".into(), |v| v.to_string()),
            p.max,
            p.critical
                .map_or(String::new(), |c| format!(", critical {c}")),
            p.state
        );
    }
}
