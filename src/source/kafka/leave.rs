//! Leaving the group without waiting forever. Dropping a group consumer closes it, and
//! librdkafka's close waits until the group has let it go: a broker that holds the
//! consumer's JoinGroup through a rebalance (up to `max.poll.interval.ms`, 5 minutes) kept
//! a worker alive that long after SIGTERM. By then the final commit has been made (or has
//! failed and been reported), so nothing rides on the close: it is given a thread of its
//! own and a bounded wait, and a member that did not finish leaving is dropped from the
//! group by its session timeout.

use std::ops::Deref;
use std::sync::mpsc;
use std::time::Duration;

/// Owns a value whose drop may block, and drops it on a thread of its own, waiting at
/// most `limit` for it.
pub struct DropWithin<T: Send + 'static> {
    value: Option<T>,
    limit: Duration,
    what: &'static str,
}

impl<T: Send + 'static> DropWithin<T> {
    pub fn new(value: T, limit: Duration, what: &'static str) -> Self {
        DropWithin {
            value: Some(value),
            limit,
            what,
        }
    }
}

impl<T: Send + 'static> Deref for DropWithin<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.value.as_ref().expect("held until dropped")
    }
}

impl<T: Send + 'static> Drop for DropWithin<T> {
    fn drop(&mut self) {
        let Some(value) = self.value.take() else {
            return;
        };
        let (done, finished) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("sluice-close".into())
            .spawn(move || {
                drop(value);
                let _ = done.send(());
            });
        if spawned.is_err() {
            tracing::warn!(
                "{}: no thread to close it on; left to the process exit",
                self.what
            );
            return;
        }
        if finished.recv_timeout(self.limit).is_err() {
            tracing::warn!(
                "{} did not finish closing within {:?}; left to the process exit (the group drops it after its session timeout)",
                self.what,
                self.limit
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Blocks its drop until `release` is sent, then records that it ran.
    struct SlowToClose {
        release: mpsc::Receiver<()>,
        closed: Arc<AtomicBool>,
    }

    impl Drop for SlowToClose {
        fn drop(&mut self) {
            let _ = self.release.recv();
            self.closed.store(true, Ordering::SeqCst);
        }
    }

    fn slow(closed: &Arc<AtomicBool>) -> (mpsc::Sender<()>, SlowToClose) {
        let (release, wait) = mpsc::channel();
        let value = SlowToClose {
            release: wait,
            closed: closed.clone(),
        };
        (release, value)
    }

    #[test]
    fn a_close_that_never_ends_does_not_hold_the_owner() {
        let closed = Arc::new(AtomicBool::new(false));
        let (release, value) = slow(&closed);
        // The owner drops on a thread of its own, so a drop that blocked would fail this
        // test instead of hanging it.
        let owner = DropWithin::new(value, Duration::from_millis(20), "test");
        let (returned, owner_done) = mpsc::channel();
        std::thread::spawn(move || {
            drop(owner);
            let _ = returned.send(());
        });
        let back = owner_done.recv_timeout(Duration::from_secs(30));
        assert!(back.is_ok(), "the owner waited for the close");
        assert!(
            !closed.load(Ordering::SeqCst),
            "still closing on its thread"
        );
        drop(release);
    }

    #[test]
    fn a_close_that_ends_in_time_has_ended_when_the_owner_goes_on() {
        let closed = Arc::new(AtomicBool::new(false));
        let (release, value) = slow(&closed);
        release.send(()).unwrap();
        drop(DropWithin::new(value, Duration::from_secs(600), "test"));
        assert!(closed.load(Ordering::SeqCst));
    }
}
