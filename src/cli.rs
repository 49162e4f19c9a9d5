//! The command line: parses flags, loads the configuration, wires the pipeline, and maps
//! the outcome to exit codes (0 done, 1 runtime failure, 2 bad configuration or usage).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{Config, ConfigError, Overrides};
use crate::control::cadence::Cadence;
use crate::control::clock::TokioClock;
use crate::decode::Decoder;
use crate::delivery::Delivery;
use crate::pipeline::{Pipeline, RunOptions};
use crate::produce::ProduceError;
use crate::progress::Progress;
use crate::stats::Stats;
use crate::{produce, shutdown, sink, source};

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
            eprintln!("sluice: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    let code = match cli.command {
        Command::Run(args) => runtime.block_on(run(args)),
        Command::Check(args) => runtime.block_on(check(args)),
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
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load(path: &std::path::Path, overrides: &Overrides) -> Result<Config, u8> {
    Config::load(path, overrides).map_err(|e: ConfigError| {
        eprintln!("sluice: bad configuration ({}): {e}", path.display());
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
        eprintln!("sluice: --max-records must be at least 1");
        return EXIT_CONFIG;
    }
    let source = match source::open(&config, !args.until_empty).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: cannot open the source: {e}");
            return EXIT_RUNTIME;
        }
    };
    let sink = match sink::open(&config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: {e}");
            return EXIT_RUNTIME;
        }
    };
    let stats = Arc::new(Stats::default());
    let cadence = Cadence::new(
        config.rate.records_per_second,
        config.rate.tick,
        TokioClock::default(),
    );
    tracing::info!(
        rate = config.rate.records_per_second,
        per_tick = cadence.quantum(),
        tick = ?config.rate.tick,
        "draining {} into {}",
        config.source.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        config.sink.table
    );
    let pipeline = Pipeline::new(
        source,
        sink.clone(),
        Decoder::new(config.sink.key.clone()),
        cadence,
        Delivery::new(sink, &config.retry, stats.clone()),
        stats.clone(),
        RunOptions {
            until_empty: args.until_empty,
            max_records: args.max_records,
            max_batch: config.sink.max_batch,
            max_in_flight: config.concurrency.max,
            grace: config.shutdown.grace,
        },
    );
    let progress = Progress::start(stats);
    let result = pipeline.run(shutdown::on_signals()).await;
    progress.finish();
    match result {
        Ok(summary) => {
            eprintln!("sluice: {summary}");
            if let Some(SummaryFormat::Json) = args.summary {
                println!(
                    "{}",
                    serde_json::to_string(&summary).expect("summary serializes")
                );
            }
            0
        }
        Err(e) => {
            eprintln!("sluice: {e}");
            EXIT_RUNTIME
        }
    }
}

async fn check(args: ConfigArgs) -> u8 {
    let config = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Err(e) = source::open(&config, false).await {
        eprintln!("sluice: source: {e}");
        return EXIT_RUNTIME;
    }
    if let Err(e) = sink::open(&config).await {
        eprintln!("sluice: {e}");
        return EXIT_RUNTIME;
    }
    eprintln!(
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
                    eprintln!(
                        "sluice: {} delivered, {} not delivered (first error: {error})",
                        tally.delivered, tally.failed
                    );
                    EXIT_RUNTIME
                }
                None => {
                    eprintln!("sluice: {} records delivered", tally.delivered);
                    0
                }
            }
        }
        Err(e @ ProduceError::NotAQueue(_)) => {
            eprintln!("sluice: {e}");
            EXIT_CONFIG
        }
        Err(e) => {
            eprintln!("sluice: {e}");
            EXIT_RUNTIME
        }
    }
}
