//! The level of writes in flight at which the sink last pushed back, and how long growth
//! back to it waits: 1, 2, 4 … [`MAX_HOLD`] rounds below it while its probes keep
//! failing, as CUBIC plateaus near its last maximum, so that probing a hard limit costs
//! little; a probe that holds forgets the level.

/// The most rounds a level that was pushed back at is held off for.
const MAX_HOLD: u32 = 16;

#[derive(Debug, Clone, Default)]
pub struct PushedBack {
    /// The most writes in flight of the last round pushed back, while growth to it waits.
    at: Option<usize>,
    /// Rounds to wait below `at` before probing it again, and waited so far.
    hold: u32,
    held: u32,
}

impl PushedBack {
    /// The sink pushed back a round with at most `inflight` in flight: the same level again
    /// doubles the wait.
    pub fn pushed_back(&mut self, inflight: usize) {
        self.hold = if self.at == Some(inflight) {
            (self.hold * 2).clamp(1, MAX_HOLD)
        } else {
            1
        };
        self.held = 0;
        self.at = Some(inflight);
    }

    /// A round ran with `inflight` in flight without push-back: at or past the level, the
    /// probe held.
    pub fn ran(&mut self, inflight: usize) {
        if self.at.is_some_and(|at| inflight >= at) {
            self.at = None;
        }
    }

    /// The level pushed back at, while growth to it waits.
    pub fn level(&self) -> Option<usize> {
        self.at
    }

    /// Whether the limit may grow from `limit` to `new`: not while that would probe the
    /// level before its wait is over (the round counts towards the wait).
    pub fn allows(&mut self, limit: f64, new: f64) -> bool {
        let probes = self.at.is_some_and(|at| new as usize >= at && new > limit);
        if probes && self.held < self.hold {
            self.held += 1;
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failed_probe_of_the_same_level_doubles_the_wait_up_to_sixteen_rounds() {
        let mut p = PushedBack::default();
        let mut waits = Vec::new();
        for _ in 0..7 {
            p.pushed_back(6);
            let mut rounds = 0;
            while !p.allows(5.0, 6.0) {
                rounds += 1;
            }
            waits.push(rounds);
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 16, 16]);
        // Growth below the level is never held; a round at the level forgets it.
        p.pushed_back(6);
        assert!(p.allows(4.0, 5.0));
        p.ran(6);
        assert_eq!(p.level(), None);
        assert!(p.allows(5.0, 6.0));
        // Another level starts again at one round.
        p.pushed_back(6);
        p.pushed_back(9);
        assert!(!p.allows(8.0, 9.0));
        assert!(p.allows(8.0, 9.0));
    }
}
