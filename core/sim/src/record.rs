//! What a replay can record beyond its summary: the operators that ran in a time
//! window (for timelines) and a sample of scheduling decisions (for history).
//!
//! Recording is off by default and costs nothing then; when on, it is bounded
//! (`max_ops`) so a long replay cannot fill memory.

use serde::Serialize;
use slicesched_model::OpKind;

/// Which ops to record: those that start in `[from_ns, to_ns)` — and, with `every_ns`,
/// in the same span repeated every `every_ns` after it (a live server's sample) — at
/// most `max_ops` records held at once (one per op per GPU of its group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpWindow {
    pub from_ns: u64,
    pub to_ns: u64,
    pub max_ops: usize,
    /// 0: one window.
    pub every_ns: u64,
}

impl OpWindow {
    /// The whole replay, capped at `max_ops` records.
    pub fn all(max_ops: usize) -> Self {
        Self { from_ns: 0, to_ns: u64::MAX, max_ops, every_ns: 0 }
    }

    /// `[from_ns, to_ns)` once.
    pub fn once(from_ns: u64, to_ns: u64, max_ops: usize) -> Self {
        Self { from_ns, to_ns, max_ops, every_ns: 0 }
    }

    /// Whether an op starting at `t` falls in the window (or one of its repeats).
    #[inline]
    pub fn contains(&self, t: u64) -> bool {
        if t < self.from_ns {
            return false;
        }
        match self.every_ns {
            0 => t < self.to_ns,
            every => (t - self.from_ns) % every < self.to_ns - self.from_ns,
        }
    }

    /// Whether `[a, b)` meets the window (or one of its repeats).
    pub fn overlaps(&self, a: u64, b: u64) -> bool {
        if b <= self.from_ns {
            return false;
        }
        match self.every_ns {
            0 => a < self.to_ns,
            every => {
                let a = a.max(self.from_ns);
                b - a >= every || self.contains(a) || (a - self.from_ns) % every + (b - a) > every
            }
        }
    }

    /// Repeat `k`'s span: (from, to).
    pub fn repeat(&self, k: u64) -> (u64, u64) {
        let from = self.from_ns + k * self.every_ns.max(1);
        (from, from + (self.to_ns - self.from_ns))
    }

    /// The repeats that ended by `now`, from repeat `first` on: (index, from, to).
    pub fn closed_since(&self, first: u64, now: u64) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        (first..)
            .map(move |k| {
                let (from, to) = self.repeat(k);
                (k, from, to)
            })
            .take_while(move |w| w.2 <= now)
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
        self.window.is_some_and(|w| w.contains(start_ns) && self.ops.len() < w.max_ops)
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

#[cfg(test)]
mod tests {
    use super::OpWindow;

    #[test]
    fn a_repeated_window_holds_the_same_span_of_every_period() {
        // 1 s of every 10 s, from 5 s.
        let w = OpWindow { from_ns: 5, to_ns: 6, max_ops: 10, every_ns: 10 };
        let inside: Vec<u64> = (0..40).filter(|&t| w.contains(t)).collect();
        assert_eq!(inside, [5, 15, 25, 35]);
        assert!(w.overlaps(14, 16) && w.overlaps(6, 16) && !w.overlaps(6, 15) && !w.overlaps(0, 5));
        assert!(w.overlaps(7, 100), "longer than a period");
        let closed: Vec<_> = w.closed_since(1, 26).collect();
        assert_eq!(closed, [(1, 15, 16), (2, 25, 26)]);
        let once = OpWindow::once(5, 8, 10);
        assert!(once.contains(7) && !once.contains(8) && !once.contains(15));
        assert!(once.overlaps(0, 6) && !once.overlaps(8, 20));
    }
}
