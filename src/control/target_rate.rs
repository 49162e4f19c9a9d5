//! The rate the worker should run at, set from outside the loop (leases, operators,
//! tests) and picked up by the pipeline at its next tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A shared records-per-second value; clones see the same value.
#[derive(Debug, Clone)]
pub struct TargetRate(Arc<AtomicU64>);

impl TargetRate {
    pub fn new(rate: f64) -> Self {
        TargetRate(Arc::new(AtomicU64::new(rate.to_bits())))
    }

    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Relaxed))
    }

    /// Ignores anything but a finite rate ≥ 0 (0: hold everything).
    pub fn set(&self, rate: f64) {
        if rate.is_finite() && rate >= 0.0 {
            self.0.store(rate.to_bits(), Relaxed);
        }
    }
}
