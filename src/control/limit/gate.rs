//! The concurrency limit as the pipeline and its deliveries share it: deliveries report
//! every sink write (latency, writes in flight when it started, whether the sink pushed
//! back); the pipeline admits a new batch only while batches in flight < the limit.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use super::{ConcurrencyLimit, Sample};

pub struct LimitGate {
    limit: Mutex<Box<dyn ConcurrencyLimit>>,
    writes_in_flight: AtomicUsize,
}

impl LimitGate {
    pub fn new(limit: Box<dyn ConcurrencyLimit>) -> Self {
        LimitGate {
            limit: Mutex::new(limit),
            writes_in_flight: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.lock().limit().max(1)
    }

    /// A write starts; returns the writes in flight, itself included.
    pub fn started(&self) -> usize {
        self.writes_in_flight.fetch_add(1, SeqCst) + 1
    }

    /// The write that `started` returned `inflight` for has ended.
    pub fn finished(&self, rtt: Duration, inflight: usize, dropped: bool) {
        self.writes_in_flight.fetch_sub(1, SeqCst);
        self.lock().on_sample(Sample {
            rtt,
            inflight,
            dropped,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn ConcurrencyLimit>> {
        self.limit.lock().unwrap_or_else(|p| p.into_inner())
    }
}
