//! A switchable outage: for a while the emulated database answers 503 at once, or holds
//! every request without an answer until the outage ends (then 503) — a dead backend behind
//! a load balancer, or a database that stopped responding.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum OutageMode {
    #[default]
    #[serde(rename = "503")]
    Unavailable,
    #[serde(rename = "hang")]
    Hang,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Outage {
    until: Duration,
    mode: OutageMode,
}

impl Outage {
    /// Starts (or, with a zero length, ends) an outage at `now`.
    pub fn set(&mut self, now: Duration, length: Duration, mode: OutageMode) {
        self.until = now + length;
        self.mode = mode;
    }

    /// The outage in force at `now`, and how long it has left.
    pub fn active(&self, now: Duration) -> Option<(OutageMode, Duration)> {
        (now < self.until).then(|| (self.mode, self.until - now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lasts_its_length_and_can_be_ended() {
        let s = Duration::from_secs;
        let mut o = Outage::default();
        assert_eq!(o.active(s(0)), None);
        o.set(s(5), s(10), OutageMode::Hang);
        assert_eq!(o.active(s(6)), Some((OutageMode::Hang, s(9))));
        assert_eq!(o.active(s(15)), None);
        o.set(s(20), s(10), OutageMode::Unavailable);
        o.set(s(21), s(0), OutageMode::Unavailable);
        assert_eq!(o.active(s(21)), None);
    }
}
