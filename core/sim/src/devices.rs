//! GPUs and GPU groups at run time: who is busy, what waits for whom, idle gaps.

use crate::metrics::GapHistogram;
use slicesched_gmg::{Deployment, GroupId, MemLedger, OpId};
use slicesched_hw::Cluster;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub(crate) struct GpuRt {
    pub busy: bool,
    pub idle_since: u64,
    pub busy_ns: u64,
    pub gaps: GapHistogram,
    pub ledger: MemLedger,
    pub queued: u32,
    pub busy_until: u64,
    pub ops: u64,
}

/// An op waiting for its group: higher priority first, then the one placed first;
/// its predicted duration rides along for the queued-work estimate.
type Queued = (i32, Reverse<u64>, OpId, u64);

pub(crate) struct GroupRt {
    pub gpus: Vec<usize>,
    queue: BinaryHeap<Queued>,
    queued_ns: u64,
    /// Groups sharing a GPU with this one, itself included, in id order.
    pub overlapping: Vec<GroupId>,
    /// Tenants whose home includes a GPU of this group: their ops go first here.
    pub owners: Vec<slicesched_gmg::TenantId>,
}

pub(crate) struct Devices {
    pub gpus: Vec<GpuRt>,
    pub groups: Vec<GroupRt>,
    seq: u64,
}

impl GroupRt {
    /// Predicted ns of the ops waiting for this group.
    pub fn queued_ns(&self) -> u64 {
        self.queued_ns
    }
}

impl Devices {
    pub fn new(cluster: &Cluster, dep: &Deployment) -> Self {
        let gpus = cluster
            .gpus
            .iter()
            .map(|g| GpuRt {
                busy: false,
                idle_since: 0,
                busy_ns: 0,
                gaps: GapHistogram::default(),
                ledger: MemLedger::new(g.sku.memory),
                queued: 0,
                busy_until: 0,
                ops: 0,
            })
            .collect();
        let groups = dep
            .groups
            .iter()
            .map(|g| GroupRt {
                gpus: g.gpus.iter().map(|x| x.0 as usize).collect(),
                queue: BinaryHeap::new(),
                queued_ns: 0,
                overlapping: dep
                    .groups
                    .iter()
                    .filter(|o| o.gpus.iter().any(|x| g.gpus.contains(x)))
                    .map(|o| o.id)
                    .collect(),
                owners: dep
                    .homes
                    .iter()
                    .filter(|h| h.is_home && dep.group(h.group).gpus.iter().any(|x| g.gpus.contains(x)))
                    .map(|h| h.tenant)
                    .collect(),
            })
            .collect();
        Self { gpus, groups, seq: 0 }
    }

    /// Whether an op placed on `group` now would start at once: its GPUs are idle and
    /// nothing waits on any group sharing them.
    pub fn can_start_now(&self, group: GroupId) -> bool {
        let g = &self.groups[group.index()];
        self.idle(group.index()) && g.overlapping.iter().all(|o| self.groups[o.index()].queue.is_empty())
    }

    pub fn enqueue(&mut self, group: GroupId, op: OpId, priority: i32, dur: u64) {
        self.seq += 1;
        let g = &mut self.groups[group.index()];
        g.queue.push((priority, Reverse(self.seq), op, dur));
        g.queued_ns += dur;
        for &x in &g.gpus {
            self.gpus[x].queued += 1;
        }
    }

    fn idle(&self, group: usize) -> bool {
        self.groups[group].gpus.iter().all(|&x| !self.gpus[x].busy)
    }

    /// Pops the op that should start next on a group overlapping `around`, if any
    /// such group is entirely idle and has work.
    pub fn next_startable(&mut self, around: GroupId) -> Option<(GroupId, OpId, u64)> {
        let mut best: Option<(Queued, GroupId)> = None;
        for &g in &self.groups[around.index()].overlapping {
            let Some(&head) = self.groups[g.index()].queue.peek() else { continue };
            if !self.idle(g.index()) {
                continue;
            }
            if best.is_none_or(|(b, _)| head > b) {
                best = Some((head, g));
            }
        }
        let (_, g) = best?;
        let (_, _, op, dur) = self.groups[g.index()].queue.pop().expect("peeked");
        self.groups[g.index()].queued_ns -= dur;
        for &x in &self.groups[g.index()].gpus {
            self.gpus[x].queued -= 1;
        }
        Some((g, op, dur))
    }

    /// Marks the group's GPUs busy from `now` until `end`, closing their idle gaps.
    pub fn occupy(&mut self, group: GroupId, now: u64, end: u64) {
        for i in 0..self.groups[group.index()].gpus.len() {
            let x = self.groups[group.index()].gpus[i];
            let gpu = &mut self.gpus[x];
            debug_assert!(!gpu.busy);
            gpu.busy = true;
            gpu.busy_until = end;
            gpu.ops += 1;
            gpu.gaps.record(now - gpu.idle_since);
        }
    }

    /// Marks the group's GPUs idle at `now` after work that started at `start`.
    pub fn release(&mut self, group: GroupId, start: u64, now: u64) {
        for i in 0..self.groups[group.index()].gpus.len() {
            let x = self.groups[group.index()].gpus[i];
            let gpu = &mut self.gpus[x];
            gpu.busy = false;
            gpu.busy_ns += now - start;
            gpu.idle_since = now;
        }
    }
}
