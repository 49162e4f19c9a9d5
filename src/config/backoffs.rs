//! Every backoff the worker waits by, built from `[retry]` and `[throttle]` in this one
//! place, so that a key changes every wait it should and no wait has numbers of its own.

use std::time::Duration;

use crate::control::backoff::Backoff;

use super::{RetrySettings, ThrottleSettings};

/// An AMQP connection lost is tried again at most this far apart, whatever
/// `retry.max_delay` says: a broker back from a restart should not wait minutes for us.
const MOST_RECONNECT_DELAY: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Backoffs {
    /// Between attempts at a batch the sink failed: `retry.min_delay` … `retry.max_delay`.
    pub retry: Backoff,
    /// While the sink is out — not taking writes, not opening yet, or an endpoint of a
    /// balanced sink down: `retry.min_delay` … `throttle.max_pause`, which bounds how late
    /// the worker notices that the sink is back.
    pub outage: Backoff,
    /// Between attempts to reconnect to the source's broker.
    pub reconnect: Backoff,
}

impl Backoffs {
    pub fn new(retry: &RetrySettings, throttle: &ThrottleSettings) -> Self {
        Backoffs {
            retry: Backoff::new(retry.min_delay, retry.max_delay, retry.factor),
            outage: Backoff::new(
                retry.min_delay.min(throttle.max_pause),
                throttle.max_pause,
                retry.factor,
            ),
            reconnect: Backoff::new(
                retry.min_delay,
                retry.max_delay.min(MOST_RECONNECT_DELAY),
                retry.factor,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ms;

    #[test]
    fn each_backoff_reads_its_keys() {
        let retry = RetrySettings {
            min_delay: ms(50),
            max_delay: Duration::from_secs(60),
            factor: 3.0,
            ..RetrySettings::default()
        };
        let throttle = ThrottleSettings {
            max_pause: ms(800),
            ..ThrottleSettings::default()
        };
        let b = Backoffs::new(&retry, &throttle);
        assert_eq!(b.retry.ceiling(1), ms(50));
        assert_eq!(b.retry.ceiling(2), ms(150));
        assert_eq!(b.retry.ceiling(20), Duration::from_secs(60));
        assert_eq!(b.outage.ceiling(2), ms(150));
        assert_eq!(b.outage.ceiling(20), ms(800));
        assert_eq!(b.reconnect.ceiling(20), MOST_RECONNECT_DELAY);
    }

    #[test]
    fn an_outage_never_waits_past_max_pause_even_when_retries_start_later() {
        let retry = RetrySettings {
            min_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(4),
            ..RetrySettings::default()
        };
        let b = Backoffs::new(&retry, &ThrottleSettings::default());
        for attempt in 1..10 {
            assert_eq!(b.outage.ceiling(attempt), ms(500));
        }
    }
}
