//! The rate the worker should run at, set from outside the loop (leases, operators,
//! tests) and picked up by the pipeline at its next tick.

use std::sync::Arc;

use crate::atomic_f64::AtomicF64;

/// A shared records-per-second value; clones see the same value.
#[derive(Debug, Clone)]
pub struct TargetRate(Arc<AtomicF64>);

impl TargetRate {
    pub fn new(rate: f64) -> Self {
        TargetRate(Arc::new(AtomicF64::new(rate)))
    }

    pub fn get(&self) -> f64 {
        self.0.get()
    }

    /// Ignores anything but a finite rate ≥ 0 (0: hold everything).
    pub fn set(&self, rate: f64) {
        if rate.is_finite() && rate >= 0.0 {
            self.0.set(rate);
        }
    }
}
