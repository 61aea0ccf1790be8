//! GPUs and their run queues at run time: who is busy, what waits for whom, idle gaps.
//!
//! Each GPU has one execution lane (ops run one at a time, the way one process's
//! stream runs them), or, under MPS-style spatial sharing, one lane per tenant resident
//! on it, running concurrently. A queue holds the ops waiting for one GPU group on one
//! lane; an op starts when its lane is idle on every GPU of its group.

use crate::metrics::GapHistogram;
use slicesched_gmg::{Deployment, GroupId, MemLedger, OpId, TenantId};
use slicesched_hw::Cluster;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub(crate) struct GpuRt {
    lane_busy: Vec<bool>,
    busy_lanes: u32,
    busy_since: u64,
    pub idle_since: u64,
    pub busy_ns: u64,
    pub gaps: GapHistogram,
    pub gap_lengths: crate::metrics::GapLengths,
    pub ledger: MemLedger,
    pub busy_until: u64,
    pub ops: u64,
    /// Tenant of the last op started here (context switches under time-slicing).
    pub last_tenant: Option<TenantId>,
    /// Tenants with a lane here (MPS), lane = position.
    lanes_of: Vec<TenantId>,
}

impl GpuRt {
    pub fn busy(&self) -> bool {
        self.busy_lanes > 0
    }
    /// Lanes (MPS clients) on this GPU; 1 without spatial sharing.
    pub fn lanes(&self) -> u32 {
        self.lane_busy.len() as u32
    }
}

/// An op waiting: higher priority first, then the one queued first; its predicted
/// duration rides along for the queued-work estimate, and whether it is borrowed (its
/// home is another group: `Sim::recall_guests` may take it back).
type Queued = (i32, Reverse<u64>, OpId, u64, bool);

pub(crate) struct QueueRt {
    pub group: GroupId,
    pub gpus: Vec<usize>,
    /// Lane on each GPU of `gpus`.
    lanes: Vec<usize>,
    queue: BinaryHeap<Queued>,
    queued_ns: u64,
    /// Borrowed ops in `queue`.
    borrowed: u32,
    /// Queues sharing a lane on some GPU with this one, itself included.
    overlapping: Vec<usize>,
    /// Tenants whose home includes a GPU of this group: their ops go first here.
    pub owners: Vec<TenantId>,
    /// The most lanes on any of its GPUs (fixed for the run; read at every op start).
    pub max_lanes: u32,
}

impl QueueRt {
    /// Predicted ns of the ops waiting in this queue.
    pub fn queued_ns(&self) -> u64 {
        self.queued_ns
    }
}

pub(crate) struct Devices {
    pub gpus: Vec<GpuRt>,
    pub queues: Vec<QueueRt>,
    /// Queue of (group, lane tenant); without spatial sharing, queue = group.
    spatial: bool,
    seq: u64,
}

impl Devices {
    pub fn new(cluster: &Cluster, dep: &Deployment, spatial: bool) -> Self {
        let mut gpus: Vec<GpuRt> = cluster
            .gpus
            .iter()
            .map(|g| GpuRt {
                lane_busy: vec![false],
                busy_lanes: 0,
                busy_since: 0,
                idle_since: 0,
                busy_ns: 0,
                gaps: GapHistogram::default(),
                gap_lengths: Default::default(),
                ledger: MemLedger::new(g.sku.memory),
                busy_until: 0,
                ops: 0,
                last_tenant: None,
                lanes_of: Vec::new(),
            })
            .collect();
        let owners = |g: &slicesched_gmg::Group| -> Vec<TenantId> {
            dep.homes
                .iter()
                .filter(|h| h.is_home && dep.group(h.group).gpus.iter().any(|x| g.gpus.contains(x)))
                .map(|h| h.tenant)
                .collect()
        };
        let mut queues = Vec::new();
        if spatial {
            for h in &dep.homes {
                for x in &dep.group(h.group).gpus {
                    let gpu = &mut gpus[x.0 as usize];
                    if !gpu.lanes_of.contains(&h.tenant) {
                        gpu.lanes_of.push(h.tenant);
                    }
                }
            }
            for g in gpus.iter_mut() {
                g.lane_busy = vec![false; g.lanes_of.len().max(1)];
            }
        }
        // One queue per group, or under spatial sharing one per (group, tenant with
        // weights on it), in deployment order.
        for g in &dep.groups {
            let gi: Vec<usize> = g.gpus.iter().map(|x| x.0 as usize).collect();
            let mut tenants: Vec<Option<TenantId>> = if spatial {
                dep.homes.iter().filter(|h| h.group == g.id).map(|h| Some(h.tenant)).collect()
            } else {
                vec![None]
            };
            tenants.dedup();
            for t in tenants {
                // Without spatial sharing every op runs on lane 0.
                let lanes = gi
                    .iter()
                    .map(|&x| t.map_or(0, |t| gpus[x].lanes_of.iter().position(|&o| o == t).expect("lane")))
                    .collect();
                queues.push(QueueRt {
                    group: g.id,
                    gpus: gi.clone(),
                    lanes,
                    queue: BinaryHeap::new(),
                    queued_ns: 0,
                    borrowed: 0,
                    overlapping: Vec::new(),
                    owners: owners(g),
                    max_lanes: gi.iter().map(|&x| gpus[x].lanes()).max().unwrap_or(1),
                });
            }
        }
        for i in 0..queues.len() {
            let overlapping = (0..queues.len())
                .filter(|&j| {
                    queues[i]
                        .gpus
                        .iter()
                        .zip(&queues[i].lanes)
                        .any(|(g, l)| queues[j].gpus.iter().zip(&queues[j].lanes).any(|(h, m)| g == h && l == m))
                })
                .collect();
            queues[i].overlapping = overlapping;
        }
        Self { gpus, queues, spatial, seq: 0 }
    }

    /// The queue that runs `tenant`'s ops placed on `group`.
    pub fn queue_of(&self, group: GroupId, tenant: TenantId) -> usize {
        if !self.spatial {
            return group.index();
        }
        let x =
            self.queues.iter().position(|q| q.group == group && self.gpus[q.gpus[0]].lanes_of[q.lanes[0]] == tenant);
        // Ops of a tenant without weights on the group are refused before they get here.
        x.unwrap_or_else(|| self.queues.iter().position(|q| q.group == group).expect("group has a queue"))
    }

    fn idle(&self, q: usize) -> bool {
        let q = &self.queues[q];
        q.gpus.iter().zip(&q.lanes).all(|(&g, &l)| !self.gpus[g].lane_busy[l])
    }

    /// Whether an op queued on `q` now would start at once.
    pub fn can_start_now(&self, q: usize) -> bool {
        self.idle(q) && self.queues[q].overlapping.iter().all(|&o| self.queues[o].queue.is_empty())
    }

    pub fn enqueue(&mut self, q: usize, op: OpId, priority: i32, dur: u64, borrowed: bool) {
        self.seq += 1;
        let qr = &mut self.queues[q];
        qr.queue.push((priority, Reverse(self.seq), op, dur, borrowed));
        qr.queued_ns += dur;
        qr.borrowed += borrowed as u32;
    }

    /// The borrowed ops waiting in the queues overlapping `q` (its own included), as
    /// (op, priority, duration), in the order they would start.
    pub fn borrowed_waiting(&self, q: usize, out: &mut Vec<(OpId, i32, u64)>) {
        let mut found: Vec<Queued> = Vec::new();
        for &o in &self.queues[q].overlapping {
            if self.queues[o].borrowed > 0 {
                found.extend(self.queues[o].queue.iter().filter(|e| e.4));
            }
        }
        found.sort_unstable_by(|a, b| b.cmp(a));
        out.extend(found.iter().map(|e| (e.2, e.0, e.3)));
    }

    /// Takes `ops` (borrowed, waiting, as [`Devices::borrowed_waiting`] lists them) out
    /// of the queues overlapping `q`.
    pub fn take(&mut self, q: usize, ops: &[(OpId, i32, u64)]) {
        for i in 0..self.queues[q].overlapping.len() {
            let o = self.queues[q].overlapping[i];
            let qr = &mut self.queues[o];
            if qr.borrowed == 0 {
                continue;
            }
            let (mut n, mut ns) = (0, 0);
            qr.queue.retain(|e| {
                let go = e.4 && ops.iter().any(|o| o.0 == e.2);
                if go {
                    n += 1;
                    ns += e.3;
                }
                !go
            });
            qr.borrowed -= n;
            qr.queued_ns -= ns;
        }
    }

    /// When an op queued on `q` now starts at the latest, whatever its priority: once
    /// its lanes' current ops end and every op queued on a lane it shares has run.
    pub fn start_bound(&self, q: usize, now: u64) -> u64 {
        let qr = &self.queues[q];
        let free = qr.gpus.iter().map(|&g| if self.gpus[g].busy() { self.gpus[g].busy_until } else { now }).max();
        free.unwrap_or(now).max(now) + qr.overlapping.iter().map(|&o| self.queues[o].queued_ns).sum::<u64>()
    }

    /// Pops the op that should start next on a queue overlapping `around`, if any such
    /// queue's lanes are idle and it has work.
    pub fn next_startable(&mut self, around: usize) -> Option<(usize, OpId, u64)> {
        let mut best: Option<(Queued, usize)> = None;
        for &q in &self.queues[around].overlapping {
            let Some(&head) = self.queues[q].queue.peek() else { continue };
            if !self.idle(q) {
                continue;
            }
            if best.is_none_or(|(b, _)| head > b) {
                best = Some((head, q));
            }
        }
        let (_, q) = best?;
        let (_, _, op, dur, borrowed) = self.queues[q].queue.pop().expect("peeked");
        self.queues[q].queued_ns -= dur;
        self.queues[q].borrowed -= borrowed as u32;
        Some((q, op, dur))
    }

    /// Other lanes busy on the queue's GPUs (the most on any one of them).
    pub fn others_busy(&self, q: usize) -> u32 {
        let qr = &self.queues[q];
        qr.gpus
            .iter()
            .zip(&qr.lanes)
            .map(|(&g, &l)| self.gpus[g].busy_lanes - self.gpus[g].lane_busy[l] as u32)
            .max()
            .unwrap_or(0)
    }

    /// Marks the queue's lanes busy from `now` until `end`, closing idle gaps.
    pub fn occupy(&mut self, q: usize, now: u64, end: u64, tenant: TenantId) {
        for i in 0..self.queues[q].gpus.len() {
            let (x, l) = (self.queues[q].gpus[i], self.queues[q].lanes[i]);
            let gpu = &mut self.gpus[x];
            debug_assert!(!gpu.lane_busy[l]);
            gpu.lane_busy[l] = true;
            if gpu.busy_lanes == 0 {
                gpu.gaps.record(now - gpu.idle_since);
                gpu.gap_lengths.record(now - gpu.idle_since);
                gpu.busy_since = now;
            }
            gpu.busy_lanes += 1;
            gpu.busy_until = gpu.busy_until.max(end);
            gpu.ops += 1;
            gpu.last_tenant = Some(tenant);
        }
    }

    /// Counts `n` more ops started on the queue's GPUs (ops of a fast-path iteration
    /// run inside one occupied span).
    pub fn add_ops(&mut self, q: usize, n: u64) {
        for i in 0..self.queues[q].gpus.len() {
            self.gpus[self.queues[q].gpus[i]].ops += n;
        }
    }

    /// Marks the queue's lanes idle at `now`; pushes the busy spans that closed (a GPU
    /// whose last busy lane this was) as (gpu, since).
    pub fn release(&mut self, q: usize, now: u64, closed: &mut Vec<(usize, u64)>) {
        for i in 0..self.queues[q].gpus.len() {
            let (x, l) = (self.queues[q].gpus[i], self.queues[q].lanes[i]);
            let gpu = &mut self.gpus[x];
            gpu.lane_busy[l] = false;
            gpu.busy_lanes -= 1;
            if gpu.busy_lanes == 0 {
                gpu.busy_ns += now - gpu.busy_since;
                gpu.idle_since = now;
                closed.push((x, gpu.busy_since));
            }
        }
    }
}
