//! Locking a mutex whose holder may have panicked: state shared across the pipeline's
//! threads stays usable after one of them fails. A leaf, so any module may use it.

use std::sync::{Mutex, MutexGuard};

/// Lock `m`, even if a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
