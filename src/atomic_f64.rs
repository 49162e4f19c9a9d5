//! An `f64` several tasks read and write without a lock: a rate, a share, a limit.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// An `f64` shared without a lock, kept as its bits; starts at 1.0 (a full share).
#[derive(Debug)]
pub struct AtomicF64(AtomicU64);

impl Default for AtomicF64 {
    fn default() -> Self {
        AtomicF64::new(1.0)
    }
}

impl AtomicF64 {
    pub fn new(value: f64) -> Self {
        AtomicF64(AtomicU64::new(value.to_bits()))
    }

    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Relaxed))
    }

    pub fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Relaxed);
    }
}
