//! Progress reports of `create`, `import` and `verify`, in bytes of objects.

/// Told how many bytes of objects an operation will go through, then each piece done.
/// Called from async tasks and blocking threads alike: implementations only count.
pub trait Progress: Send + Sync {
    /// The total, once known.
    fn start(&self, _total_bytes: u64) {}
    /// `bytes` more are done.
    fn advance(&self, _bytes: u64) {}
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
