//! What a replay can record beyond its summary: the operators that ran in a time
//! window (for timelines) and a sample of scheduling decisions (for history).
//!
//! Recording is off by default and costs nothing then; when on, it is bounded
//! (`max_ops`) so a long replay cannot fill memory.

use serde::Serialize;
use slicesched_model::OpKind;

/// Which ops to record: those that start in `[from_ns, to_ns)`, at most `max_ops`
/// records (one per op per GPU of its group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpWindow {
    pub from_ns: u64,
    pub to_ns: u64,
    pub max_ops: usize,
}

impl OpWindow {
    /// The whole replay, capped at `max_ops` records.
    pub fn all(max_ops: usize) -> Self {
        Self { from_ns: 0, to_ns: u64::MAX, max_ops }
    }
}

/// One op as it ran on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OpRecord {
    pub gpu: u32,
    pub tenant: u32,
    pub kind: OpKind,
    /// Layer of layer ops; None for embedding and LM head.
    pub layer: Option<u32>,
    /// The iteration (micro-batch) the op belongs to, unique within the replay.
    pub iteration: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// What the cost model predicted on the tenant's home group; `end - start` can
    /// differ (another SKU, a context switch, MPS contention).
    pub predicted_ns: u64,
    /// Time its inputs spent crossing links before it could queue (0 when local).
    pub transfer_ns: u64,
    /// Ran away from the GPU group of its engine instance (in another tenant's slice).
    pub borrowed: bool,
    pub prefill_tokens: u32,
    pub decodes: u32,
}

/// One sampled policy call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DecisionRecord {
    pub at_ns: u64,
    /// Ready ops offered to the policy.
    pub ready_ops: u32,
    /// Of those, placed away from their home group.
    pub borrowed: u32,
    /// Placements the core refused in this call.
    pub rejected: u32,
}

/// Recording state kept by the replay.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub window: Option<OpWindow>,
    pub ops: Vec<OpRecord>,
    /// Per op slot: its input transfer time (kept only while recording).
    pub op_xfer: Vec<u64>,
    pub decisions_every: u64,
    pub decisions: Vec<DecisionRecord>,
    /// Placements rejected so far (to tell a decision's own rejections).
    pub rejected_total: u64,
}

impl Recorder {
    pub fn new(window: Option<OpWindow>, decisions_every: u64) -> Self {
        Self { window, decisions_every, ..Default::default() }
    }

    /// Whether an op starting at `start_ns` is recorded.
    #[inline]
    pub fn wants(&self, start_ns: u64) -> bool {
        self.window.is_some_and(|w| start_ns >= w.from_ns && start_ns < w.to_ns && self.ops.len() < w.max_ops)
    }

    #[inline]
    pub fn recording(&self) -> bool {
        self.window.is_some()
    }

    pub fn set_xfer(&mut self, slot: usize, ns: u64) {
        if self.op_xfer.len() <= slot {
            self.op_xfer.resize(slot + 1, 0);
        }
        self.op_xfer[slot] = ns;
    }

    pub fn xfer(&self, slot: usize) -> u64 {
        self.op_xfer.get(slot).copied().unwrap_or(0)
    }
}
