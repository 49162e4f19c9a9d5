//! The command line: parses flags, loads the configuration, wires the pipeline, and maps
//! the outcome to exit codes (0 done, 1 runtime failure, 2 bad configuration or usage).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::backpressure::Backpressure;
use crate::config::{Config, ConfigError, LeasesConfig, Overrides};
use crate::control::cadence::Cadence;
use crate::control::clock::TokioClock;
use crate::control::lease_table::LeaseTable;
use crate::decode::Decoder;
use crate::delivery::Delivery;
use crate::lease::keeper::LeaseKeeper;
use crate::lease::postgres::PgLeaseStore;
use crate::lease::{LeaseError, LeaseStore, member_id};
use crate::pipeline::{Pipeline, RunOptions};
use crate::produce::ProduceError;
use crate::progress::Progress;
use crate::stats::Stats;
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
    /// Validate the configuration and reach the source and the sink, then exit.
    Check(ConfigArgs),
    /// Show the lease pool: partitions, holders, expiries and members.
    Leases(ReportArgs),
    /// Show the backlog, the rate this worker may use, and how long the drain will take.
    Plan(ReportArgs),
    /// Emulate a capacity-limited database behind HTTP (429s, latency, outages).
    SimSink(crate::sim_sink::SimSinkArgs),
    /// Publish NDJSON lines to the configured queue, one message per line, keyed by
    /// `sink.key`; prints how many the queue confirmed.
    Produce(ProduceArgs),
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
struct ReportArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ConfigArgs {
    /// Configuration file (TOML); `SLUICE_*` environment variables override it.
    #[arg(long, short, default_value = "config/default.toml")]
    config: PathBuf,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Exit 0 once the source is drained and everything pulled is written or dead-lettered.
    #[arg(long)]
    until_empty: bool,
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
    /// Overrides sink.url.
    #[arg(long, value_name = "URL")]
    sink_url: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SummaryFormat {
    Json,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
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
        Command::Leases(args) => runtime.block_on(leases(args)),
        Command::Plan(args) => runtime.block_on(plan(args)),
        Command::SimSink(args) => runtime.block_on(crate::sim_sink::run(args)),
        Command::Produce(args) => runtime.block_on(produce(args)),
    };
    // Do not wait for stdin readers or lingering connections on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    ExitCode::from(code)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(|| crate::redact::RedactingStderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load(path: &std::path::Path, overrides: &Overrides) -> Result<Config, u8> {
    Config::load(path, overrides).map_err(|e: ConfigError| {
        say!("sluice: bad configuration ({}): {e}", path.display());
        EXIT_CONFIG
    })
}

async fn run(args: RunArgs) -> u8 {
    let overrides = Overrides {
        records_per_second: args.rate,
        input: args.input.clone(),
        sink_url: args.sink_url.clone(),
    };
    let config = match load(&args.config.config, &overrides) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if args.max_records == Some(0) {
        say!("sluice: --max-records must be at least 1");
        return EXIT_CONFIG;
    }
    let source = match source::open(&config, !args.until_empty).await {
        Ok(s) => s,
        Err(e) => {
            say!("sluice: cannot open the source: {e}");
            return EXIT_RUNTIME;
        }
    };
    let sink = match sink::open(&config).await {
        Ok(s) => s,
        Err(e) => {
            say!("sluice: {e}");
            return EXIT_RUNTIME;
        }
    };
    let stats = Arc::new(Stats::default());
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
    let pipeline = Pipeline::new(
        source,
        sink.clone(),
        Decoder::new(config.sink.key.clone()),
        cadence,
        Delivery::new(sink, &config.retry, stats.clone())
            .with_limit(Arc::new(crate::control::limit::gate::LimitGate::new(
                config.concurrency.build(),
            )))
            .with_backpressure(Arc::new(Backpressure::new(
                &config.throttle,
                &config.retry,
                &config.rate,
                stats.clone(),
            ))),
        stats.clone(),
        RunOptions {
            until_empty: args.until_empty,
            max_records: args.max_records,
            max_batch: config.sink.max_batch,
            max_in_flight: config.concurrency.max,
            grace: config.shutdown.grace,
            capacity_by_share: config
                .leases
                .as_ref()
                .filter(|l| l.by_assignment())
                .map(|l| (l.capacity, l.reserved)),
        },
    );
    let (keeper_stop, keeper_shutdown) = shutdown::channel();
    let keeper = match &config.leases {
        None => None,
        Some(l) if l.by_assignment() => None,
        Some(l) => {
            match lease_keeper(l, config.rate.tick, pipeline.target_rate(), stats.clone()).await {
                Ok(k) => Some(k.spawn(keeper_shutdown)),
                Err(e) => {
                    say!("sluice: {e}");
                    return EXIT_RUNTIME;
                }
            }
        }
    };
    let telemetry = match config.telemetry.listen {
        None => None,
        Some(listen) => {
            match crate::telemetry::server::serve(listen, stats.clone(), pipeline.sink()).await {
                Ok((addr, task)) => {
                    tracing::info!("serving /metrics /healthz /readyz on http://{addr}");
                    Some(task)
                }
                Err(e) => {
                    say!("sluice: cannot listen on {listen} (telemetry.listen): {e}");
                    return EXIT_RUNTIME;
                }
            }
        }
    };
    let progress = Progress::start(stats);
    let result = pipeline.run(shutdown::on_signals()).await;
    progress.finish();
    if let Some(t) = telemetry {
        t.abort();
    }
    keeper_stop.trigger();
    if let Some(k) = keeper {
        let _ = k.await;
    }
    match result {
        Ok(summary) => {
            say!("sluice: {summary}");
            if let Some(SummaryFormat::Json) = args.summary {
                println!(
                    "{}",
                    serde_json::to_string(&summary).expect("summary serializes")
                );
            }
            0
        }
        Err(e) => {
            say!("sluice: {e}");
            EXIT_RUNTIME
        }
    }
}

async fn lease_store(l: &LeasesConfig) -> Result<Arc<dyn LeaseStore>, LeaseError> {
    if l.by_assignment() {
        return Err(LeaseError(
            "store = \"kafka\" keeps no leases: the capacity follows the consumer group's assignment".into(),
        ));
    }
    Ok(Arc::new(
        PgLeaseStore::connect(&l.store, &l.pool, l.partitions, l.ttl).await?,
    ))
}

async fn lease_keeper(
    l: &LeasesConfig,
    tick: std::time::Duration,
    rate: crate::control::target_rate::TargetRate,
    stats: Arc<Stats>,
) -> Result<LeaseKeeper, LeaseError> {
    let store = lease_store(l).await?;
    let table = LeaseTable::new(l.capacity, l.partitions, l.reserved, l.ttl, l.idle_grace);
    // A round at least twice per safety margin, minus a tick for the rate to apply.
    let interval =
        std::time::Duration::from_millis(500).min((l.ttl / 20).saturating_sub(tick).max(tick));
    let member = member_id();
    tracing::info!(pool = %l.pool, %member, "sharing {} rec/s in {} leases", l.capacity, l.partitions);
    Ok(LeaseKeeper::new(
        store, table, member, rate, stats, interval,
    ))
}

async fn leases(args: ReportArgs) -> u8 {
    let config = match load(&args.config.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(l) = &config.leases else {
        say!(
            "sluice: {} has no [leases] section",
            args.config.config.display()
        );
        return EXIT_CONFIG;
    };
    let store = match lease_store(l).await {
        Ok(s) => s,
        Err(e) => {
            say!("sluice: {e}");
            return EXIT_RUNTIME;
        }
    };
    let (leases, members) = match (store.leases().await, store.members().await) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            say!("sluice: {e}");
            return EXIT_RUNTIME;
        }
    };
    if args.json {
        let doc = serde_json::json!({
            "pool": l.pool, "capacity": l.capacity, "partitions": l.partitions,
            "leases": leases, "members": members,
        });
        println!("{doc}");
        return 0;
    }
    let per = l.capacity / f64::from(l.partitions);
    println!(
        "pool {}: {} rec/s in {} partitions of {per:.1} rec/s",
        l.pool, l.capacity, l.partitions
    );
    println!("{:>9}  {:<40} {:>12}", "partition", "holder", "expires in");
    for p in 0..l.partitions {
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
    let config = match load(&args.config.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut source = match source::open(&config, false).await {
        Ok(s) => s,
        Err(e) => {
            say!("sluice: cannot open the source: {e}");
            return EXIT_RUNTIME;
        }
    };
    let backlog = source.count_backlog().await;
    let _ = source.close(false).await;
    let backlog = match backlog {
        Ok(b) => b,
        Err(e) => {
            say!("sluice: cannot read the backlog: {e}");
            return EXIT_RUNTIME;
        }
    };
    let mut plan = crate::plan::Plan::new(&config, backlog);
    if let Some(l) = &config.leases {
        let pooled = match lease_store(l).await {
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

async fn check(args: ConfigArgs) -> u8 {
    let config = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Err(e) = source::open(&config, false).await {
        say!("sluice: source: {e}");
        return EXIT_RUNTIME;
    }
    if let Err(e) = sink::open(&config).await {
        say!("sluice: {e}");
        return EXIT_RUNTIME;
    }
    say!(
        "sluice: configuration {} is valid; source and sink are reachable",
        args.config.display()
    );
    0
}

async fn produce(args: ProduceArgs) -> u8 {
    let config = match load(&args.config.config, &Overrides::default()) {
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
