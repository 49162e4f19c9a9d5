//! The database's own health and the operator's say, turned into what the pipeline does
//! at each tick: write, hold new writes (and why), or stop. Probes run as tasks of their
//! own ([`probe`]) and report here; the decisions are [`crate::control::health`]'s.

pub mod controls;
pub mod probe;
pub mod query;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::config::health::ProbeConfig;
use crate::control::health::{ProbeGate, ProbeLimits, ProbeState, Reading, Why};
use crate::stats::Stats;
use controls::Controls;

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
}

/// One probe as `/control/status` and `/metrics` show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeView {
    pub name: String,
    pub value: Option<f64>,
    pub max: f64,
    pub critical: Option<f64>,
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
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Health {
    pub fn new(probes: &[ProbeConfig], stats: Arc<Stats>) -> Self {
        let probes = probes
            .iter()
            .map(|p| Probe {
                name: p.name().to_string(),
                unit: match p.builtin {
                    Some(crate::config::health::Builtin::ReplicaLag) => " s",
                    _ => "",
                },
                gate: Mutex::new(ProbeGate::new(ProbeLimits {
                    max: p.max(),
                    resume_ratio: p.resume_ratio,
                    critical: p.critical(),
                    stale_after: p.stale_after(),
                })),
            })
            .collect();
        Health {
            epoch: Instant::now(),
            probes,
            controls: Controls::default(),
            stats,
            last: Mutex::new(None),
        }
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    pub fn controls(&self) -> &Controls {
        &self.controls
    }

    /// A probe's run ended with `reading`.
    pub fn record(&self, index: usize, reading: Reading) {
        let probe = &self.probes[index];
        if let Reading::Failed(why) = &reading {
            tracing::warn!(
                probe = %probe.name,
                "health probe failed, counted as over max: {}",
                crate::redact::redact(why)
            );
        }
        lock(&probe.gate).observe(self.now(), reading);
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
                        detail: describe(&probe.name, probe.unit, &why, limits),
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
                ProbeView {
                    name: p.name.clone(),
                    value: gate.value(),
                    max: limits.max,
                    critical: limits.critical,
                    state: match gate.state(now) {
                        ProbeState::Clear => "ok".into(),
                        ProbeState::Held(why) => describe(&p.name, p.unit, &why, limits),
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
