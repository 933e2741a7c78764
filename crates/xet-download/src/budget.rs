//! The memory budget ([`crate::DownloadOptions::memory_budget`]): fetched bytes held in
//! memory, across all files of one [`crate::download`] call.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A byte budget: a semaphore whose permits are KiB.
pub(crate) struct MemoryBudget {
    sem: Arc<Semaphore>,
    units: u32,
}

impl MemoryBudget {
    pub fn new(bytes: u64) -> Self {
        let units = (bytes / 1024).clamp(1, u64::from(u32::MAX >> 4)) as u32;
        MemoryBudget {
            sem: Arc::new(Semaphore::new(units as usize)),
            units,
        }
    }
    /// Reserve `bytes` (at most the whole budget, so one large request still runs).
    pub async fn reserve(&self, bytes: u64) -> OwnedSemaphorePermit {
        let units = bytes.div_ceil(1024).clamp(1, u64::from(self.units)) as u32;
        self.sem
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("memory semaphore is never closed")
    }
    /// Reserve `bytes` if that much is free now (at most the whole budget).
    pub fn try_reserve(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let units = bytes.div_ceil(1024).clamp(1, u64::from(self.units)) as u32;
        self.sem.clone().try_acquire_many_owned(units).ok()
    }
    /// Give back all of `permit` above `bytes`.
    pub fn shrink(&self, permit: &mut OwnedSemaphorePermit, bytes: u64) {
        let keep = bytes.div_ceil(1024).clamp(1, u64::from(self.units)) as usize;
        if let Some(extra) = permit.num_permits().checked_sub(keep).filter(|&e| e > 0) {
            drop(permit.split(extra));
        }
    }
}
