//! A mutex whose holder panicked is still usable here: every guarded state is updated in
//! one step, so a panic elsewhere cannot leave it half-written, and a worker that keeps
//! delivering beats one that cascades a panic into every task sharing the lock.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering the guard if a holder panicked.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
