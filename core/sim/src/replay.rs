//! The event loop: arrivals and op completions on an integer-nanosecond clock.

use crate::devices::Devices;
use crate::metrics::{quantile_ms, GpuStats, RequestRecord, Summary, TenantStats, TimeSeries, Timing};
use crate::scenario::Scenario;
use slicesched_cost::{CostModel, CpuOverhead, DeviceCtx};
use slicesched_engine::{Admission, Engine, SeqEvent};
use slicesched_gmg::{Gmg, GroupId, IterId, MemoryKind, OpId, OpState, TenantId};
use slicesched_model::{IterationDag, OpKind};
use slicesched_policy::{Placement, Policy, ReadyOp, TenantView, View};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Knobs of one replay.
#[derive(Debug, Clone, Copy)]
pub struct ReplayOptions {
    /// Call the progress callback every this many op events.
    pub progress_every: u64,
    /// Check at every op start that all its inputs are done (for tests; costs time).
    pub check_dependencies: bool,
    /// Engine CPU time between iterations (the GPU idles meanwhile).
    pub cpu_overhead: CpuOverhead,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self { progress_every: 1 << 20, check_dependencies: false, cpu_overhead: CpuOverhead::default_a100() }
    }
}

/// What the event loop handles besides arrivals (which come from a sorted list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// An op finished on its group.
    OpDone(OpId),
    /// A tenant's engine finished its CPU work: the scheduled batch reaches the GPUs.
    Launch(u32),
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
    pub records: Vec<RequestRecord>,
    pub series: TimeSeries,
    /// Ops that started before one of their inputs was done (must be 0).
    pub dependency_violations: u64,
}

struct TenantRt {
    engine: Engine,
    home: GroupId,
    dag: Option<IterationDag>,
    iter: Option<IterId>,
    /// A batch is scheduled: on the CPU or on the GPUs.
    busy: bool,
    /// Predicted ns on the home group of the head, layer-template and tail ops.
    pred: [Vec<u64>; 3],
    seq_to_req: Vec<u32>,
    new_prompt_tokens: u64,
}

struct Sim<'a> {
    scn: &'a Scenario,
    cost: &'a CostModel,
    policy: &'a mut dyn Policy,
    opts: ReplayOptions,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    gmg: Gmg,
    dev: Devices,
    group_ctx: Vec<DeviceCtx>,
    tenants: Vec<TenantRt>,
    records: Vec<RequestRecord>,
    series: TimeSeries,
    op_events: u64,
    iterations: u64,
    completed: u64,
    dep_violations: u64,
    rejected: Vec<(String, u64)>,
    // Scratch buffers reused on the hot path.
    ready: Vec<OpId>,
    freed: Vec<(OpId, u64)>,
    ready_view: Vec<ReadyOp>,
    placements: Vec<Placement>,
    seq_events: Vec<SeqEvent>,
    busy_until: Vec<u64>,
    queued: Vec<u32>,
    tenant_views: Vec<TenantView>,
}

/// Replays a scenario under a policy. Deterministic: same inputs, same result.
pub fn replay(
    scn: &Scenario,
    policy: &mut dyn Policy,
    cost: &CostModel,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(&Progress),
) -> ReplayResult {
    let dev = Devices::new(&scn.cluster, &scn.deployment);
    let group_ctx = scn
        .deployment
        .groups
        .iter()
        .map(|g| DeviceCtx { sku: scn.cluster.gpu(g.gpus[0]).sku.clone(), group_link: scn.cluster.group_link(&g.gpus) })
        .collect();
    let tenants = scn
        .tenants
        .iter()
        .enumerate()
        .map(|(i, t)| TenantRt {
            engine: Engine::new(t.engine, t.kv_blocks),
            home: scn.deployment.home(TenantId(i as u32)).expect("every tenant has a home").group,
            dag: None,
            iter: None,
            busy: false,
            pred: Default::default(),
            seq_to_req: Vec::new(),
            new_prompt_tokens: 0,
        })
        .collect();
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
        .collect();
    let n_gpus = scn.cluster.len();
    let mut sim = Sim {
        scn,
        cost,
        policy,
        opts,
        now: 0,
        seq: 0,
        events: BinaryHeap::new(),
        gmg: Gmg::new(),
        dev,
        group_ctx,
        tenants,
        records,
        series: TimeSeries::new(n_gpus),
        op_events: 0,
        iterations: 0,
        completed: 0,
        dep_violations: 0,
        rejected: Vec::new(),
        ready: Vec::new(),
        freed: Vec::new(),
        ready_view: Vec::new(),
        placements: Vec::new(),
        seq_events: Vec::new(),
        busy_until: vec![0; n_gpus],
        queued: vec![0; n_gpus],
        tenant_views: Vec::new(),
    };
    sim.load_memory();
    sim.run(progress);
    sim.finish()
}

impl Sim<'_> {
    fn load_memory(&mut self) {
        for (i, t) in self.scn.tenants.iter().enumerate() {
            let home = self.scn.deployment.home(TenantId(i as u32)).expect("home");
            let kv = t.kv_blocks as u64 * t.engine.block_size as u64 * t.model.kv_bytes_per_token(t.gpus.len() as u32);
            for g in &t.gpus {
                let l = &mut self.dev.gpus[g.0 as usize].ledger;
                l.alloc(MemoryKind::Weights, home.weight_bytes_per_gpu, 0);
                l.alloc(MemoryKind::KvPool, kv, 0);
            }
        }
    }

    fn horizon(&self) -> u64 {
        let last = self.scn.requests.last().map_or(0, |r| r.1.arrival_ns);
        last + (self.scn.spec.drain_s * 1e9) as u64
    }

    fn run(&mut self, progress: &mut dyn FnMut(&Progress)) {
        let horizon = self.horizon();
        let mut next_arrival = 0usize;
        let mut next_report = self.opts.progress_every;
        loop {
            let arr = self.scn.requests.get(next_arrival).map(|r| r.1.arrival_ns);
            let ev = self.events.peek().map(|e| e.0 .0);
            // Arrivals go before op completions at the same instant: a fixed rule keeps
            // the replay deterministic.
            let take_arrival = match (arr, ev) {
                (Some(a), Some(e)) => a <= e,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_arrival {
                let t = arr.expect("arrival");
                if t > horizon {
                    break;
                }
                self.now = t;
                self.arrive(next_arrival);
                next_arrival += 1;
            } else {
                let Reverse((t, _, ev)) = self.events.pop().expect("event");
                if t > horizon {
                    break;
                }
                self.now = t;
                match ev {
                    Ev::OpDone(op) => self.op_done(op),
                    Ev::Launch(tenant) => self.launch(tenant as usize),
                }
                if self.op_events >= next_report {
                    next_report += self.opts.progress_every;
                    progress(&Progress {
                        sim_ns: self.now,
                        horizon_ns: horizon,
                        op_events: self.op_events,
                        completed: self.completed,
                        requests: self.records.len() as u64,
                    });
                }
            }
        }
        progress(&Progress {
            sim_ns: self.now,
            horizon_ns: horizon,
            op_events: self.op_events,
            completed: self.completed,
            requests: self.records.len() as u64,
        });
    }

    fn arrive(&mut self, idx: usize) {
        let (t, r) = &self.scn.requests[idx];
        let tenant = &mut self.tenants[*t as usize];
        match tenant.engine.add_request(r.prompt_tokens, r.output_tokens.max(1)) {
            Admission::Queued(seq) => {
                debug_assert_eq!(seq.0 as usize, tenant.seq_to_req.len());
                tenant.seq_to_req.push(idx as u32);
                if !tenant.busy {
                    self.start_iteration(*t as usize);
                }
            }
            Admission::TooLong { .. } => self.records[idx].dropped = Some("needs more KV cache than the tenant has"),
        }
    }

    /// Lets the engine form its next batch; the batch reaches the GPUs after the
    /// engine's CPU overhead.
    fn start_iteration(&mut self, t: usize) {
        let rt = &mut self.tenants[t];
        let Some(batch) = rt.engine.schedule() else {
            rt.busy = false;
            return;
        };
        rt.busy = true;
        let overhead = self.opts.cpu_overhead.iteration_ns(batch.prefills.len() + batch.decodes.len());
        if overhead == 0 {
            self.launch(t);
        } else {
            self.seq += 1;
            self.events.push(Reverse((self.now + overhead, self.seq, Ev::Launch(t as u32))));
        }
    }

    /// Puts the scheduled batch's operator DAG into the GMG.
    fn launch(&mut self, t: usize) {
        let setup = &self.scn.tenants[t];
        let rt = &mut self.tenants[t];
        let batch = rt.engine.current_batch();
        let tp = setup.gpus.len() as u32;
        let dag = setup.model.iteration_dag(batch, tp);
        rt.new_prompt_tokens = rt.engine.batch_new_prompt_tokens();
        let ctx = &self.group_ctx[rt.home.index()];
        for (seg, ops) in [&dag.head, &dag.layer, &dag.tail].into_iter().enumerate() {
            rt.pred[seg].clear();
            rt.pred[seg].extend(ops.iter().map(|o| self.cost.op_ns(ctx, o).max(1)));
        }
        let (h, l) = (dag.head.len() as u32, dag.layer.len() as u32);
        let body = l * dag.layers;
        let pred = &rt.pred;
        let predicted = |i: u32| {
            if i < h {
                pred[0][i as usize]
            } else if i < h + body {
                pred[1][((i - h) % l) as usize]
            } else {
                pred[2][(i - h - body) as usize]
            }
        };
        self.ready.clear();
        let iter = self.gmg.add_iteration(TenantId(t as u32), &dag, self.now, predicted, &mut self.ready);
        rt.dag = Some(dag);
        rt.iter = Some(iter);
        self.iterations += 1;
        let ready = std::mem::take(&mut self.ready);
        self.place(&ready);
        self.ready = ready;
    }

    /// Asks the policy, validates its answer, and queues every ready op somewhere safe.
    fn place(&mut self, ready: &[OpId]) {
        if ready.is_empty() {
            return;
        }
        self.ready_view.clear();
        for &op in ready {
            let n = self.gmg.op(op);
            self.ready_view.push(ReadyOp {
                op,
                tenant: n.tenant,
                kind: n.kind,
                layer: n.layer,
                predicted_ns: n.predicted_ns,
                home: self.tenants[n.tenant.index()].home,
                ready_ns: n.ready_ns,
            });
        }
        for (i, g) in self.dev.gpus.iter().enumerate() {
            self.busy_until[i] = g.busy_until.max(self.now);
            self.queued[i] = g.queued;
        }
        self.tenant_views.clear();
        for (i, t) in self.tenants.iter().enumerate() {
            let (w, r) = t.engine.queue_lengths();
            self.tenant_views.push(TenantView { tenant: TenantId(i as u32), home: t.home, waiting: w as u32, running: r as u32 });
        }
        let view = View {
            now_ns: self.now,
            deployment: &self.scn.deployment,
            gpu_busy_until: &self.busy_until,
            gpu_queued: &self.queued,
            tenants: &self.tenant_views,
        };
        self.placements.clear();
        self.policy.place(&view, &self.ready_view, &mut self.placements);

        let placements = std::mem::take(&mut self.placements);
        for p in &placements {
            let Some(r) = self.ready_view.iter().find(|r| r.op == p.op).copied() else {
                self.reject("op not offered");
                continue;
            };
            if self.gmg.op(p.op).state != OpState::Ready {
                self.reject("op placed twice");
                continue;
            }
            let why = self.check(&r, p.group);
            let group = match why {
                None => p.group,
                Some(reason) => {
                    self.reject(reason);
                    r.home
                }
            };
            self.commit(p.op, group, p.priority);
        }
        self.placements = placements;
        for i in 0..self.ready_view.len() {
            let r = self.ready_view[i];
            if self.gmg.op(r.op).state == OpState::Ready {
                self.reject("op left unplaced");
                self.commit(r.op, r.home, 0);
            }
        }
    }

    /// Why a placement breaks an invariant, if it does.
    fn check(&self, r: &ReadyOp, group: GroupId) -> Option<&'static str> {
        if group.index() >= self.scn.deployment.groups.len() {
            return Some("no such GPU group");
        }
        if r.kind == OpKind::Attention && group != r.home {
            return Some("attention away from its KV cache");
        }
        if !self.scn.deployment.holds(r.tenant, group, r.layer) {
            return Some("weights not resident on the group");
        }
        None
    }

    fn reject(&mut self, reason: &str) {
        match self.rejected.iter_mut().find(|(r, _)| r == reason) {
            Some((_, n)) => *n += 1,
            None => self.rejected.push((reason.to_string(), 1)),
        }
    }

    fn commit(&mut self, op: OpId, group: GroupId, priority: i32) {
        self.gmg.place(op, group);
        self.dev.enqueue(group, op, priority);
        self.try_start(group);
    }

    fn try_start(&mut self, around: GroupId) {
        while let Some((group, op)) = self.dev.next_startable(around) {
            self.start_op(group, op);
        }
    }

    fn start_op(&mut self, group: GroupId, op: OpId) {
        if self.opts.check_dependencies {
            let late = self.gmg.inputs(op).any(|p| {
                let n = self.gmg.op(p);
                n.state != OpState::Done || n.end_ns > self.now
            });
            self.dep_violations += late as u64;
        }
        let node = self.gmg.op(op);
        let (tenant, index, out_bytes) = (node.tenant, node.index, node.out_bytes);
        let rt = &self.tenants[tenant.index()];
        let dur = if group == rt.home {
            node.predicted_ns
        } else {
            let spec = rt.dag.as_ref().expect("in-flight dag").op(index).spec;
            self.cost.op_ns(&self.group_ctx[group.index()], spec).max(1)
        };
        self.gmg.start(op, self.now);
        let end = self.now + dur;
        for i in 0..self.dev.groups[group.index()].gpus.len() {
            let x = self.dev.groups[group.index()].gpus[i];
            self.dev.gpus[x].ledger.alloc(MemoryKind::Activations, out_bytes, self.now);
        }
        self.dev.occupy(group, self.now, end);
        self.seq += 1;
        self.events.push(Reverse((end, self.seq, Ev::OpDone(op))));
        self.op_events += 1;
    }

    fn op_done(&mut self, op: OpId) {
        let node = self.gmg.op(op);
        let (tenant, start) = (node.tenant, node.start_ns);
        let group = node.group.expect("a running op has a group");
        self.dev.release(group, start, self.now);
        for i in 0..self.dev.groups[group.index()].gpus.len() {
            let x = self.dev.groups[group.index()].gpus[i];
            self.series.add_busy(x, start, self.now);
        }
        self.ready.clear();
        self.freed.clear();
        let done = self.gmg.finish(op, self.now, &mut self.ready, &mut self.freed);
        for i in 0..self.freed.len() {
            let (p, bytes) = self.freed[i];
            let pg = self.gmg.op(p).group.expect("placed");
            for j in 0..self.dev.groups[pg.index()].gpus.len() {
                let x = self.dev.groups[pg.index()].gpus[j];
                self.dev.gpus[x].ledger.release(MemoryKind::Activations, bytes);
            }
        }
        let ready = std::mem::take(&mut self.ready);
        self.place(&ready);
        self.ready = ready;
        if done {
            self.complete_iteration(tenant.index());
        }
        self.try_start(group);
    }

    fn complete_iteration(&mut self, t: usize) {
        let rt = &mut self.tenants[t];
        let sampled = rt.engine.current_batch().sampled();
        self.series.add_tokens(self.now, rt.new_prompt_tokens, sampled);
        self.seq_events.clear();
        rt.engine.complete(&mut self.seq_events);
        for ev in &self.seq_events {
            match *ev {
                SeqEvent::FirstToken { seq } => {
                    self.records[rt.seq_to_req[seq.0 as usize] as usize].first_token_ns = Some(self.now);
                }
                SeqEvent::Finished { seq } => {
                    let r = &mut self.records[rt.seq_to_req[seq.0 as usize] as usize];
                    r.finish_ns = Some(self.now);
                    r.preemptions = rt.engine.seq_preemptions(seq);
                    self.completed += 1;
                    let v = r.violates();
                    self.series.add_completion(self.now, v);
                }
            }
        }
        let iter = rt.iter.take().expect("iteration in flight");
        self.gmg.retire(iter);
        self.start_iteration(t);
    }

    fn finish(mut self) -> ReplayResult {
        let end = self.now.max(1);
        for g in &mut self.dev.gpus {
            if !g.busy {
                g.gaps.record(end - g.idle_since);
            }
        }
        for (i, r) in self.records.iter_mut().enumerate() {
            if r.finish_ns.is_none() && r.dropped.is_none() {
                r.dropped = Some("unfinished when the drain window closed");
                let t = &self.tenants[r.tenant as usize];
                if let Some(seq) = t.seq_to_req.iter().position(|&x| x as usize == i) {
                    r.preemptions = t.engine.seq_preemptions(slicesched_engine::SeqId(seq as u32));
                }
            }
        }
        let buckets = (end / crate::metrics::SERIES_BUCKET_NS + 1) as usize;
        self.series.pad(buckets);
        let summary = self.summarize(end);
        ReplayResult { summary, records: self.records, series: self.series, dependency_violations: self.dep_violations }
    }

    fn summarize(&self, end: u64) -> Summary {
        let dur_s = end as f64 / 1e9;
        let stats = |recs: &mut dyn Iterator<Item = &RequestRecord>| {
            let (mut n, mut done, mut dropped, mut viol, mut pt, mut ot) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
            let (mut ttft, mut tpot) = (Vec::new(), Vec::new());
            for r in recs {
                n += 1;
                viol += r.violates() as u64;
                if r.finish_ns.is_some() {
                    done += 1;
                    pt += r.prompt_tokens as u64;
                    ot += r.output_tokens as u64;
                    ttft.push(r.ttft_ns().unwrap_or(0));
                    if r.output_tokens > 1 {
                        tpot.push(r.tpot_ns().unwrap_or(0));
                    }
                } else {
                    dropped += 1;
                }
            }
            let q = |v: &mut Vec<u64>, p| quantile_ms(v, p);
            (
                n,
                done,
                dropped,
                if n > 0 { viol as f64 / n as f64 } else { 0.0 },
                pt as f64 / dur_s,
                ot as f64 / dur_s,
                [q(&mut ttft, 0.5), q(&mut ttft, 0.9), q(&mut ttft, 0.99)],
                [q(&mut tpot, 0.5), q(&mut tpot, 0.9), q(&mut tpot, 0.99)],
            )
        };
        let tenants: Vec<TenantStats> = self
            .scn
            .tenants
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let (n, done, dropped, vr, pts, ots, ttft, tpot) = stats(&mut self.records.iter().filter(|r| r.tenant as usize == i));
                TenantStats {
                    name: t.name.clone(),
                    model: t.model.name.clone(),
                    gpus: t.gpus.iter().map(|g| g.0).collect(),
                    kv_blocks: t.kv_blocks,
                    requests: n,
                    completed: done,
                    dropped,
                    violation_rate: vr,
                    prompt_tokens_per_s: pts,
                    output_tokens_per_s: ots,
                    ttft_p50_ms: ttft[0],
                    ttft_p90_ms: ttft[1],
                    ttft_p99_ms: ttft[2],
                    tpot_p50_ms: tpot[0],
                    tpot_p90_ms: tpot[1],
                    tpot_p99_ms: tpot[2],
                    preemptions: self.tenants[i].engine.preemptions(),
                    sla_ttft_ms: t.sla.ttft_ms,
                    sla_ttft_ms_per_1k: t.sla.ttft_ms_per_1k,
                    sla_tpot_ms: t.sla.tpot_ms,
                }
            })
            .collect();
        let gpus: Vec<GpuStats> = self
            .dev
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| GpuStats {
                gpu: i as u32,
                sku: self.scn.cluster.gpus[i].sku.name.clone(),
                busy_fraction: g.busy_ns as f64 / end as f64,
                busy_s: g.busy_ns as f64 / 1e9,
                idle_gaps: g.gaps.total_count(),
                idle_gap_p50_ms: g.gaps.quantile_ms(0.5),
                idle_gap_p90_ms: g.gaps.quantile_ms(0.9),
                idle_gap_p99_ms: g.gaps.quantile_ms(0.99),
                idle_share_le_1ms: g.gaps.idle_fraction_below_ms(1.0),
                idle_share_le_10ms: g.gaps.idle_fraction_below_ms(10.0),
                idle_share_le_100ms: g.gaps.idle_fraction_below_ms(100.0),
                idle_share_le_1s: g.gaps.idle_fraction_below_ms(1000.0),
                peak_memory_gb: g.ledger.peak as f64 / 1e9,
                capacity_gb: g.ledger.capacity as f64 / 1e9,
                oom_events: g.ledger.oom_events,
                ops: g.ops,
                gap_histogram: g.gaps.clone(),
            })
            .collect();
        let (n, done, dropped, vr, pts, ots, ttft, tpot) = stats(&mut self.records.iter());
        let mut reasons: Vec<(String, u64)> = Vec::new();
        for r in &self.records {
            if let (Some(why), None) = (r.dropped, r.finish_ns) {
                match reasons.iter_mut().find(|(x, _)| x == why) {
                    Some((_, c)) => *c += 1,
                    None => reasons.push((why.to_string(), 1)),
                }
            }
        }
        Summary {
            policy: self.policy.name().to_string(),
            scenario: self.scn.spec.name.clone(),
            seed: self.scn.spec.seed,
            requests: n,
            completed: done,
            dropped,
            dropped_by_reason: reasons,
            skipped_trace_rows: self.scn.skipped.clone(),
            violation_rate: vr,
            duration_s: dur_s,
            prompt_tokens_per_s: pts,
            output_tokens_per_s: ots,
            ttft_p50_ms: ttft[0],
            ttft_p90_ms: ttft[1],
            ttft_p99_ms: ttft[2],
            tpot_p50_ms: tpot[0],
            tpot_p90_ms: tpot[1],
            tpot_p99_ms: tpot[2],
            oom_events: gpus.iter().map(|g| g.oom_events).sum(),
            op_events: self.op_events,
            iterations: self.iterations,
            preemptions: self.tenants.iter().map(|t| t.engine.preemptions()).sum(),
            rejected_placements: self.rejected.clone(),
            gpu_busy_fraction: gpus.iter().map(|g| g.busy_fraction).sum::<f64>() / gpus.len().max(1) as f64,
            tenants,
            gpus,
            timing: Timing::default(),
        }
    }
}
