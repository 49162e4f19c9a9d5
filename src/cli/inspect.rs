//! Commands that look and change nothing: `sluice plan` (backlog, rate, ETA) and
//! `sluice check` (the configuration, and everything a run needs is reachable).

use clap::Args;

use super::leases::lease_store;
use super::{ConfigArgs, EXIT_RUNTIME, ReportArgs, load};
use crate::config::Overrides;
use crate::source;

#[derive(Debug, Args)]
pub(super) struct CheckArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// How long each check may take.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

pub(super) async fn plan(args: ReportArgs) -> u8 {
    let (config, _) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let backlog = match source::inspect_backlog(
        &config.source,
        &config.opening(source::Extent::CaughtUp, false),
    )
    .await
    {
        Ok(b) => b,
        Err(e) => {
            say!("sluice: cannot read the backlog: {e}");
            return EXIT_RUNTIME;
        }
    };
    let mut plan = crate::plan::DrainPlan::new(&config, backlog.records);
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
        out!("{}", serde_json::to_string(&plan).expect("plan serializes"));
    } else {
        out!("{plan}");
    }
    0
}

pub(super) async fn check(args: CheckArgs) -> u8 {
    let (config, origin) = match load(&args.config, &Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let findings = crate::check::check_all(&config, args.timeout).await;
    for finding in &findings {
        say!("{finding}");
    }
    let failed = findings.iter().filter(|p| p.result.is_err()).count();
    if failed > 0 {
        say!(
            "sluice: configuration {origin} is valid, but {failed} of {} checks failed",
            findings.len()
        );
        return EXIT_RUNTIME;
    }
    say!("sluice: configuration {origin} is valid; everything run needs is reachable");
    0
}
