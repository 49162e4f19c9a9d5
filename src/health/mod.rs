//! The database's own health and the operator's say, turned into what the pipeline does
//! at each tick: write, hold new writes (and why), or stop. Probes run as tasks of their
//! own ([`probe`]) and report here; the decisions are [`crate::control::health`]'s.

pub mod controls;
pub mod number;
pub mod probe;
pub mod query;
pub mod settings;
mod steering;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::control::health::{ProbeGate, ProbeLimits, ProbeState, Reading, Why};
use crate::control::probe_target::ProbeTarget;
use crate::lock::lock;
use crate::stats::Stats;
use controls::Controls;
use settings::ProbeSettings;
use steering::{limits_of, steer_under};

/// What the pipeline does at this tick.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Go,
    /// No new writes; `reason` is the probe's name or "operator".
    Hold {
        reason: String,
        detail: String,
    },
    /// A probe is past `critical`: finish in flight, checkpoint, exit 1.
    Stop {
        probe: String,
        value: f64,
    },
}

struct Probe {
    name: String,
    /// Shown with its value: " s" for a lag.
    unit: &'static str,
    gate: Mutex<ProbeGate>,
    /// Why its runs fail, while they do (to log the change, not every run).
    failing: Mutex<Option<String>>,
    config: ProbeSettings,
    /// A canary's baseline: when it was measured, and its value.
    baseline: Mutex<Option<(Duration, f64)>>,
    /// Steers the rate under its `target`, once the target is known.
    steer: Mutex<Option<ProbeTarget>>,
}

/// One probe as `/control/status` and `/metrics` show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeView {
    pub name: String,
    pub value: Option<f64>,
    /// None: no max (or a canary's relative one, before its baseline).
    pub max: Option<f64>,
    pub critical: Option<f64>,
    /// The value the rate is steered under, and the rate that allows now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steered_rate: Option<f64>,
    /// A canary's baseline and how long ago it was measured, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_age_s: Option<f64>,
    /// "ok", or why it holds the writes.
    pub state: String,
}

pub struct Health {
    epoch: Instant,
    probes: Vec<Probe>,
    controls: Controls,
    stats: Arc<Stats>,
    /// The reason last logged, so that a change is logged once.
    last: Mutex<Option<String>>,
    /// Whether the probes' targets steer the rate (not with `rate = "off"`).
    steering: bool,
}

impl Health {
    pub fn new(probes: &[ProbeSettings], stats: Arc<Stats>) -> Self {
        let probes = probes
            .iter()
            .map(|p| Probe {
                name: p.name().to_string(),
                unit: match p.builtin {
                    Some(settings::Builtin::ReplicaLag | settings::Builtin::Canary) => " s",
                    _ => "",
                },
                failing: Mutex::new(None),
                gate: Mutex::new(ProbeGate::new(limits_of(p, None))),
                steer: Mutex::new(p.target(None).map(|t| steer_under(p, t))),
                baseline: Mutex::new(None),
                config: p.clone(),
            })
            .collect();
        Health {
            epoch: Instant::now(),
            probes,
            controls: Controls::default(),
            stats,
            last: Mutex::new(None),
            steering: true,
        }
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    pub fn controls(&self) -> &Controls {
        &self.controls
    }

    /// A probe's run ended with `reading`. A failure is logged when it starts or its
    /// reason changes, and the recovery once: not once per interval while it lasts.
    /// True when the canary's baseline is to be measured again (the steering is stuck
    /// under its target): the writes are held until it is.
    pub fn record(&self, index: usize, reading: Reading) -> bool {
        let probe = &self.probes[index];
        let mut failing = lock(&probe.failing);
        match &reading {
            Reading::Failed(why) if failing.as_ref() != Some(why) => {
                tracing::warn!(
                    probe = %probe.name,
                    "health probe failed, counted as over max: {}",
                    crate::redact::redact(why)
                );
                *failing = Some(why.clone());
            }
            Reading::Value(v) if failing.is_some() => {
                tracing::info!(probe = %probe.name, "health probe reads again: {v}");
                *failing = None;
            }
            _ => {}
        }
        drop(failing);
        let now = self.now();
        let mut stuck = None;
        if let (Reading::Value(v), Some(steer)) = (&reading, lock(&probe.steer).as_mut()) {
            steer.observe(now, *v, self.stats.written.load(Relaxed));
            // Only a target relative to the baseline moves with a new one.
            if self.steering && probe.config.target(None).is_none() && steer.stuck(now) {
                stuck = Some(steer.stuck_after());
            }
        }
        let mut gate = lock(&probe.gate);
        gate.observe(now, reading);
        if let Some(after) = stuck {
            gate.forget();
            tracing::warn!(
                probe = %probe.name,
                "over its target with the rate at its least for {after:?}: the writes are not \
                 what holds it up; measuring the baseline again with the writes held"
            );
        }
        stuck.is_some()
    }

    /// What to do now. A change of reason is logged once, with the probe and its value.
    pub fn verdict(&self) -> Verdict {
        let now = self.now();
        let mut verdict = Verdict::Go;
        for probe in &self.probes {
            let gate = lock(&probe.gate);
            let limits = gate.limits();
            match gate.state(now) {
                ProbeState::Critical(value) => {
                    verdict = Verdict::Stop {
                        probe: probe.name.clone(),
                        value,
                    };
                    break;
                }
                ProbeState::Held(why) if verdict == Verdict::Go => {
                    verdict = Verdict::Hold {
                        reason: probe.name.clone(),
                        detail: probe.describe(&why, limits),
                    };
                }
                _ => {}
            }
        }
        if verdict == Verdict::Go && self.controls.get().paused {
            verdict = Verdict::Hold {
                reason: "operator".into(),
                detail: "paused by the operator (sluice ctl resume)".into(),
            };
        }
        self.note(&verdict);
        verdict
    }

    fn note(&self, verdict: &Verdict) {
        let reason = match verdict {
            Verdict::Go => None,
            Verdict::Hold { reason, .. } => Some(reason.clone()),
            Verdict::Stop { probe, .. } => Some(probe.clone()),
        };
        self.stats.held.store(reason.is_some(), Relaxed);
        let mut last = lock(&self.last);
        if *last == reason {
            return;
        }
        match verdict {
            Verdict::Go => tracing::info!(
                "writes resume: {} no longer holds them",
                last.as_deref().unwrap_or("nothing")
            ),
            Verdict::Hold { detail, .. } => tracing::warn!("new writes held: {detail}"),
            Verdict::Stop { .. } => {}
        }
        *last = reason;
    }

    /// The reason writes are held now, if they are (as last decided at a tick).
    pub fn held_by(&self) -> Option<String> {
        lock(&self.last).clone()
    }

    pub fn probes(&self) -> Vec<ProbeView> {
        let now = self.now();
        self.probes
            .iter()
            .map(|p| {
                let gate = lock(&p.gate);
                let limits = gate.limits();
                let steer = lock(&p.steer);
                let baseline = *lock(&p.baseline);
                ProbeView {
                    name: p.name.clone(),
                    value: gate.value(),
                    max: limits.max.is_finite().then_some(limits.max),
                    critical: limits.critical,
                    target: steer.as_ref().map(ProbeTarget::target),
                    steered_rate: steer.as_ref().map(ProbeTarget::rate),
                    baseline: baseline.map(|(_, b)| b),
                    baseline_age_s: baseline.map(|(at, _)| now.saturating_sub(at).as_secs_f64()),
                    state: match gate.state(now) {
                        ProbeState::Clear => "ok".into(),
                        ProbeState::Held(why) => p.describe(&why, limits),
                        ProbeState::Critical(v) => {
                            format!("{} = {v}{} is above critical", p.name, p.unit)
                        }
                    },
                }
            })
            .collect()
    }
}

/// "replica_lag = 3.2 s, above max 2 s"
pub fn describe(name: &str, unit: &str, why: &Why, limits: ProbeLimits) -> String {
    let max = limits.max;
    match why {
        Why::Over(v) if *v > max => format!("{name} = {v:.3}{unit}, above max {max}{unit}"),
        Why::Over(v) => format!(
            "{name} = {v:.3}{unit}, not yet under {}{unit} (max {max}{unit} × resume_ratio)",
            max * limits.resume_ratio
        ),
        Why::Failed(e) => format!(
            "{name} could not be read ({}), counted as over max",
            crate::redact::redact(e)
        ),
        Why::Unknown => format!("{name} has not been read yet"),
        Why::Stale(age) => format!("{name} last read {age:.1?} ago, counted as over max"),
    }
}

/// The run stopped because a probe passed its `critical` limit.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "health probe {probe} = {value} is above its critical limit {critical}: stopped writing; what was written is checkpointed"
)]
pub struct Critical {
    pub probe: String,
    pub value: f64,
    pub critical: f64,
}

impl Health {
    /// The error for a `Verdict::Stop`.
    pub fn critical(&self, probe: &str, value: f64) -> Critical {
        let critical = self
            .probes
            .iter()
            .find(|p| p.name == probe)
            .and_then(|p| lock(&p.gate).limits().critical)
            .unwrap_or(value);
        Critical {
            probe: probe.to_string(),
            value,
            critical,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probes() -> Vec<ProbeSettings> {
        probes_of(
            "[[probe]]\nbuiltin = \"replica_lag\"\nmax = \"2s\"\ncritical = 30\n\
             [[probe]]\nbuiltin = \"active_sessions\"\nmax = 10\n",
        )
    }

    fn probes_of(toml: &str) -> Vec<ProbeSettings> {
        use figment::providers::{Format, Toml};
        #[derive(serde::Deserialize)]
        struct Doc {
            probe: Vec<ProbeSettings>,
        }
        let doc: Doc = figment::Figment::from(Toml::string(toml))
            .extract()
            .unwrap();
        doc.probe
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_probe_holding_names_the_reason_and_critical_wins() {
        let stats = Arc::new(Stats::default());
        let h = Health::new(&probes(), stats.clone());
        assert!(matches!(h.verdict(), Verdict::Hold { reason, .. } if reason == "replica_lag"));
        h.record(0, Reading::Value(0.5));
        assert!(
            matches!(h.verdict(), Verdict::Hold { reason, detail } if reason == "active_sessions" && detail.contains("not been read"))
        );
        h.record(1, Reading::Value(3.0));
        assert_eq!(h.verdict(), Verdict::Go);
        assert!(!stats.held.load(Relaxed));
        h.controls().pause("test");
        assert!(matches!(h.verdict(), Verdict::Hold { reason, .. } if reason == "operator"));
        assert!(stats.held.load(Relaxed));
        h.controls().resume("test");
        h.record(1, Reading::Value(12.0));
        let Verdict::Hold { reason, detail } = h.verdict() else {
            panic!("held")
        };
        assert_eq!(reason, "active_sessions");
        assert_eq!(detail, "active_sessions = 12.000, above max 10");
        assert_eq!(h.held_by().as_deref(), Some("active_sessions"));
        h.record(0, Reading::Value(31.0));
        assert_eq!(
            h.verdict(),
            Verdict::Stop {
                probe: "replica_lag".into(),
                value: 31.0
            }
        );
        let e = h.critical("replica_lag", 31.0);
        assert_eq!(e.critical, 30.0);
        assert!(e.to_string().contains("replica_lag = 31"));
    }

    /// The canary's baseline is the floor its steering measures room down to: read at its
    /// baseline under "2x", the rate doubles over one window (×1.375 measured down to 0).
    #[tokio::test(start_paused = true)]
    async fn a_canary_at_its_baseline_doubles_the_rate_per_window() {
        let stats = Arc::new(Stats::default());
        let h = Health::new(
            &probes_of("[[probe]]\nbuiltin = \"canary\"\ntarget = \"2x\"\n"),
            stats.clone(),
        );
        let baseline = 0.002;
        h.set_baseline(0, baseline);
        h.record(0, Reading::Value(baseline));
        // A hundred readings 50 ms apart (the default 5 s window), the worker writing the
        // rate.
        for _ in 0..100 {
            tokio::time::advance(Duration::from_millis(50)).await;
            let rate = h.steered_rate().unwrap().1;
            stats
                .written
                .fetch_add((rate * 0.05).round() as u64, Relaxed);
            h.record(0, Reading::Value(baseline));
        }
        let (name, rate) = h.steered_rate().unwrap();
        assert_eq!(name, "canary");
        assert!((rate - 2000.0).abs() < 1.0, "{rate}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_stops_answering_holds_once_its_reading_is_stale() {
        let h = Health::new(&probes()[..1], Arc::new(Stats::default()));
        h.record(0, Reading::Value(0.1));
        assert_eq!(h.verdict(), Verdict::Go);
        // interval 1 s, timeout 1 s: stale after 3 s.
        tokio::time::advance(Duration::from_millis(2900)).await;
        assert_eq!(h.verdict(), Verdict::Go);
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(
            matches!(h.verdict(), Verdict::Hold { detail, .. } if detail.contains("counted as over max"))
        );
    }
}
