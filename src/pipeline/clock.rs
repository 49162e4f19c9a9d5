//! governor's clock over tokio's time, so the cadence follows `tokio::time::pause()` in
//! tests exactly as it follows the real clock in production.

use governor::clock::Clock;
use governor::nanos::Nanos;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(self.origin.elapsed())
    }
}
