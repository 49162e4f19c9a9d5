//! `sluice ctl`: the operator controls of a running worker, through its telemetry
//! listener.

use clap::{Args, Subcommand};

use super::{ConfigArgs, EXIT_CONFIG, EXIT_RUNTIME, refused};
use crate::config::{Config, ConfigOrigin};
use crate::settings::bounds::rate_problem;
use crate::telemetry::control::batch_size;

#[derive(Debug, Args)]
pub(super) struct CtlArgs {
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
        #[arg(value_name = "REC_PER_S|off", allow_negative_numbers = true)]
        value: String,
    },
    /// Records per batch at most; "off" goes back to sink.max_batch.
    Batch {
        #[arg(value_name = "N|off", allow_negative_numbers = true)]
        value: String,
    },
    /// What the operator set, why writes are held, and each probe's last value.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `sluice ctl`: one request to a running worker's operator controls. Only `[telemetry]`
/// is read (the address, the token): the worker has the rest.
pub(super) async fn ctl(args: CtlArgs) -> u8 {
    use crate::telemetry::control::{SetValue, Status};
    let origin = ConfigOrigin::discover(args.config.config.as_deref());
    let telemetry = match Config::load_telemetry(&origin) {
        Ok(t) => t,
        Err(e) => return refused(&origin, &e),
    };
    let base = match (&args.url, telemetry.listen) {
        (Some(url), _) => url.trim_end_matches('/').to_string(),
        (None, Some(listen)) => format!("http://{listen}"),
        (None, None) => {
            say!("sluice: {origin} sets no telemetry.listen: give the worker's address with --url");
            return EXIT_CONFIG;
        }
    };
    // The worker's own bounds, checked here too: a refused value is exit 2 without a
    // request.
    let value = |text: &str, what: &str| -> Result<Option<f64>, u8> {
        if text == "off" {
            return Ok(None);
        }
        let problem = match text.parse::<f64>() {
            Ok(v) if what == "rate" => rate_problem(v, true).map(|p| format!("a rate {p}")),
            Ok(v) => batch_size(v).err(),
            Err(_) => Some(format!("takes a number or \"off\", got {text:?}")),
        };
        match problem {
            None => Ok(text.parse().ok()),
            Some(problem) => {
                say!("sluice: ctl {what}: {problem}");
                Err(EXIT_CONFIG)
            }
        }
    };
    let client = match crate::tls::http_client().build() {
        Ok(client) => client,
        Err(e) => {
            say!("sluice: ctl: cannot build an HTTP client: {e}");
            return EXIT_RUNTIME;
        }
    };
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
    let request = match &telemetry.token {
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
        CtlAction::Status { json: true } => out!("{}", body.trim()),
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
    out!(
        "writes: {}",
        match &status.held_by {
            None => "going".to_string(),
            Some(reason) => format!("held by {reason}"),
        }
    );
    out!(
        "operator: {}, rate ceiling {}, batch {}",
        if c.paused { "paused" } else { "not paused" },
        c.rate
            .map_or("as configured".into(), |r| format!("{r} rec/s")),
        c.batch
            .map_or("as configured".into(), |b| format!("{b} records"))
    );
    out!(
        "rate now: {} rec/s in batches of {}; written: {}",
        status.rate_limit,
        status.batch_records,
        status.written
    );
    for p in &status.probes {
        out!(
            "probe {}: {} (max {}{}{})  {}",
            p.name,
            p.value.map_or("-".into(), |v| v.to_string()),
            p.max.map_or("none".into(), |m| m.to_string()),
            p.critical
                .map_or(String::new(), |c| format!(", critical {c}")),
            p.target.map_or(String::new(), |t| format!(
                ", target {t}, steering at {:.0} rec/s",
                p.steered_rate.unwrap_or(0.0)
            )),
            p.state
        );
    }
}
