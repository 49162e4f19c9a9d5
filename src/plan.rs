//! `sluice plan`: how much is queued, what rate this worker (and the pool) may use, and how
//! long the drain will take at that rate.

use std::time::Duration;

use serde::Serialize;

use crate::config::Config;
use crate::lease::LeaseStore;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DrainPlan {
    /// Records waiting in the source, None if it cannot tell.
    pub backlog: Option<u64>,
    /// What the backlog leaves out, where the source cannot count everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog_note: Option<String>,
    /// Records per second this worker may use now (null: no ceiling of ours, `"auto"` or
    /// `"off"`).
    pub worker_rate: f64,
    /// With leases: the pool's capacity and how much of it is held right now.
    pub pool_capacity: Option<f64>,
    pub pool_held_rate: Option<f64>,
    pub pool_members: Option<u32>,
    /// Seconds to drain the backlog at the rate that applies (the pool's with leases).
    pub eta_s: Option<f64>,
    /// Each health probe read once now, and whether it would hold a worker's writes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<ProbeReport>,
}

/// One health probe as `sluice plan` read it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProbeReport {
    pub name: String,
    pub value: Option<f64>,
    /// None: no max.
    pub max: Option<f64>,
    pub critical: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<f64>,
    /// A canary's baseline, measured over its window now, and its age (0: just now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_age_s: Option<f64>,
    /// "writes go", or why they would be held or stopped.
    pub verdict: String,
    pub holds: bool,
}

impl ProbeReport {
    /// Runs `probe` once and judges its reading as a worker would.
    pub async fn read(
        probe: &crate::health::settings::ProbeSettings,
        config: &Config,
    ) -> ProbeReport {
        use crate::control::health::{ProbeGate, ProbeLimits, ProbeState, Reading};
        let task = crate::health::probe::ProbeTask::new(probe, &config.sink);
        let mut conns: Vec<_> = task.targets.iter().map(|_| None).collect();
        let (reading, baseline) = match task.canary {
            Some(window) => measure_baseline(&task, &mut conns, window).await,
            None => (task.run_once(&mut conns).await, None),
        };
        let limits = ProbeLimits {
            max: probe.max(baseline),
            resume_ratio: probe.resume_ratio,
            critical: probe.critical(baseline),
            stale_after: Duration::MAX,
        };
        let mut gate = ProbeGate::new(limits);
        gate.observe(Duration::ZERO, reading.clone());
        let unit = match probe.builtin {
            Some(crate::health::settings::Builtin::ReplicaLag) => " s",
            Some(crate::health::settings::Builtin::Canary) => " s",
            _ => "",
        };
        let name = probe.name().to_string();
        let target = probe.target(baseline);
        let (verdict, holds) = match gate.state(Duration::ZERO) {
            ProbeState::Clear => (
                format!(
                    "{name} = {:.3}{unit}{}{}: writes go",
                    gate.value().unwrap_or(0.0),
                    if limits.max.is_finite() {
                        format!(", under max {}{unit}", limits.max)
                    } else {
                        String::new()
                    },
                    match (baseline, target) {
                        (Some(b), Some(t)) => format!(
                            " (baseline {:.2} ms measured now, target {:.2} ms)",
                            b * 1000.0,
                            t * 1000.0
                        ),
                        (Some(b), None) => format!(" (baseline {:.2} ms measured now)", b * 1000.0),
                        (None, Some(t)) => format!(", target {t}{unit}"),
                        (None, None) => String::new(),
                    }
                ),
                false,
            ),
            ProbeState::Held(why) => (
                format!(
                    "{}: new writes would be held",
                    crate::health::describe(&name, unit, &why, limits)
                ),
                true,
            ),
            ProbeState::Critical(v) => (
                format!(
                    "{name} = {v}{unit}, above critical {}{unit}: a worker would stop (exit 1)",
                    limits.critical.unwrap_or(v)
                ),
                true,
            ),
        };
        ProbeReport {
            name,
            value: match reading {
                Reading::Value(v) => Some(v),
                Reading::Failed(_) => None,
            },
            max: limits.max.is_finite().then_some(limits.max),
            critical: limits.critical,
            target,
            baseline,
            baseline_age_s: baseline.map(|_| 0.0),
            verdict,
            holds,
        }
    }
}

/// A canary's runs over its baseline windows, as a worker measures them before the first
/// write: the last reading and the baseline (None if a run failed).
async fn measure_baseline(
    task: &crate::health::probe::ProbeTask,
    conns: &mut [Option<crate::health::query::Conn>],
    window: (Duration, f64),
) -> (crate::control::health::Reading, Option<f64>) {
    use crate::control::health::Reading;
    let mut runs = crate::health::probe::CanaryRuns::new(window);
    let (mut arrivals, epoch) = (task.arrivals(), tokio::time::Instant::now());
    loop {
        match task.canary_run(&mut arrivals, epoch, conns).await {
            Reading::Value(latency) => {
                let (value, baseline) = runs.add(latency);
                if baseline {
                    return (Reading::Value(value), Some(value));
                }
            }
            failed => return (failed, None),
        }
    }
}

impl DrainPlan {
    /// The rate that drains the backlog: the pool's when workers share one, else ours.
    fn drain_rate(&self) -> f64 {
        self.pool_capacity.unwrap_or(self.worker_rate)
    }

    pub fn new(config: &Config, backlog: Option<u64>) -> DrainPlan {
        let worker_rate = match &config.leases {
            Some(l) => l.reserved,
            None => config
                .rate
                .records_per_second
                .fixed()
                .unwrap_or(f64::INFINITY),
        };
        let mut plan = DrainPlan {
            backlog,
            backlog_note: None,
            worker_rate,
            pool_capacity: config.leases.as_ref().map(|l| l.capacity),
            pool_held_rate: None,
            pool_members: None,
            eta_s: None,
            health: Vec::new(),
        };
        plan.eta_s = plan.eta();
        plan
    }

    /// Adds what the lease store says: a new worker would get the free partitions now.
    pub async fn with_pool(
        mut self,
        config: &Config,
        store: &dyn LeaseStore,
    ) -> Result<DrainPlan, crate::lease::LeaseError> {
        let Some(l) = &config.leases else {
            return Ok(self);
        };
        let per = l.capacity / f64::from(l.partitions);
        let held = store
            .leases()
            .await?
            .iter()
            .filter(|r| r.expires_in_s > 0.0)
            .count() as f64;
        let members = store
            .members()
            .await?
            .iter()
            .filter(|m| m.last_seen_s < l.ttl.as_secs_f64())
            .count();
        self.pool_held_rate = Some(held * per);
        self.pool_members = Some(members as u32);
        self.worker_rate = (f64::from(l.partitions) - held) * per + l.reserved;
        self.eta_s = self.eta();
        Ok(self)
    }

    fn eta(&self) -> Option<f64> {
        let rate = self.drain_rate();
        self.backlog
            .filter(|_| rate > 0.0 && rate.is_finite())
            .map(|b| b as f64 / rate)
    }
}

impl std::fmt::Display for DrainPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.backlog {
            Some(b) => write!(f, "{} records queued", thousands(b))?,
            None => write!(f, "backlog unknown")?,
        }
        match (self.eta_s, self.pool_capacity) {
            (Some(eta), Some(cap)) => write!(
                f,
                "; at the pool's {} rec/s about {}",
                thousands(cap.round() as u64),
                human(Duration::from_secs_f64(eta))
            )?,
            (Some(eta), None) => write!(
                f,
                "; at {} rec/s about {}",
                thousands(self.worker_rate.round() as u64),
                human(Duration::from_secs_f64(eta))
            )?,
            (None, None) if self.worker_rate.is_infinite() => write!(
                f,
                "; no ceiling of ours (rate.records_per_second is \"auto\" or \"off\"): as fast as the sink and the probes' targets allow"
            )?,
            (None, _) => {}
        }
        if let (Some(cap), Some(held), Some(members)) =
            (self.pool_capacity, self.pool_held_rate, self.pool_members)
        {
            write!(
                f,
                "\npool: {} of {} rec/s held by {members} active workers; a new worker would get {} rec/s now",
                thousands(held.round() as u64),
                thousands(cap.round() as u64),
                thousands(self.worker_rate.round() as u64)
            )?;
        }
        if let Some(note) = &self.backlog_note {
            write!(f, "\n{note}")?;
        }
        for probe in &self.health {
            write!(f, "\nhealth: {}", probe.verdict)?;
        }
        Ok(())
    }
}

/// 1234567 → "1,234,567".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "25 min 43 s", "2 h 5 min", "12 s".
pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_people_read() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(human(Duration::from_secs(1543)), "25 min 43 s");
        assert_eq!(human(Duration::from_secs(7500)), "2 h 5 min");
        assert_eq!(human(Duration::from_secs(12)), "12 s");
    }

    #[test]
    fn eta_is_backlog_over_rate() {
        let mut plan = DrainPlan {
            backlog: Some(1_234_567),
            backlog_note: None,
            worker_rate: 800.0,
            pool_capacity: None,
            pool_held_rate: None,
            pool_members: None,
            eta_s: Some(1_234_567.0 / 800.0),
            health: Vec::new(),
        };
        assert_eq!(
            plan.to_string(),
            "1,234,567 records queued; at 800 rec/s about 25 min 43 s"
        );
        plan.backlog_note = Some("ready messages only".into());
        assert!(
            plan.to_string()
                .ends_with("25 min 43 s\nready messages only")
        );
    }
}
