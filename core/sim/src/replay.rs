//! The event loop: arrivals and op completions on an integer-nanosecond clock.

use crate::devices::Devices;
use crate::metrics::{RequestRecord, Summary, TimeSeries};
use crate::scenario::Scenario;
use slicesched_cost::{CostModel, CpuOverhead, DeviceCtx};
use slicesched_engine::{Admission, BatchId, Engine, IdDeque, SeqEvent};
use slicesched_gmg::{Gmg, GroupId, IterId, MemoryKind, OpId, TenantId};
use slicesched_model::IterationDag;
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, TenantView, View};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Knobs of one replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Call the progress callback every this many op events.
    pub progress_every: u64,
    /// Check at every op start that all its inputs are done (for tests; costs time).
    pub check_dependencies: bool,
    /// Engine CPU time between iterations (the GPU idles meanwhile).
    pub cpu_overhead: CpuOverhead,
    /// Measure the wall time of every policy call (reported under `timing`).
    pub time_decisions: bool,
    /// Record the ops that start in this window (for timelines).
    pub record_ops: Option<crate::OpWindow>,
    /// Record every n-th policy call (0: none).
    pub sample_decisions_every: u64,
    /// Record the whole run's per-GPU, per-tenant busy buckets
    /// ([`ReplayResult::busy`]); the width follows the horizon ([`crate::bucket_ns_for`]).
    pub record_busy: bool,
    /// Stop once the clock passes this instant (a window's ops are recorded by
    /// replaying only up to its end: the replay is deterministic, so its prefix is the
    /// same as the whole run's).
    pub stop_after_ns: Option<u64>,
    /// Set from another thread to stop the replay at the next progress report; the
    /// result then says `cancelled` and covers the replay up to that point.
    pub cancel: Option<Arc<AtomicBool>>,
    /// The core places the ops with no real choice of GPU (elementwise ops,
    /// collectives, attention) with the op that produced their input instead of asking
    /// the policy (see `Sim::follow`). Off: the policy is asked about every op.
    pub follow_producer: bool,
    /// Run an iteration as one event where the policy has no choice and nothing else
    /// can run on its GPUs meanwhile (`crate::fast`); the result is identical either way.
    /// Off: every op is an event (for comparing the two paths).
    pub fast_path: bool,
    /// Stop as soon as more than this fraction of all the replay's requests is known to
    /// violate its SLA (dropped, or completed late): the violation rate then exceeds it
    /// whatever the rest does. A goodput search needs no more from such a point.
    pub stop_above_violation: Option<f64>,
    /// When a running request's KV may move to another instance of its tenant
    /// (`crate::migrate`). Never with an executor, which does not move real KV yet.
    pub kv_migration: crate::KvMigration,
    /// Whether the planned copies stay for the whole run or come and go with the load
    /// (`crate::copies`). Never with an executor.
    pub replan: crate::Replan,
    /// Which of the planner's candidate plans an operator-level policy runs on, for
    /// callers that plan through `crate::choose_plan` (the replay itself runs the plan
    /// it is given).
    pub plan: crate::PlanPick,
    /// A home's decode-only steps keep to half its TPOT target while another tenant
    /// uses its GPUs: its serving copy there holds requests, or its borrowed ops are
    /// there (`crate::pace`). Off: back to back, as an engine alone runs them.
    pub decode_pacing: bool,
    /// An op borrowed onto a GPU that has not started goes back home when the GPU's
    /// owner queues work there and home would finish it sooner (`Sim::recall_guests`).
    /// Off: it waits behind the owner.
    pub recall_guests: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            progress_every: 1 << 20,
            check_dependencies: false,
            cpu_overhead: CpuOverhead::default_a100(),
            time_decisions: false,
            record_ops: None,
            sample_decisions_every: 0,
            record_busy: false,
            stop_after_ns: None,
            cancel: None,
            follow_producer: true,
            fast_path: true,
            stop_above_violation: None,
            kv_migration: crate::KvMigration::Off,
            replan: crate::Replan::Static,
            plan: crate::PlanPick::WhatIf,
            decode_pacing: true,
            recall_guests: true,
        }
    }
}

/// Where a replay is, for progress bars.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub sim_ns: u64,
    pub horizon_ns: u64,
    pub op_events: u64,
    pub completed: u64,
    pub requests: u64,
}

/// Everything a replay produced.
#[derive(Debug, Clone)]
pub struct ReplayResult {
    pub summary: Summary,
    /// In id order; a live loop's result holds only the records it had not retired.
    pub records: Vec<RequestRecord>,
    pub series: TimeSeries,
    /// Ops that started before one of their inputs was done (must be 0).
    pub dependency_violations: u64,
    /// Ops recorded in [`ReplayOptions::record_ops`]'s window, by start time.
    pub ops: Vec<crate::OpRecord>,
    /// Sampled policy calls ([`ReplayOptions::sample_decisions_every`]).
    pub decisions: Vec<crate::DecisionRecord>,
    /// The whole run's busy buckets ([`ReplayOptions::record_busy`]).
    pub busy: Option<crate::BusyBuckets>,
    /// Stopped early through [`ReplayOptions::cancel`].
    pub cancelled: bool,
    /// Stopped early by [`ReplayOptions::stop_above_violation`]: the fraction of the
    /// requests known to violate by then, a lower bound of the whole run's rate (the
    /// summary's `violation_rate` counts the unfinished requests as drops).
    pub violation_at_stop: Option<f64>,
    /// Iterations run as one event on the fast path ([`ReplayOptions::fast_path`]).
    pub fast_iterations: u64,
}

/// What the event loop handles besides arrivals (which come from a sorted list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ev {
    /// An op finished on its group.
    OpDone(OpId),
    /// An engine instance finished its CPU work: the batch reaches the GPUs.
    Launch(u32, BatchId),
    /// A placed op's inputs arrived on its group: it joins the group's queue (with its
    /// priority and predicted duration there).
    Enqueue(OpId, GroupId, i32, u64),
    /// An instance's fast-path iteration ended (`crate::fast`).
    FastDone(u32),
    /// A request's KV finished moving between instances (`crate::migrate`).
    Moved(u32),
    /// Time to revise the copies (`crate::copies`).
    Replan,
    /// A copy's weights landed on its GPUs (`crate::copies`).
    CopyLanded(u32),
    /// A home's paced decode step may launch (`crate::pace`): instance, token.
    Paced(u32, u32),
}

/// One engine instance: a tenant's home, or a serving replica.
pub(crate) struct InstRt {
    pub tenant: TenantId,
    pub group: GroupId,
    pub is_home: bool,
    pub engine: Engine,
    /// Request of each engine sequence, retired with the engine's ([`Engine::retire_ended`]).
    pub seq_to_req: IdDeque<u32>,
    pub inflight: u32,
    /// Earliest pending launch, for the owner-need signal.
    pub next_launch: u64,
    /// The batches executing (launched or waiting for their CPU overhead), each with its
    /// peak activation bytes per GPU once the micro-batch check has needed it (a DAG
    /// walk, done at most once per batch and never for a lone batch).
    pub batches: Vec<(BatchId, Option<u64>)>,
    /// An extra micro-batch formed while the activations of those executing left no
    /// room for it: it launches when one of them ends.
    pub deferred: Option<BatchId>,
    /// Requests whose KV is leaving this instance now, and arriving.
    pub moving_out: u32,
    pub moving_in: u32,
    /// A decode step held for its paced launch (`crate::pace`).
    pub paced: Option<crate::pace::Paced>,
    /// When its last decode-only step launched (u64::MAX: none yet).
    pub last_decode_launch: u64,
}

/// One iteration executing in the GMG.
pub(crate) struct IterRt {
    pub inst: u32,
    pub batch: BatchId,
    pub dag: IterationDag,
    pub new_prompt_tokens: u64,
    /// Launch order, unique within the replay (the GMG reuses iteration slots).
    pub serial: u64,
    /// The requests of the batch in the DAG's order (filled only for an executor).
    pub reqs: Vec<u32>,
}

pub(crate) struct Sim<'a> {
    pub scn: &'a Scenario,
    /// The views' epoch: the scenario's deployment and links do not change in a replay.
    pub epoch: u64,
    pub cost: &'a CostModel,
    pub policy: &'a mut dyn Policy,
    pub opts: ReplayOptions,
    pub now: u64,
    pub seq: u64,
    pub events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    /// The event being dispatched is still the heap's top (`Sim::run`): the first
    /// event pushed meanwhile takes its place, one sift instead of a pop and a push.
    pub top_done: bool,
    pub gmg: Gmg,
    pub dev: Devices,
    pub group_ctx: Vec<DeviceCtx>,
    pub insts: Vec<InstRt>,
    /// Instances of each tenant, home first.
    pub tenant_insts: Vec<Vec<u32>>,
    pub iters: Vec<Option<IterRt>>,
    /// By request id; a live loop retires the oldest ended ones ([`crate::LiveSim::retire`]).
    pub records: IdDeque<RequestRecord>,
    pub series: TimeSeries,
    pub op_events: u64,
    pub iterations: u64,
    /// Iterations launched while their instance had no other one executing.
    pub single_iterations: u64,
    /// Extra micro-batches that waited for room for their activations.
    pub deferred_batches: u64,
    /// Per instance, who could use its GPUs while its decode steps wait (`crate::pace`).
    pub pace_guests: Vec<crate::pace::PaceGuests>,
    pub pace_seq: u32,
    /// Decode steps that waited for their paced launch.
    pub paced_steps: u64,
    pub completed: u64,
    pub dep_violations: u64,
    pub rejected: Vec<(String, u64)>,
    pub stats: crate::place::PlaceStats,
    /// The committed timeline the core checks borrowed placements against (kept only
    /// for policies that look at the cluster: container-level ones never borrow).
    pub timeline: Option<std::cell::RefCell<slicesched_whatif::Timeline>>,
    pub whatif_scratch: crate::place::Scratch,
    /// Per op slot, its key in the timeline.
    pub op_keys: Vec<u64>,
    pub next_key: u64,
    // Scratch buffers reused on the hot path.
    pub ready: Vec<OpId>,
    /// Per op of the iteration launching, its predicted ns.
    pub pred_scratch: Vec<u64>,
    pub freed: Vec<(OpId, u64)>,
    pub closed: Vec<(usize, u64)>,
    pub ready_view: Vec<ReadyOp>,
    /// Ready ops placed with their producer (not offered to the policy).
    pub followers: Vec<ReadyOp>,
    pub placements: Vec<Placement>,
    pub seq_events: Vec<SeqEvent>,
    pub busy_until: Vec<u64>,
    pub queued_ns: Vec<u64>,
    pub owner_need: Vec<u64>,
    pub tenant_views: Vec<TenantView>,
    pub group_links: Vec<slicesched_hw::Link>,
    pub inst_views: Vec<InstanceView>,
    pub rec: crate::record::Recorder,
    pub busy: Option<crate::busy::BusyRecorder>,
    pub cancelled: bool,
    pub violation_at_stop: Option<f64>,
    /// Per GPU, the KV pool its instances share (empty: every engine keeps its own).
    pub kv_pools: Vec<crate::kvpool::GpuPool>,
    /// Per instance, its part in those pools.
    pub kv_shares: Vec<crate::kvpool::KvShare>,
    /// Runs the ops for real (`slicesched run`); None in a replay.
    pub exec: Option<&'a mut dyn crate::OpExecutor>,
    /// The instant past which the replay stops (horizon or `stop_after_ns`).
    pub stop_ns: u64,
    /// The fast path's state (`crate::fast`).
    pub fast: crate::fast::FastState,
    /// Per request, its (instance, engine sequence) once admitted.
    pub req_seq: IdDeque<(u32, u32)>,
    /// Requests to end early, applied once they are not executing ([`Sim::apply_ends`]).
    pub ends: Vec<(u32, crate::End)>,
    pub preempted: Vec<slicesched_engine::SeqId>,
    pub batch_seqs: Vec<slicesched_engine::SeqId>,
    /// KV moves in flight and the totals (`crate::migrate`).
    pub moves: crate::migrate::Moves,
    /// The copies' states when they come and go (`crate::copies`).
    pub copies: crate::copies::Copies,
    /// Each tenant's offered load, metered at every arrival.
    pub meters: Vec<crate::load::LoadMeter>,
}

/// Replays a scenario under a policy. Deterministic: same inputs, same result.
/// The scenario should already carry the policy's replicas (see [`crate::plan`]).
pub fn replay(
    scn: &Scenario,
    policy: &mut dyn Policy,
    cost: &CostModel,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(&Progress),
) -> ReplayResult {
    replay_with(scn, policy, cost, opts, None, progress)
}

/// [`replay`] with an executor that runs every op and gives its measured duration.
pub fn replay_with<'a>(
    scn: &'a Scenario,
    policy: &'a mut dyn Policy,
    cost: &'a CostModel,
    opts: ReplayOptions,
    exec: Option<&'a mut dyn crate::OpExecutor>,
    progress: &mut dyn FnMut(&Progress),
) -> ReplayResult {
    let mut sim = Sim::new(scn, policy, cost, opts, exec);
    sim.run(progress);
    sim.finish()
}

impl<'a> Sim<'a> {
    pub(crate) fn new(
        scn: &'a Scenario,
        policy: &'a mut dyn Policy,
        cost: &'a CostModel,
        opts: ReplayOptions,
        exec: Option<&'a mut dyn crate::OpExecutor>,
    ) -> Self {
        let dev = Devices::new(&scn.cluster, &scn.deployment, policy.spatial_sharing());
        let group_ctx: Vec<DeviceCtx> = scn
            .deployment
            .groups
            .iter()
            .map(|g| DeviceCtx {
                sku: scn.cluster.gpu(g.gpus[0]).sku.clone(),
                group_link: scn.cluster.group_link(&g.gpus),
            })
            .collect();
        let mut insts = Vec::new();
        let mut tenant_insts = vec![Vec::new(); scn.tenants.len()];
        // Homes first, in tenant order, so instance i < tenants is tenant i's home.
        let mut order: Vec<_> = scn.deployment.homes.iter().filter(|h| h.serves).collect();
        order.sort_by_key(|h| (!h.is_home, h.tenant, h.group));
        for h in order {
            let t = &scn.tenants[h.tenant.index()];
            let dev = &group_ctx[h.group.index()];
            let tp = scn.deployment.group(h.group).gpus.len() as u32;
            let budget =
                crate::budget::decode_token_budget(cost, &opts.cpu_overhead, dev, &t.model, tp, &t.engine, &t.sla);
            let engine = slicesched_engine::EngineConfig { decode_token_budget: budget, ..t.engine };
            tenant_insts[h.tenant.index()].push(insts.len() as u32);
            insts.push(InstRt {
                tenant: h.tenant,
                group: h.group,
                is_home: h.is_home,
                engine: Engine::new(engine, h.kv_blocks).with_kv_window(t.model.kv_window()),
                seq_to_req: IdDeque::new(),
                inflight: 0,
                next_launch: u64::MAX,
                batches: Vec::new(),
                deferred: None,
                moving_out: 0,
                moving_in: 0,
                paced: None,
                last_decode_launch: u64::MAX,
            });
        }
        let records = scn
            .requests
            .iter()
            .enumerate()
            .map(|(i, (t, r))| {
                let sla = &scn.tenants[*t as usize].sla;
                RequestRecord {
                    id: i as u32,
                    tenant: *t,
                    arrival_ns: r.arrival_ns,
                    prompt_tokens: r.prompt_tokens,
                    output_tokens: r.output_tokens.max(1),
                    first_token_ns: None,
                    finish_ns: None,
                    preemptions: 0,
                    dropped: None,
                    ttft_target_ns: sla.ttft_target_ns(r.prompt_tokens),
                    tpot_target_ns: sla.tpot_target_ns(),
                }
            })
            .collect::<Vec<_>>()
            .into();
        let n_gpus = scn.cluster.len();
        let rec = crate::record::Recorder::new(opts.record_ops, opts.sample_decisions_every);
        let mut sim = Sim {
            scn,
            cost,
            policy,
            opts,
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            top_done: false,
            gmg: Gmg::new(),
            dev,
            group_ctx,
            insts,
            tenant_insts,
            iters: Vec::new(),
            records,
            series: TimeSeries::new(n_gpus),
            op_events: 0,
            iterations: 0,
            single_iterations: 0,
            pace_guests: Vec::new(),
            pace_seq: 0,
            paced_steps: 0,
            deferred_batches: 0,
            completed: 0,
            dep_violations: 0,
            rejected: Vec::new(),
            stats: crate::place::PlaceStats::new(n_gpus),
            timeline: None,
            whatif_scratch: Default::default(),
            op_keys: Vec::new(),
            next_key: 0,
            ready: Vec::new(),
            pred_scratch: Vec::new(),
            freed: Vec::new(),
            closed: Vec::new(),
            ready_view: Vec::new(),
            followers: Vec::new(),
            placements: Vec::new(),
            seq_events: Vec::new(),
            busy_until: vec![0; n_gpus],
            queued_ns: vec![0; n_gpus],
            owner_need: vec![0; n_gpus],
            tenant_views: Vec::new(),
            group_links: {
                let gs = &scn.deployment.groups;
                gs.iter().flat_map(|a| gs.iter().map(|b| scn.cluster.link(a.gpus[0], b.gpus[0]))).collect()
            },
            inst_views: Vec::new(),
            epoch: slicesched_policy::new_epoch(),
            rec,
            busy: None,
            cancelled: false,
            violation_at_stop: None,
            kv_pools: Vec::new(),
            kv_shares: Vec::new(),
            exec,
            stop_ns: 0,
            fast: Default::default(),
            req_seq: IdDeque::new(),
            ends: Vec::new(),
            preempted: Vec::new(),
            batch_seqs: Vec::new(),
            moves: Default::default(),
            copies: Default::default(),
            meters: scn.tenants.iter().map(|t| crate::load::LoadMeter::new(&t.sla)).collect(),
        };
        sim.load_memory();
        sim.init_kv_pools();
        sim.init_fast();
        sim.init_pacing();
        // The timeline answers borrow checks and probes: a policy that places every op
        // home (and so never asks) needs none.
        if sim.policy.reads_view() && !sim.policy.home_only() {
            sim.timeline = Some(std::cell::RefCell::new(sim.new_timeline()));
        }
        sim.init_copies();
        if sim.opts.record_busy {
            // Sized for the arrivals and a tenth more: a run ends soon after its last
            // arrival, not at the drain window's limit (rows grow if it does not).
            let last = scn.requests.last().map_or(0, |r| r.1.arrival_ns);
            let rows = (n_gpus * scn.tenants.len()) as u64;
            let w = crate::busy::bucket_ns_for(last + last / 10 + 1_000_000_000, rows);
            sim.busy = Some(crate::busy::BusyRecorder::new(w, n_gpus, scn.tenants.len()));
        }
        sim
    }
}

impl Sim<'_> {
    fn load_memory(&mut self) {
        for h in &self.scn.deployment.homes {
            let t = &self.scn.tenants[h.tenant.index()];
            let kv = h.kv_blocks as u64 * t.engine.block_size as u64 * t.model.kv_bytes_per_token(t.gpus.len() as u32);
            for g in &self.scn.deployment.group(h.group).gpus {
                let l = &mut self.dev.gpus[g.0 as usize].ledger;
                l.alloc(MemoryKind::Weights, h.weight_bytes_per_gpu, 0);
                l.alloc(MemoryKind::KvPool, kv, 0);
            }
        }
    }

    /// A timeline whose baseline per GPU is what serving has reserved (weights, KV
    /// pools, the residents' activation reserves) and whose capacity is what serving
    /// may use.
    fn new_timeline(&self) -> slicesched_whatif::Timeline {
        let n = self.scn.cluster.len();
        let mut baseline: Vec<u64> = self.dev.gpus.iter().map(|g| g.ledger.weights + g.ledger.kv_pool).collect();
        for h in self.scn.deployment.homes.iter().filter(|h| h.serves) {
            for g in &self.scn.deployment.group(h.group).gpus {
                baseline[g.0 as usize] += self.scn.tenants[h.tenant.index()].activation_reserve;
            }
        }
        let capacity = self
            .scn
            .cluster
            .gpus
            .iter()
            .map(|g| g.sku.memory - self.scn.unusable_bytes(g.sku.memory).min(g.sku.memory))
            .collect();
        slicesched_whatif::Timeline::new(n, baseline, capacity).expect("one entry per GPU")
    }

    fn horizon(&self) -> u64 {
        let last = self.scn.requests.last().map_or(0, |r| r.1.arrival_ns);
        last + (self.scn.spec.drain_s * 1e9) as u64
    }

    pub(crate) fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let e = Reverse((at, self.seq, ev));
        if self.top_done {
            // Keys are unique, so the heap pops in the same order however it is built.
            self.top_done = false;
            *self.events.peek_mut().expect("the dispatched event") = e;
        } else {
            self.events.push(e);
        }
    }

    fn run(&mut self, progress: &mut dyn FnMut(&Progress)) {
        let horizon = self.horizon();
        let stop = self.opts.stop_after_ns.map_or(horizon, |s| s.min(horizon));
        self.stop_ns = stop;
        let mut next_arrival = 0usize;
        let mut next_report = self.opts.progress_every;
        loop {
            let arr = self.scn.requests.get(next_arrival).map(|r| r.1.arrival_ns);
            let ev = self.events.peek().map(|e| e.0 .0);
            // Arrivals go before events at the same instant: a fixed rule keeps the
            // replay deterministic.
            let take_arrival = match (arr, ev) {
                (Some(a), Some(e)) => a <= e,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_arrival {
                let t = arr.expect("arrival");
                if t > stop {
                    break;
                }
                self.now = t;
                self.arrive(next_arrival);
                next_arrival += 1;
                continue;
            }
            let Reverse((t, _, ev)) = *self.events.peek().expect("event");
            if t > stop {
                break;
            }
            self.now = t;
            self.top_done = true;
            self.dispatch(ev);
            if self.top_done {
                self.top_done = false;
                self.events.pop();
            }
            if self.op_events >= next_report {
                next_report += self.opts.progress_every;
                progress(&self.progress(stop));
                if self.opts.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                    self.cancelled = true;
                    break;
                }
                if let Some(v) = self.opts.stop_above_violation.and_then(|limit| self.violating_above(limit)) {
                    self.violation_at_stop = Some(v);
                    break;
                }
            }
        }
        progress(&self.progress(stop));
    }

    /// The fraction of all requests known to violate, where it exceeds `limit`. Checked
    /// at progress reports only (a count over the records, not per event).
    fn violating_above(&self, limit: f64) -> Option<f64> {
        let n = self.scn.requests.len().max(1) as f64;
        let late: u64 = self.series.violations.iter().sum();
        let dropped = self.records.iter().filter(|r| r.dropped.is_some()).count() as u64;
        let v = (late + dropped) as f64 / n;
        (v > limit).then_some(v)
    }

    pub(crate) fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::OpDone(op) => self.op_done(op),
            Ev::Launch(inst, batch) => self.launch(inst as usize, batch),
            Ev::Enqueue(op, group, prio, dur) => self.enqueue(op, group, prio, dur),
            Ev::FastDone(inst) => self.fast_done(inst as usize),
            Ev::Moved(id) => self.moved(id),
            Ev::Replan => self.replan(),
            Ev::CopyLanded(e) => self.copy_landed(e),
            Ev::Paced(inst, token) => self.paced_due(inst as usize, token),
        }
    }

    fn progress(&self, horizon: u64) -> Progress {
        Progress {
            sim_ns: self.now,
            horizon_ns: horizon,
            op_events: self.op_events,
            completed: self.completed,
            requests: self.records.len() as u64,
        }
    }

    fn arrive(&mut self, idx: usize) {
        let (t, r) = &self.scn.requests[idx];
        self.admit(idx, *t, r.prompt_tokens, r.output_tokens);
    }

    /// Routes request `idx` (its record exists) to one of its tenant's instances and
    /// queues it there; false when it could never fit (recorded as dropped).
    pub(crate) fn admit(&mut self, idx: usize, t: u32, prompt_tokens: u32, output_tokens: u32) -> bool {
        // Refused before routing, as a server answers 400: no placement could serve it.
        if let Some(why) = self.scn.tenants[t as usize].length_refusal(prompt_tokens, output_tokens) {
            self.records[idx].dropped = Some(why);
            return false;
        }
        self.meter(t, prompt_tokens, output_tokens);
        let inst = if self.tenant_insts[t as usize].len() == 1 {
            self.tenant_insts[t as usize][0] as usize
        } else {
            self.build_views();
            self.build_instance_views();
            // Only the instances whose weights are there take requests.
            let insts: Vec<u32> =
                self.tenant_insts[t as usize].iter().copied().filter(|&i| self.copies.routable(i as usize)).collect();
            let views: Vec<InstanceView> = insts.iter().map(|&i| self.inst_views[i as usize]).collect();
            let view = crate::place::view!(self);
            let k = self.policy.route(&view, &views).min(insts.len() - 1);
            insts[k] as usize
        };
        // Refused only if it could not fit even with the other residents' pools empty.
        self.kv_resize(inst, true);
        let admission = self.insts[inst].engine.add_request(prompt_tokens, output_tokens.max(1));
        self.kv_refresh(inst);
        let rt = &mut self.insts[inst];
        match admission {
            Admission::Queued(seq) => {
                debug_assert_eq!(seq.0 as usize, rt.seq_to_req.len());
                rt.seq_to_req.push(idx as u32);
                if self.req_seq.len() <= idx {
                    self.req_seq.resize(idx + 1, (u32::MAX, u32::MAX));
                }
                self.req_seq[idx] = (inst as u32, seq.0);
                self.give_back(inst);
                self.maybe_migrate(inst);
                self.start_iterations(inst);
                true
            }
            Admission::TooLong { .. } => {
                self.records[idx].dropped = Some("needs more KV cache than the tenant has");
                false
            }
        }
    }

    /// Lets the instance's engine form batches while the policy admits them; each
    /// reaches the GPUs after the engine's CPU overhead.
    pub(crate) fn start_iterations(&mut self, inst: usize) {
        if self.insts[inst].paced.is_some() && self.insts[inst].engine.has_schedulable() {
            self.unpace(inst);
        }
        if self.insts[inst].deferred.is_some() && !self.launch_deferred(inst) {
            return;
        }
        loop {
            let rt = &self.insts[inst];
            if !rt.engine.has_schedulable() {
                return;
            }
            if rt.inflight > 0 {
                self.build_views();
                self.build_instance_views();
                let iv = self.inst_views[inst];
                let view = crate::place::view!(self);
                if !self.policy.admit(&view, &iv) {
                    return;
                }
            }
            self.kv_refresh(inst);
            let scheduled = self.insts[inst].engine.schedule();
            self.release_preempted(inst);
            self.kv_sync(inst);
            let Some(batch) = scheduled else { return };
            // Memory safety: the policy admits micro-batches, the core checks that their
            // activations fit the instance's reserve (a lone batch always does).
            let mut peak = None;
            if self.insts[inst].inflight > 0 {
                peak = self.activations_fit(inst, batch);
                if peak.is_none() {
                    self.insts[inst].deferred = Some(batch);
                    self.deferred_batches += 1;
                    return;
                }
            }
            self.begin_iteration(inst, batch, peak);
        }
    }

    /// Launches the deferred micro-batch if it fits now; false if it still waits.
    fn launch_deferred(&mut self, inst: usize) -> bool {
        let batch = self.insts[inst].deferred.expect("a deferred batch");
        let mut peak = None;
        if self.insts[inst].inflight > 0 {
            peak = self.activations_fit(inst, batch);
            if peak.is_none() {
                return false;
            }
        }
        self.insts[inst].deferred = None;
        self.begin_iteration(inst, batch, peak);
        true
    }

    /// Whether `batch`'s activations fit beside those of the instance's executing
    /// batches, each at its peak, within its activation reserve and the KV blocks lent
    /// to it; where they do not, free KV blocks are lent (taken out of the cache's free
    /// blocks and out of the GPUs' KV pool in the ledger) to cover the rest, if there
    /// are enough. Returns the batch's peak when it fits. The reserve holds one full-budget prefill beside a decode step; on
    /// bursty-8t at rate scale 4.47, deferring every micro-batch beyond it instead
    /// took `slice` from 7.65% to 17.56% violations.
    fn activations_fit(&mut self, inst: usize, batch: BatchId) -> Option<u64> {
        let peak = self.batch_peak(inst, batch);
        let need = self.executing_peak(inst) + peak;
        let (reserve, block) = self.reserve_and_block(inst);
        let have = reserve + self.insts[inst].engine.lent_blocks() as u64 * block;
        if need <= have {
            return Some(peak);
        }
        let n = (need - have).div_ceil(block.max(1));
        if n > u32::MAX as u64 || !self.insts[inst].engine.lend_blocks(n as u32) {
            return None;
        }
        self.move_kv_pool(inst, n * block, false);
        self.kv_sync(inst);
        Some(peak)
    }

    /// After a batch ended: lent blocks the executing ones no longer need go back.
    fn settle_lent(&mut self, inst: usize) {
        if self.insts[inst].engine.lent_blocks() == 0 {
            return;
        }
        let (reserve, block) = self.reserve_and_block(inst);
        let over = self.executing_peak(inst).saturating_sub(reserve).div_ceil(block.max(1));
        let lent = self.insts[inst].engine.lent_blocks() as u64;
        if over < lent {
            let back = self.insts[inst].engine.return_blocks((lent - over) as u32) as u64;
            self.move_kv_pool(inst, back * block, true);
        }
    }

    fn batch_peak(&self, inst: usize, b: BatchId) -> u64 {
        let rt = &self.insts[inst];
        let t = &self.scn.tenants[rt.tenant.index()];
        crate::scenario::peak_activation_bytes(&t.model, t.gpus.len() as u32, rt.engine.batch(b))
    }

    /// The executing batches' peaks summed, each computed once and kept.
    fn executing_peak(&mut self, inst: usize) -> u64 {
        let mut sum = 0;
        for k in 0..self.insts[inst].batches.len() {
            let (b, known) = self.insts[inst].batches[k];
            let peak = known.unwrap_or_else(|| self.batch_peak(inst, b));
            self.insts[inst].batches[k].1 = Some(peak);
            sum += peak;
        }
        sum
    }

    /// The instance's activation reserve and the bytes of one KV block, per GPU.
    pub(crate) fn reserve_and_block(&self, inst: usize) -> (u64, u64) {
        let t = &self.scn.tenants[self.insts[inst].tenant.index()];
        (t.activation_reserve, t.engine.block_size as u64 * t.model.kv_bytes_per_token(t.gpus.len() as u32))
    }

    /// Lent KV bytes leave the GPUs' KV pools in the ledger (activations take them), or
    /// come back.
    fn move_kv_pool(&mut self, inst: usize, bytes: u64, back: bool) {
        for g in &self.scn.deployment.group(self.insts[inst].group).gpus {
            let l = &mut self.dev.gpus[g.0 as usize].ledger;
            if back {
                l.alloc(MemoryKind::KvPool, bytes, self.now);
            } else {
                l.release(MemoryKind::KvPool, bytes);
            }
        }
    }

    /// The batch starts executing: it reaches the GPUs after the engine's CPU overhead.
    fn begin_iteration(&mut self, inst: usize, batch: BatchId, peak: Option<u64>) {
        let rt = &mut self.insts[inst];
        self.single_iterations += (rt.inflight == 0) as u64;
        rt.inflight += 1;
        rt.batches.push((batch, peak));
        let b = rt.engine.batch(batch);
        let overhead = self.opts.cpu_overhead.iteration_ns(b.prefills.len() + b.decodes.len());
        let at = self.paced_launch(inst, batch, self.now + overhead);
        let rt = &mut self.insts[inst];
        rt.next_launch = rt.next_launch.min(at);
        if at > self.now + overhead {
            self.pace(inst, batch, self.now + overhead, at);
        } else if overhead == 0 {
            self.fast.inline_launch = true;
            self.launch(inst, batch);
            self.fast.inline_launch = false;
        } else {
            self.push(self.now + overhead, Ev::Launch(inst as u32, batch));
        }
    }

    /// Puts a scheduled batch's operator DAG into the GMG.
    pub(crate) fn launch(&mut self, inst: usize, batch: BatchId) {
        let rt = &mut self.insts[inst];
        rt.next_launch = u64::MAX;
        let setup = &self.scn.tenants[rt.tenant.index()];
        let b = rt.engine.batch(batch);
        if crate::pace::decode_only(b) {
            rt.last_decode_launch = self.now;
        }
        let tp = setup.gpus.len() as u32;
        let dag = setup.model.iteration_dag(b, tp);
        let new_prompt_tokens = rt.engine.batch_new_prompt_tokens(batch);
        let ctx = &self.group_ctx[rt.group.index()];
        let mut pred: [Vec<u64>; 3] = Default::default();
        for (seg, ops) in [&dag.head, &dag.layer, &dag.tail].into_iter().enumerate() {
            let exec = self.exec.as_deref();
            pred[seg].extend(ops.iter().map(|o| {
                let ns = self.cost.op_ns(ctx, o).max(1);
                exec.map_or(ns, |x| ((ns as f64 * x.correction(o)) as u64).max(1))
            }));
        }
        if self.try_fast(inst, batch, &dag, &pred, new_prompt_tokens) {
            return;
        }
        let rt = &self.insts[inst];
        // Laid out op by op once: finding an op's segment and place in the layer
        // template took two divisions per op.
        let mut all = std::mem::take(&mut self.pred_scratch);
        all.clear();
        all.extend_from_slice(&pred[0]);
        for _ in 0..dag.layers {
            all.extend_from_slice(&pred[1]);
        }
        all.extend_from_slice(&pred[2]);
        self.ready.clear();
        let iter = self.gmg.add_iteration(rt.tenant, &dag, self.now, |i| all[i as usize], &mut self.ready);
        self.pred_scratch = all;
        if self.iters.len() <= iter.index() {
            self.iters.resize_with(iter.index() + 1, || None);
        }
        let mut reqs = Vec::new();
        if self.exec.is_some() {
            let rt = &self.insts[inst];
            rt.engine.batch_seqs(batch, &mut self.batch_seqs);
            reqs.extend(self.batch_seqs.iter().map(|s| rt.seq_to_req[s.0 as usize]));
        }
        self.iters[iter.index()] =
            Some(IterRt { inst: inst as u32, batch, dag, new_prompt_tokens, serial: self.iterations, reqs });
        self.iterations += 1;
        let ready = std::mem::take(&mut self.ready);
        self.place(&ready, None);
        self.ready = ready;
    }

    pub(crate) fn iter_of(&self, op: OpId) -> &IterRt {
        self.iters[self.gmg.op(op).iter.index()].as_ref().expect("iteration in flight")
    }

    fn op_done(&mut self, op: OpId) {
        let node = self.gmg.op(op);
        let (start, iter, tenant) = (node.start_ns, node.iter, node.tenant);
        let group = node.group.expect("a running op has a group");
        let q = self.dev.queue_of(group, tenant);
        self.closed.clear();
        self.dev.release(q, self.now, &mut self.closed);
        for &(x, since) in &self.closed {
            self.series.add_busy(x, since, self.now);
        }
        if self.release_guest(op, group) {
            for g in &self.scn.deployment.group(group).gpus {
                self.stats.guest_busy_ns[g.0 as usize] += self.now - start;
            }
        }
        if let Some(tl) = self.timeline.as_mut().map(std::cell::RefCell::get_mut) {
            tl.finished(slicesched_whatif::OpKey(self.op_keys[op.raw() as usize]), self.now).expect("started op");
        }
        if self.rec.wants(start) {
            self.record_op(op, group);
        }
        if self.busy.is_some() {
            self.record_busy(op, group, start, tenant);
        }
        self.ready.clear();
        self.freed.clear();
        let done = self.gmg.finish(op, self.now, &mut self.ready, &mut self.freed);
        for i in 0..self.freed.len() {
            let (p, bytes) = self.freed[i];
            self.free_output(p, bytes);
        }
        let ready = std::mem::take(&mut self.ready);
        self.place(&ready, Some(op));
        self.ready = ready;
        if done {
            self.complete_iteration(iter);
        }
        self.try_start(q);
    }

    fn complete_iteration(&mut self, iter: IterId) {
        let it = self.iters[iter.index()].take().expect("iteration in flight");
        self.gmg.retire(iter);
        self.iteration_done(it.inst as usize, it.batch, it.new_prompt_tokens, it.serial);
    }

    /// An iteration's last op ended (op by op or on the fast path): the engine
    /// completes its batch and schedules the next.
    pub(crate) fn iteration_done(&mut self, inst: usize, batch: BatchId, new_prompt_tokens: u64, serial: u64) {
        if let Some(x) = self.exec.as_mut() {
            x.iteration_done(serial);
        }
        let rt = &mut self.insts[inst];
        rt.inflight -= 1;
        let k = rt.batches.iter().position(|b| b.0 == batch).expect("an executing batch");
        rt.batches.swap_remove(k);
        let sampled = rt.engine.batch(batch).sampled();
        self.series.add_tokens(self.now, new_prompt_tokens, sampled);
        self.seq_events.clear();
        rt.engine.complete(batch, &mut self.seq_events);
        for ev in &self.seq_events {
            match *ev {
                SeqEvent::FirstToken { seq } => {
                    self.records[rt.seq_to_req[seq.0 as usize] as usize].first_token_ns = Some(self.now);
                }
                SeqEvent::Finished { seq } => {
                    let req = rt.seq_to_req[seq.0 as usize];
                    if let Some(x) = self.exec.as_mut() {
                        x.kv_released(req);
                    }
                    let r = &mut self.records[req as usize];
                    r.finish_ns = Some(self.now);
                    r.preemptions = rt.engine.seq_preemptions(seq);
                    self.completed += 1;
                    let v = r.violates();
                    self.series.add_completion(self.now, v);
                }
            }
        }
        if let Some(x) = self.exec.as_mut() {
            x.take_ended(&mut self.ends);
        }
        self.settle_lent(inst);
        self.kv_sync(inst);
        self.apply_ends();
        // Before the next batch forms: its requests are idle now, and one that leaves
        // is not scheduled here.
        self.give_back(inst);
        self.maybe_migrate(inst);
        self.start_iterations(inst);
        self.copy_inst_idle(inst);
    }

    /// Tells the executor about the requests the instance's last `schedule` preempted.
    fn release_preempted(&mut self, inst: usize) {
        self.insts[inst].engine.take_preempted(&mut self.preempted);
        if let Some(x) = self.exec.as_mut() {
            for s in &self.preempted {
                x.kv_released(self.insts[inst].seq_to_req[s.0 as usize]);
            }
        }
        self.preempted.clear();
    }

    /// Ends the requests in `ends` that are not executing (the others wait for their
    /// batch to complete); wakes the instances whose blocks they freed.
    pub(crate) fn apply_ends(&mut self) {
        let mut i = 0;
        let mut woke: Vec<usize> = Vec::new();
        while i < self.ends.len() {
            let (req, end) = self.ends[i];
            let Some(&(inst, seq)) = self.req_seq.get(req as usize).filter(|l| l.0 != u32::MAX) else {
                self.ends.swap_remove(i);
                continue;
            };
            let (inst, seq) = (inst as usize, slicesched_engine::SeqId(seq));
            let e = &mut self.insts[inst].engine;
            if e.is_inflight(seq) {
                i += 1;
                continue;
            }
            self.ends.swap_remove(i);
            if !e.abort(seq) {
                continue;
            }
            let generated = e.seq_generated(seq);
            let preemptions = e.seq_preemptions(seq);
            if let Some(x) = self.exec.as_mut() {
                x.kv_released(req);
            }
            let r = &mut self.records[req as usize];
            r.preemptions = preemptions;
            match end {
                crate::End::Stopped => {
                    r.finish_ns = Some(self.now);
                    r.output_tokens = generated.max(1);
                    if r.first_token_ns.is_none() {
                        r.first_token_ns = Some(self.now);
                    }
                    self.completed += 1;
                    let v = r.violates();
                    self.series.add_completion(self.now, v);
                }
                crate::End::Dropped(why) => r.dropped = Some(why),
            }
            if !woke.contains(&inst) {
                woke.push(inst);
            }
        }
        for inst in woke {
            self.kv_sync(inst);
            if self.insts[inst].inflight == 0 {
                self.start_iterations(inst);
            }
        }
    }

    /// Adds a finished op's time to the busy buckets of every GPU of its group.
    fn record_busy(&mut self, op: OpId, group: GroupId, start: u64, tenant: TenantId) {
        let borrowed = group != self.insts[self.iter_of(op).inst as usize].group;
        let now = self.now;
        let Some(b) = self.busy.as_mut() else { return };
        for g in &self.scn.deployment.group(group).gpus {
            b.add(g.0 as usize, tenant.index(), start, now, borrowed);
        }
    }

    /// Records a finished op once per GPU of its group.
    fn record_op(&mut self, op: OpId, group: GroupId) {
        let n = self.gmg.op(op);
        let it = self.iter_of(op);
        let b = self.insts[it.inst as usize].engine.batch(it.batch);
        let home = self.insts[it.inst as usize].group;
        let base = crate::OpRecord {
            gpu: 0,
            tenant: n.tenant.0,
            kind: n.kind,
            layer: n.layer,
            iteration: it.serial,
            start_ns: n.start_ns,
            end_ns: self.now,
            predicted_ns: n.predicted_ns,
            transfer_ns: self.rec.xfer(op.raw() as usize),
            borrowed: group != home,
            prefill_tokens: b.prefills.iter().map(|p| p.chunk).sum(),
            decodes: b.decodes.len() as u32,
        };
        for g in &self.scn.deployment.group(group).gpus {
            self.rec.ops.push(crate::OpRecord { gpu: g.0, ..base });
        }
    }

    pub(crate) fn finish(self) -> ReplayResult {
        self.finish_with(None)
    }

    /// [`Sim::finish`] for a loop that retired records: `retired` holds their figures
    /// and the summary adds the records still held.
    pub(crate) fn finish_with(mut self, retired: Option<crate::totals::RunTotals>) -> ReplayResult {
        let end = self.now.max(1);
        for g in &mut self.dev.gpus {
            if !g.busy() {
                g.gaps.record(end - g.idle_since);
                g.gap_lengths.record(end - g.idle_since);
            }
        }
        for inst in &self.insts {
            for (seq, &req) in inst.seq_to_req.iter_ids() {
                // A live loop may have retired the record of an ended request already.
                let Some(r) = self.records.get_mut(req as usize) else { continue };
                if r.finish_ns.is_none() && r.dropped.is_none() {
                    r.dropped = Some("unfinished when the drain window closed");
                    r.preemptions = inst.engine.seq_preemptions(slicesched_engine::SeqId(seq as u32));
                }
            }
        }
        let buckets = (end / crate::metrics::SERIES_BUCKET_NS + 1) as usize;
        self.series.pad(buckets);
        let summary = match retired {
            None => self.summarize(end),
            Some(totals) => self.summarize_retired(end, totals),
        };
        let mut ops = std::mem::take(&mut self.rec.ops);
        ops.sort_by_key(|o| (o.start_ns, o.gpu));
        ReplayResult {
            summary,
            records: self.records.into_vec(),
            series: self.series,
            dependency_violations: self.dep_violations,
            ops,
            decisions: std::mem::take(&mut self.rec.decisions),
            busy: self.busy.take().map(|b| b.finish(end)),
            cancelled: self.cancelled,
            violation_at_stop: self.violation_at_stop,
            fast_iterations: self.fast.iterations,
        }
    }
}
