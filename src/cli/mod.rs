//! The command line: parses flags, loads the configuration, hands each command to its
//! module, and maps the outcome to exit codes (0 done, 1 runtime failure, 2 bad
//! configuration or usage).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{Config, ConfigOrigin, Overrides};
use crate::settings::ConfigError;

/// A line for the person at the terminal, with credentials redacted. A stderr nobody
/// reads any more loses it and nothing else (`eprintln!` panicked).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "{}",
            crate::redact::redact(&format!($($arg)*))
        );
    }};
}

/// A line of a command's output on stdout. A reader that went away (`| head`, a log
/// shipper that died) is not the command's failure and leaves nothing to tell; any other
/// error (a full disk under a redirect) is said on stderr. `println!` panicked on both.
macro_rules! out {
    ($($arg:tt)*) => {
        if let Err(e) = crate::cli::write_out(format_args!($($arg)*)) {
            say!("sluice: cannot write to standard output: {e}");
        }
    };
}

mod config_file;
mod ctl;
mod inspect;
mod leases;
mod produce;
mod reference;
mod run;

const EXIT_RUNTIME: u8 = 1;

/// Writes a line to stdout and flushes it; a closed pipe is no error (see `out!`).
fn write_out(line: std::fmt::Arguments) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        done => done,
    }
}
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
    Run(run::RunArgs),
    /// Validate the configuration and reach everything `run` needs (source, sink,
    /// dead-letter and lease stores, checkpoint directory), changing nothing.
    Check(inspect::CheckArgs),
    /// Write a commented starter configuration.
    Init(config_file::InitArgs),
    /// Show the lease pool: its definition, partitions, holders, expiries and members; or
    /// change its definition (`sluice leases resize`).
    Leases(leases::LeasesArgs),
    /// Show the backlog, the rate this worker may use, how long the drain will take, and
    /// what the health probes read now.
    Plan(ReportArgs),
    /// Operator controls of a running worker, through its telemetry listener: pause,
    /// resume, the rate ceiling, the batch size, status. A change applies from the
    /// worker's next tick and lasts until it exits (the configuration is the truth on
    /// restart). The token is telemetry.token (or SLUICE_TELEMETRY__TOKEN).
    Ctl(ctl::CtlArgs),
    /// Emulate a capacity-limited database behind HTTP (429s, latency, outages).
    SimSink(crate::sim_sink::SimSinkArgs),
    /// Publish NDJSON lines to the configured queue, one message per line, keyed by
    /// `sink.key`; prints how many the queue confirmed.
    Produce(produce::ProduceArgs),
    /// The configuration file itself: `sluice config schema`, `sluice config docs`.
    Config {
        #[command(subcommand)]
        action: config_file::ConfigAction,
    },
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
        Command::Run(args) => runtime.block_on(run::run(args)),
        Command::Check(args) => runtime.block_on(inspect::check(args)),
        Command::Init(args) => config_file::init(args),
        Command::Leases(args) => runtime.block_on(leases::command(args)),
        Command::Plan(args) => runtime.block_on(inspect::plan(args)),
        Command::SimSink(args) => runtime.block_on(crate::sim_sink::run(args)),
        Command::Produce(args) => runtime.block_on(produce::produce(args)),
        Command::Ctl(args) => runtime.block_on(ctl::ctl(args)),
        Command::Config { action } => config_file::config(action),
    };
    // Do not wait for stdin readers or lingering connections on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    ExitCode::from(code)
}

fn load(args: &ConfigArgs, overrides: &Overrides) -> Result<(Config, ConfigOrigin), u8> {
    let origin = ConfigOrigin::discover(args.config.as_deref());
    tracing::info!("configuration: {origin}");
    Config::load_from(&origin, overrides)
        .map(|config| (config, origin.clone()))
        .map_err(|e| refused(&origin, &e))
}

/// Says why the configuration `origin` names cannot be used; the exit code for it.
fn refused(origin: &ConfigOrigin, error: &ConfigError) -> u8 {
    match error {
        ConfigError::MissingFile(_) | ConfigError::UnreadableFile { .. } => {
            say!("sluice: {error}")
        }
        _ => say!("sluice: bad configuration ({origin}): {error}"),
    }
    EXIT_CONFIG
}
