//! The fast path: an iteration run as one event where no policy has a choice.
//!
//! When the policy places every op home and keeps no state ([`Policy::home_only`]),
//! and no other engine instance has a GPU of the iteration's group — or those that do
//! hold no request and none of their tenants' requests arrives before the iteration
//! would end (the only way such an instance gets work) — nothing can interleave with
//! the iteration: its ops run back to back on its group in an order
//! fixed by the DAG's shape alone (the group's queue is FIFO among equal priorities),
//! each for its predicted time. So the iteration ends at its launch plus the sum of its
//! ops' predictions, and every effect the per-op path has — memory ledger allocations
//! and releases, busy spans, busy buckets, op and decision counters — follows from
//! that order. The order (with what each op frees and when each became ready) is
//! found once per instance and DAG shape by running the shape through a private GMG
//! with the per-op path's queueing rules ([`Shape::of`]); each iteration then costs
//! one loop over its ops and one heap event instead of a policy call, a GMG update and
//! a heap push and pop per op.
//!
//! Architecture Invariant: a replay with the fast path gives the same result, bit for
//! bit, as the per-op path (`ReplayOptions::fast_path = false`); the property test in
//! `tests/fast.rs` holds them equal. Where that could not hold the per-op path runs:
//! iterations whose ops would start inside a recorded op window or end past the
//! replay's stop, replays that sample decisions or run an executor.
//!
//! [`Policy::home_only`]: slicesched_policy::Policy::home_only

use crate::replay::{Ev, Sim};
use slicesched_engine::BatchId;
use slicesched_gmg::{Gmg, GroupId, MemoryKind, OpId, TenantId};
use slicesched_model::IterationDag;
use std::collections::VecDeque;
use std::sync::Arc;

/// How the per-op path runs one DAG shape on an exclusive group.
#[derive(Debug)]
pub(crate) struct Shape {
    /// (head, layer, tail) op counts and layers: a model's DAGs differ only in these.
    key: (u32, u32, u32, u32),
    /// DAG indices in the order their ops start.
    order: Vec<u32>,
    /// Run position k releases the outputs `freed[free_at[k]..free_at[k + 1]]` (DAG
    /// indices) when it ends.
    free_at: Vec<u32>,
    freed: Vec<u32>,
    /// Per run position: the run position whose start came with the op's enqueueing
    /// (its last input's successor; 0 for the roots, enqueued at launch).
    ready_step: Vec<u32>,
    /// Policy calls and followed ops the per-op path makes for one iteration.
    decisions: u64,
    followed: u64,
    /// Every op is the only one placed when it becomes ready, and nothing of the
    /// iteration is running or queued then: the run order holds whatever priorities
    /// the ops get, and a policy deciding an op sees the group free.
    chain: bool,
}

fn key(dag: &IterationDag) -> (u32, u32, u32, u32) {
    (dag.head.len() as u32, dag.layer.len() as u32, dag.tail.len() as u32, dag.layers)
}

impl Shape {
    /// Runs the DAG's shape the way `Sim::place`, `Sim::follow` and the group queue
    /// would: followers of the op that ended first, then the policy's batch in the
    /// order offered, all into one FIFO lane.
    pub(crate) fn of(dag: &IterationDag, follow_producer: bool) -> Shape {
        let n = dag.len() as usize;
        let mut s = Shape {
            key: key(dag),
            order: Vec::with_capacity(n),
            free_at: vec![0],
            freed: Vec::with_capacity(n),
            ready_step: Vec::with_capacity(n),
            decisions: 0,
            followed: 0,
            chain: true,
        };
        let mut g = Gmg::new();
        let (mut ready, mut freed) = (Vec::new(), Vec::new());
        g.add_iteration(TenantId(0), dag, 0, |_| 1, &mut ready);
        let mut queue: VecDeque<(OpId, u32)> = VecDeque::with_capacity(n);
        let roots = ready.clone();
        commit(&mut g, &mut queue, &roots, false, 0, follow_producer, &mut s);
        let mut pos = 0u32;
        while let Some((op, step)) = queue.pop_front() {
            g.start(op, pos as u64);
            s.order.push(g.op(op).index);
            s.ready_step.push(step);
            ready.clear();
            freed.clear();
            g.finish(op, pos as u64 + 1, &mut ready, &mut freed);
            s.freed.extend(freed.iter().map(|&(p, _)| g.op(p).index));
            s.free_at.push(s.freed.len() as u32);
            pos += 1;
            commit(&mut g, &mut queue, &ready, true, pos, follow_producer, &mut s);
        }
        debug_assert_eq!(s.order.len(), n, "every op runs");
        s
    }
}

/// Queues a batch of ready ops as `place` commits them: the followers of the op that
/// ended (when there is one), then the rest, which make one policy call.
fn commit(
    g: &mut Gmg,
    queue: &mut VecDeque<(OpId, u32)>,
    ready: &[OpId],
    producer: bool,
    step: u32,
    follow_producer: bool,
    s: &mut Shape,
) {
    let mut offered = 0;
    let (queued, before) = (queue.len(), s.followed);
    for pass in [true, false] {
        for &op in ready {
            if (follow_producer && producer && g.op(op).kind.follows_producer()) != pass {
                continue;
            }
            g.place(op, GroupId(0));
            queue.push_back((op, step));
            offered += !pass as u64;
            s.followed += pass as u64;
        }
    }
    s.decisions += (offered > 0) as u64;
    s.chain &= queued == 0 && offered + s.followed - before <= 1;
}

/// An iteration running on the fast path.
pub(crate) struct FastRt {
    pub batch: BatchId,
    pub new_prompt_tokens: u64,
    pub serial: u64,
    /// Start of each op in run order, then the iteration's end.
    starts: Vec<u64>,
    /// Per run position: predicted ns queued on the group once that op has started.
    queued: Vec<u64>,
}

impl FastRt {
    /// What the per-op path's GPUs would show at `now` before the events at `now` ran
    /// (as an arrival sees them): the running op's end, and the work queued behind it.
    fn view_at(&self, now: u64) -> (u64, u64) {
        let n = self.queued.len();
        let r = self.starts[..n].partition_point(|&s| s < now).saturating_sub(1);
        (self.starts[r + 1], self.queued[r])
    }
}

/// The fast path's part of the simulator.
#[derive(Default)]
pub(crate) struct FastState {
    /// Per instance: whether the policy lets it take the fast path.
    ok: Vec<bool>,
    /// Per instance: the other instances with a GPU of its group, and their tenants
    /// (with, under `when_free`, its own and every tenant holding weights there).
    pub shared: Vec<(Vec<u32>, Vec<u32>)>,
    /// The policy stays home only while the home is free (`Policy::home_when_free`).
    when_free: bool,
    /// A batch is launching inside `Sim::start_iterations` (no CPU overhead), which
    /// asks `admit` again once the launch returns.
    pub inline_launch: bool,
    /// Per tenant: its arrival times (only when some instance shares GPUs).
    arrivals: Vec<Vec<u64>>,
    /// Per instance: its fast iteration in flight, and its DAG shape's schedule.
    running: Vec<Option<FastRt>>,
    shapes: Vec<Option<Arc<Shape>>>,
    spare: Vec<FastRt>,
    pub iterations: u64,
}

impl Sim<'_> {
    /// Which instances may take the fast path: all of them when the policy has no
    /// choice to make (fixed for the replay); those sharing a GPU only while the
    /// instances they share it with are idle and get no request (`try_fast`).
    pub(crate) fn init_fast(&mut self) {
        let p = &*self.policy;
        let base = self.opts.fast_path
            && self.exec.is_none()
            && self.rec.decisions_every == 0
            && !p.spatial_sharing()
            && p.context_switch_ns() == 0;
        let on = base && p.home_only();
        // A policy that stays home only while its home is free: an iteration may run as
        // one event while nothing else can reach its group (`try_fast` checks).
        let when_free = base && !on && p.home_when_free();
        let dep = &self.scn.deployment;
        let n = self.insts.len();
        let f = &mut self.fast;
        f.ok = vec![on || when_free; n];
        f.when_free = when_free;
        f.shared = (0..n)
            .map(|i| {
                let gpus = &dep.group(self.insts[i].group).gpus;
                let others: Vec<u32> = (0..n)
                    .filter(|&j| j != i && dep.group(self.insts[j].group).gpus.iter().any(|g| gpus.contains(g)))
                    .map(|j| j as u32)
                    .collect();
                let mut tenants: Vec<u32> = others.iter().map(|&j| self.insts[j as usize].tenant.0).collect();
                if when_free {
                    // Whoever holds weights on its GPUs may borrow them; so may its own
                    // tenant's other instances (it is one of them), from elsewhere.
                    let own = self.insts[i].tenant;
                    tenants.push(own.0);
                    tenants.extend(
                        dep.homes
                            .iter()
                            .filter(|h| h.tenant != own && dep.group(h.group).gpus.iter().any(|g| gpus.contains(g)))
                            .map(|h| h.tenant.0),
                    );
                }
                tenants.sort_unstable();
                tenants.dedup();
                (others, tenants)
            })
            .collect();
        if (on && f.shared.iter().any(|s| !s.0.is_empty())) || when_free {
            f.arrivals = vec![Vec::new(); self.scn.tenants.len()];
            for (t, r) in &self.scn.requests {
                f.arrivals[*t as usize].push(r.arrival_ns);
            }
        }
        f.running = (0..n).map(|_| None).collect();
        f.shapes = vec![None; n];
    }

    /// Whether nothing else can run on `inst`'s GPUs during `[from, to]`: the
    /// instances sharing them have no request and none of their tenants' requests
    /// arrives by then (an instance gets work only from an arrival routed to it). Under
    /// a policy that stays home only while the home is free ([`FastState::when_free`]),
    /// also: every instance of a tenant that could borrow the GPUs (its own and those
    /// holding weights there) has no work but this iteration and no request of theirs
    /// arrives (an arrival could be routed here, or admit another micro-batch). With KV
    /// moves on, every instance of a tenant sharing the GPUs that has several is idle
    /// (a move into the GPUs needs a sender with requests), none moving KV.
    fn alone(&self, inst: usize, from: u64, to: u64) -> bool {
        let (others, tenants) = &self.fast.shared[inst];
        // (The launching instance itself runs only this iteration: `try_fast` checks.)
        let idle = |j: usize| {
            let rt = &self.insts[j];
            j == inst
                || rt.inflight == 0 && rt.engine.queue_lengths() == (0, 0) && rt.moving_in == 0 && rt.moving_out == 0
        };
        // With KV moves, an instance also gets work from its tenant's other instances
        // (`crate::migrate`), which move requests only while they have some: those must
        // be idle too.
        let moves = self.opts.kv_migration != crate::KvMigration::Off;
        others.iter().all(|&j| idle(j as usize))
            && (!(self.fast.when_free || moves)
                || tenants.iter().all(|&t| {
                    let insts = &self.tenant_insts[t as usize];
                    (!self.fast.when_free && insts.len() < 2) || insts.iter().all(|&j| idle(j as usize))
                }))
            && tenants.iter().all(|&t| {
                let a = &self.fast.arrivals[t as usize];
                a.get(a.partition_point(|&x| x < from)).is_none_or(|&x| x > to)
            })
    }

    /// Runs a launched batch as one event if it may; false: run it op by op.
    pub(crate) fn try_fast(
        &mut self,
        inst: usize,
        batch: BatchId,
        dag: &IterationDag,
        pred: &[Vec<u64>; 3],
        new_prompt_tokens: u64,
    ) -> bool {
        if !self.fast.ok[inst] || self.insts[inst].inflight != 1 {
            return false;
        }
        // Under `when_free` the policy's `admit` may open another micro-batch whenever
        // it is asked: launched inside the call that scheduled it (no CPU overhead),
        // this iteration would be asked right after it starts if the engine had anything
        // else to schedule. (A `Launch` event asks nobody.)
        if self.fast.when_free && self.fast.inline_launch && self.insts[inst].engine.has_schedulable() {
            return false;
        }
        let (l0, layers) = (self.now, dag.layers as u64);
        let sum = |v: &Vec<u64>| v.iter().sum::<u64>();
        let end = l0 + sum(&pred[0]) + layers * sum(&pred[1]) + sum(&pred[2]);
        if end > self.stop_ns || self.rec.window.is_some_and(|w| w.overlaps(l0, end)) || !self.alone(inst, l0, end) {
            return false;
        }
        let shape = match &self.fast.shapes[inst] {
            Some(s) if s.key == key(dag) => s.clone(),
            _ => {
                let s = Arc::new(Shape::of(dag, self.opts.follow_producer));
                self.fast.shapes[inst] = Some(s.clone());
                s
            }
        };
        // Under `when_free` the policy keeps an op home only while nothing else of the
        // iteration is on the group, and orders by its priorities: a chain only.
        if self.fast.when_free && !shape.chain {
            return false;
        }
        let rt = &self.insts[inst];
        let (tenant, group) = (rt.tenant, rt.group);
        let q = self.dev.queue_of(group, tenant);
        let n = shape.order.len();
        let mut fr = self.fast.spare.pop().unwrap_or_else(|| FastRt {
            batch,
            new_prompt_tokens,
            serial: 0,
            starts: Vec::new(),
            queued: Vec::new(),
        });
        fr.batch = batch;
        fr.new_prompt_tokens = new_prompt_tokens;
        fr.serial = self.iterations;
        fr.starts.clear();
        fr.queued.clear();
        fr.queued.resize(n + 1, 0);

        self.dev.occupy(q, l0, end, tenant);
        self.dev.add_ops(q, n as u64 - 1);
        let (h, l) = (dag.head.len() as u32, dag.layer.len() as u32);
        let body = h + l * dag.layers;
        let at = |i: u32| -> (u64, u64) {
            if i < h {
                (pred[0][i as usize], dag.head[i as usize].out_bytes)
            } else if i < body {
                let j = ((i - h) % l) as usize;
                (pred[1][j], dag.layer[j].out_bytes)
            } else {
                let j = (i - body) as usize;
                (pred[2][j], dag.tail[j].out_bytes)
            }
        };
        let gpus = &self.scn.deployment.group(group).gpus;
        let mut t = l0;
        for k in 0..n {
            let (d, bytes) = at(shape.order[k]);
            fr.starts.push(t);
            // Queued from the step that enqueued it until the one before its start.
            let rs = shape.ready_step[k] as usize;
            if rs < k {
                // A difference array (prefix-summed below): wrapping keeps the
                // transient negative entries exact.
                fr.queued[rs] = fr.queued[rs].wrapping_add(d);
                fr.queued[k] = fr.queued[k].wrapping_sub(d);
            }
            for g in gpus {
                self.dev.gpus[g.0 as usize].ledger.alloc(MemoryKind::Activations, bytes, t);
            }
            if let Some(b) = self.busy.as_mut() {
                for g in gpus {
                    b.add(g.0 as usize, tenant.index(), t, t + d, false);
                }
            }
            t += d;
            for &p in &shape.freed[shape.free_at[k] as usize..shape.free_at[k + 1] as usize] {
                let bytes = at(p).1;
                for g in gpus {
                    self.dev.gpus[g.0 as usize].ledger.release(MemoryKind::Activations, bytes);
                }
            }
        }
        debug_assert_eq!(t, end);
        fr.starts.push(end);
        for k in 1..n {
            fr.queued[k] = fr.queued[k].wrapping_add(fr.queued[k - 1]);
        }
        fr.queued.truncate(n);
        self.op_events += n as u64;
        self.stats.placed += n as u64;
        self.stats.decisions += shape.decisions;
        self.stats.followed += shape.followed;
        self.iterations += 1;
        self.fast.iterations += 1;
        self.fast.running[inst] = Some(fr);
        self.push(end, Ev::FastDone(inst as u32));
        true
    }

    /// The fast iteration of `inst` ends: its group idles, the engine completes it.
    pub(crate) fn fast_done(&mut self, inst: usize) {
        let fr = self.fast.running[inst].take().expect("a fast iteration in flight");
        let rt = &self.insts[inst];
        let q = self.dev.queue_of(rt.group, rt.tenant);
        self.closed.clear();
        self.dev.release(q, self.now, &mut self.closed);
        for &(x, since) in &self.closed {
            self.series.add_busy(x, since, self.now);
        }
        let (batch, tokens, serial) = (fr.batch, fr.new_prompt_tokens, fr.serial);
        self.fast.spare.push(fr);
        self.iteration_done(inst, batch, tokens, serial);
        self.try_start(q);
    }

    /// Puts the per-op path's busy-until and queued figures of the GPUs running fast
    /// iterations into the views (after `build_views` filled the rest).
    pub(crate) fn fast_views(&mut self) {
        for (i, f) in self.fast.running.iter().enumerate() {
            let Some(f) = f else { continue };
            let (until, queued) = f.view_at(self.now);
            for g in &self.scn.deployment.group(self.insts[i].group).gpus {
                self.busy_until[g.0 as usize] = until;
                self.queued_ns[g.0 as usize] += queued;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slicesched_model::{DecodeItem, IterationBatch, ModelConfig, PrefillItem};

    fn dag(tp: u32) -> IterationDag {
        let m = ModelConfig::preset("llama-2-7b").unwrap();
        let b = IterationBatch {
            prefills: vec![PrefillItem { chunk: 64, prior_kv: 0, samples: true }],
            decodes: vec![DecodeItem { kv_len: 5 }],
        };
        m.iteration_dag(&b, tp)
    }

    #[test]
    fn a_shape_runs_every_op_once_after_its_inputs_and_frees_every_output_once() {
        for (tp, follow) in [(1, true), (2, true), (2, false)] {
            let d = dag(tp);
            let s = Shape::of(&d, follow);
            let n = d.len() as usize;
            let mut pos = vec![usize::MAX; n];
            for (k, &i) in s.order.iter().enumerate() {
                assert_eq!(pos[i as usize], usize::MAX, "op {i} runs twice");
                pos[i as usize] = k;
            }
            for c in 0..d.len() {
                for p in d.preds(c) {
                    assert!(pos[p as usize] < pos[c as usize], "op {c} runs before its input {p}");
                }
            }
            let mut freed = s.freed.clone();
            freed.sort_unstable();
            assert_eq!(freed, (0..d.len()).collect::<Vec<_>>());
            assert!(s.ready_step.iter().enumerate().all(|(k, &r)| r as usize <= k));
            assert!(s.chain, "a Llama layer is a chain of ops");
            // Without following, every op with weights or not is offered to the policy.
            if !follow {
                assert_eq!(s.followed, 0);
            } else {
                assert!(s.followed > 0 && s.decisions < n as u64);
            }
        }
    }

    #[test]
    fn the_view_shows_the_running_op_and_the_work_behind_it() {
        let f = FastRt {
            batch: BatchId(0),
            new_prompt_tokens: 0,
            serial: 0,
            starts: vec![10, 15, 22, 30],
            queued: vec![7, 8, 0],
        };
        assert_eq!(f.view_at(10), (15, 7));
        assert_eq!(f.view_at(15), (15, 7), "the op ending now has not ended for an arrival");
        assert_eq!(f.view_at(16), (22, 8));
        assert_eq!(f.view_at(30), (30, 0));
    }
}
