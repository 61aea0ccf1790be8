//! Per-GPU memory ledger: weights, KV-cache pool, activations, over time.

use serde::Serialize;

/// What a byte of device memory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    Weights,
    KvPool,
    Activations,
}

/// Bucket width of the memory-over-time series.
pub const MEM_BUCKET_NS: u64 = 1_000_000_000;

/// One GPU's memory. Allocation never fails here: the ledger records what happened
/// (an OOM is counted, not prevented); preventing it is the scheduler's job.
#[derive(Debug, Clone, Serialize)]
pub struct MemLedger {
    pub capacity: u64,
    pub weights: u64,
    pub kv_pool: u64,
    pub activations: u64,
    pub peak: u64,
    pub oom_events: u64,
    /// Peak bytes in use per [`MEM_BUCKET_NS`] bucket.
    pub peak_by_bucket: Vec<u64>,
}

impl MemLedger {
    pub fn new(capacity: u64) -> Self {
        Self { capacity, weights: 0, kv_pool: 0, activations: 0, peak: 0, oom_events: 0, peak_by_bucket: Vec::new() }
    }

    pub fn used(&self) -> u64 {
        self.weights + self.kv_pool + self.activations
    }

    pub fn free(&self) -> u64 {
        self.capacity.saturating_sub(self.used())
    }

    #[inline]
    pub fn alloc(&mut self, kind: MemoryKind, bytes: u64, now: u64) {
        match kind {
            MemoryKind::Weights => self.weights += bytes,
            MemoryKind::KvPool => self.kv_pool += bytes,
            MemoryKind::Activations => self.activations += bytes,
        }
        let used = self.used();
        if used > self.capacity {
            self.oom_events += 1;
        }
        self.peak = self.peak.max(used);
        let b = (now / MEM_BUCKET_NS) as usize;
        if self.peak_by_bucket.len() <= b {
            // Buckets without an allocation hold the level in use before this one.
            self.peak_by_bucket.resize(b + 1, used - bytes);
        }
        let slot = &mut self.peak_by_bucket[b];
        *slot = (*slot).max(used);
    }

    #[inline]
    pub fn release(&mut self, kind: MemoryKind, bytes: u64) {
        let slot = match kind {
            MemoryKind::Weights => &mut self.weights,
            MemoryKind::KvPool => &mut self.kv_pool,
            MemoryKind::Activations => &mut self.activations,
        };
        debug_assert!(*slot >= bytes, "releasing more {kind:?} than held");
        *slot = slot.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_peak_and_oom() {
        let mut m = MemLedger::new(100);
        m.alloc(MemoryKind::Weights, 60, 0);
        m.alloc(MemoryKind::Activations, 30, 5);
        m.release(MemoryKind::Activations, 30);
        assert_eq!(m.peak, 90);
        assert_eq!(m.oom_events, 0);
        m.alloc(MemoryKind::Activations, 50, 2 * MEM_BUCKET_NS);
        assert_eq!(m.oom_events, 1);
        assert_eq!(m.peak_by_bucket, vec![90, 60, 110]);
    }
}
