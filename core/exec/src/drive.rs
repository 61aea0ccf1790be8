//! The executor under the simulator's loop (`slicesched run`): each scenario GPU is a
//! device of the backend; each engine instance a loaded tenant (its home, with the
//! weight-only copies the planner placed); every op the simulator starts runs for real
//! and its measured time becomes its duration. Actual times also correct the cost
//! model's predictions online, per op kind, shape and token-count octave, smoothed.

use crate::model::{ExecModel, HostWeights};
use crate::runner::{ExecBatch, LayerRange, OpPlace, Runner, SeqWork, Stepper};
use crate::{Backend, DeviceId, ExecError};
use serde::Serialize;
use slicesched_gmg::{GroupId, TenantHome};
use slicesched_model::{OpKind, OpShape, OpSpec};
use slicesched_sim::{ExecOp, OpExecutor, Scenario};
use std::collections::HashMap;

/// Weight of the newest measurement in the smoothed correction.
const ALPHA: f64 = 0.2;

/// One op as it ran.
#[derive(Debug, Clone, Serialize)]
pub struct ExecRecord {
    pub serial: u64,
    pub tenant: u32,
    pub kind: OpKind,
    pub layer: Option<u32>,
    pub group: u32,
    /// Ran on its instance's own group (else on a copy it borrowed).
    pub home: bool,
    pub tokens: u64,
    /// The cost model's prediction as fitted (no online correction).
    pub model_ns: u64,
    /// What the simulator's what-if used (with the online correction).
    pub predicted_ns: u64,
    /// The op's device time (its kernels' busy time, see `OpTiming::busy_ns`): its
    /// duration on the simulated timeline.
    pub actual_ns: u64,
    /// First kernel's start to last kernel's end on the host clock (with any time the
    /// host's scheduler took the core away, and gaps between the op's kernels).
    pub wall_ns: u64,
    /// Launch to start, beyond waiting for inputs (host overhead of the executor).
    pub overhead_ns: u64,
    pub copy_bytes: u64,
}

/// What the executor did, for the report's `executor` section.
#[derive(Debug, Clone, Serialize)]
pub struct ExecSummary {
    pub backend: &'static str,
    pub devices: Vec<DeviceReport>,
    pub ops: u64,
    pub kernel_s: f64,
    pub launches: u64,
    pub launch_overhead_us_mean: f64,
    pub bytes_copied: u64,
    pub correction: bool,
    pub errors: Vec<String>,
    /// Which path the tensor-parallel all-reduces took (NCCL or copies + Sum) and why.
    pub collectives: crate::runner::CollectiveReport,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    pub name: String,
    pub memory_bytes: u64,
    pub peak_bytes: u64,
    pub weights_bytes: u64,
    pub kv_bytes: u64,
}

/// Where each simulator engine instance lives in a runner.
pub struct Loaded {
    /// Runner tenant of each engine instance.
    pub inst_tenant: Vec<usize>,
    /// Per instance: deployment group → its group in the runner.
    pub groups: Vec<HashMap<GroupId, usize>>,
    /// Per instance: its own deployment group.
    pub home: Vec<GroupId>,
}

/// Loads every engine instance of the planned scenario onto `runner`, in the
/// simulator's instance order (homes in tenant order, then serving replicas), and the
/// weight-only copies the planner placed, each once; every instance of a tenant can run
/// ops on every group holding that tenant's weights, as the simulator lets the policy
/// place them: `models[t]` is tenant t's model and weights, `kv_blocks(home)` the KV
/// blocks the instance's cache gets. What `run` and the live server both materialise.
pub fn load_instances(
    runner: &mut Runner<'_>,
    scn: &Scenario,
    models: &[(ExecModel, HostWeights)],
    kv_blocks: impl Fn(&TenantHome) -> usize,
) -> Result<Loaded, ExecError> {
    let mut out = Loaded { inst_tenant: Vec::new(), groups: Vec::new(), home: Vec::new() };
    let mut order: Vec<_> = scn.deployment.homes.iter().filter(|h| h.serves).collect();
    order.sort_by_key(|h| (!h.is_home, h.tenant, h.group));
    let devs = |g: GroupId| -> Vec<DeviceId> { scn.deployment.group(g).gpus.iter().map(|g| DeviceId(g.0)).collect() };
    // Per instance: its scenario tenant, and the groups it loaded itself (runner index).
    let mut owned: Vec<(usize, Vec<(GroupId, usize)>)> = Vec::new();
    for h in order {
        let ti = h.tenant.index();
        let (model, w) = &models[ti];
        let name = &scn.tenants[ti].name;
        let t = runner
            .load_tenant(model.clone(), w, &devs(h.group), kv_blocks(h))
            .map_err(|e| ExecError::Placement(format!("tenant `{name}`: {e}")))?;
        let mut mine = vec![(h.group, 0)];
        // A weight-only copy is loaded once, with the tenant's first instance (its home);
        // the others share it below, as the simulator charges it once.
        if !owned.iter().any(|(u, _)| *u == ti) {
            let layers = model.layers() as u32;
            for r in scn.deployment.replicas(h.tenant).filter(|r| !r.serves && r.group != h.group) {
                let whole = r.layers == (0, layers);
                let range =
                    LayerRange { start: r.layers.0 as usize, end: r.layers.1 as usize, head: whole, tail: whole };
                let g = runner
                    .add_copy(t, w, &devs(r.group), range)
                    .map_err(|e| ExecError::Placement(format!("tenant `{name}` copy: {e}")))?;
                mine.push((r.group, g));
            }
        }
        out.inst_tenant.push(t);
        out.groups.push(mine.iter().copied().collect());
        out.home.push(h.group);
        owned.push((ti, mine));
    }
    for &t in &out.inst_tenant {
        runner.warm_up(t)?;
    }
    // Every instance of a tenant may run ops on every group holding that tenant's
    // weights (the policy borrows a serving copy's weights as it borrows a weight-only
    // copy's): the other instances' groups are shared, not loaded again.
    for i in 0..owned.len() {
        for j in (0..owned.len()).filter(|&j| j != i && owned[j].0 == owned[i].0) {
            for &(g, rg) in &owned[j].1 {
                if out.groups[i].contains_key(&g) {
                    continue;
                }
                let a = runner.share_group(out.inst_tenant[i], out.inst_tenant[j], rg)?;
                out.groups[i].insert(g, a);
            }
        }
    }
    Ok(out)
}

/// The [`OpExecutor`] of `slicesched run`.
pub struct Driver<'b> {
    runner: Runner<'b>,
    /// Runner tenant of each simulator engine instance.
    inst_tenant: Vec<usize>,
    /// Per runner tenant: deployment group → its group in the runner.
    groups: Vec<HashMap<GroupId, usize>>,
    home: Vec<GroupId>,
    steps: HashMap<u64, Stepper<'b>>,
    corr: HashMap<CorrKey, f64>,
    pub correct: bool,
    pub records: Vec<ExecRecord>,
    launches: u64,
    kernel_ns: u64,
    overhead_ns: u64,
    pub errors: Vec<String>,
}

fn octave(tokens: u64) -> u32 {
    64 - tokens.max(1).leading_zeros()
}

/// What one correction factor covers: an op kind at one weight shape (or width, or head
/// layout) and one token-count octave. Two tenants' QKV at one token are different
/// kernels on different weights, which a host can move in opposite directions
/// (`tiny-2t`: `tiny-2l`'s decode GEMMs at 0.6× their price while `tiny-4l`'s held at
/// 1.0×); keyed by kind alone, each corrected the other's predictions.
type CorrKey = (OpKind, u32, u64, u64);

fn corr_key(spec: &OpSpec) -> CorrKey {
    let (a, b) = match &spec.shape {
        OpShape::Gemm { n, k, .. } => (*n, *k),
        OpShape::Elementwise { width, .. } => (*width, 0),
        OpShape::Attention(a) => (
            (a.q_heads as u64) << 32 | a.kv_heads as u64,
            a.head_dim as u64 | (a.prefill.iter().any(|p| p.0 > 0) as u64) << 32,
        ),
        OpShape::Collective { ranks, .. } => (*ranks as u64, 0),
        OpShape::Transfer { .. } => (0, 0),
    };
    (spec.kind, octave(spec.tokens()), a, b)
}

impl<'b> Driver<'b> {
    /// Loads every engine instance of the (planned) scenario onto `backend`, whose
    /// devices are the scenario's GPUs in order.
    pub fn new(backend: &'b dyn Backend, scn: &Scenario, seed: u64) -> Result<Self, ExecError> {
        if backend.devices().len() < scn.cluster.len() {
            return Err(ExecError::UnknownDevice(format!(
                "the scenario has {} GPUs, the backend {} devices",
                scn.cluster.len(),
                backend.devices().len()
            )));
        }
        let mut d = Driver {
            runner: Runner::new(backend),
            inst_tenant: Vec::new(),
            groups: Vec::new(),
            home: Vec::new(),
            steps: HashMap::new(),
            corr: HashMap::new(),
            correct: true,
            records: Vec::new(),
            launches: 0,
            kernel_ns: 0,
            overhead_ns: 0,
            errors: Vec::new(),
        };
        let models: Vec<(ExecModel, HostWeights)> = (0..scn.tenants.len())
            .map(|ti| {
                let mut m = ExecModel::new(scn.tenants[ti].model.clone());
                let longest = scn
                    .requests
                    .iter()
                    .filter(|(t, _)| *t as usize == ti)
                    .map(|(_, r)| (r.prompt_tokens + r.output_tokens.max(1)) as usize)
                    .max()
                    .unwrap_or(16);
                m.numerics.max_positions = (longest + 16).next_multiple_of(256);
                let w = HostWeights::random(&m, seed ^ ti as u64);
                (m, w)
            })
            .collect();
        let loaded = load_instances(&mut d.runner, scn, &models, |h| h.kv_blocks as usize)?;
        (d.inst_tenant, d.groups, d.home) = (loaded.inst_tenant, loaded.groups, loaded.home);
        Ok(d)
    }

    fn batch(op: &ExecOp<'_>, vocab: i32) -> ExecBatch {
        // Traces carry lengths, not text: ids are synthetic, the shapes are the real ones.
        let tok = |i: usize, j: usize| ((op.serial as usize * 31 + i * 7 + j * 13) % vocab as usize) as i32;
        let mut seqs = Vec::new();
        for (i, p) in op.batch.prefills.iter().enumerate() {
            seqs.push(SeqWork {
                seq: op.serial << 20 | i as u64,
                tokens: (0..p.chunk as usize).map(|j| tok(i, j)).collect(),
                start_pos: p.prior_kv as usize,
                prefill: true,
                samples: p.samples,
            });
        }
        let n = seqs.len();
        for (i, dc) in op.batch.decodes.iter().enumerate() {
            seqs.push(SeqWork {
                seq: op.serial << 20 | (n + i) as u64,
                tokens: vec![tok(n + i, 0)],
                start_pos: dc.kv_len as usize - 1,
                prefill: false,
                samples: true,
            });
        }
        ExecBatch { seqs }
    }

    /// Runs the op: (device time, wall span, launch overhead, bytes copied).
    fn try_run(&mut self, op: &ExecOp<'_>) -> Result<(u64, u64, u64, u64), ExecError> {
        let inst = op.instance as usize;
        let t = *self.inst_tenant.get(inst).ok_or_else(|| ExecError::Placement(format!("no instance {inst}")))?;
        let group = *self.groups[inst].get(&op.group).ok_or_else(|| {
            ExecError::Placement(format!(
                "op {} placed on group {} that holds none of its weights",
                op.index, op.group.0
            ))
        })?;
        if !self.steps.contains_key(&op.serial) {
            let vocab = self.runner.tenants[t].model.vocab() as i32;
            let st = self.runner.begin(t, &Self::batch(op, vocab))?;
            self.steps.insert(op.serial, st);
        }
        let mut st = self.steps.remove(&op.serial).expect("inserted");
        // Owners' ops go on the urgent stream, guests' on the background one.
        let priority = if op.group == self.home[inst] { -1 } else { 1 };
        let r = self.runner.step(&mut st, op.index, OpPlace { group, priority });
        self.steps.insert(op.serial, st);
        let o = r?;
        self.launches += o.launches as u64;
        self.kernel_ns += o.kernel_ns;
        let wall = o.end_ns.saturating_sub(o.start_ns);
        let busy = if o.busy_ns > 0 { o.busy_ns } else { wall };
        Ok((busy, wall, o.start_ns.saturating_sub(o.submit_ns), o.copy_bytes))
    }

    /// The report's `executor` section.
    pub fn summary(&self) -> ExecSummary {
        let b = self.runner.backend;
        let devices = b
            .devices()
            .iter()
            .filter_map(|i| {
                let l = b.ledger(i.id).ok()?;
                Some(DeviceReport {
                    name: i.name.clone(),
                    memory_bytes: i.memory_bytes,
                    peak_bytes: l.peak,
                    weights_bytes: l.weights,
                    kv_bytes: l.kv_pool,
                })
            })
            .collect();
        ExecSummary {
            backend: b.kind(),
            devices,
            ops: self.records.len() as u64,
            kernel_s: self.kernel_ns as f64 / 1e9,
            launches: self.launches,
            launch_overhead_us_mean: self.overhead_ns as f64 / 1e3 / self.records.len().max(1) as f64,
            bytes_copied: b.bytes_copied(),
            correction: self.correct,
            errors: self.errors.clone(),
            collectives: self.runner.collective_report(),
        }
    }
}

impl OpExecutor for Driver<'_> {
    fn run_op(&mut self, op: &ExecOp<'_>) -> u64 {
        let spec = op.dag.op(op.index).spec;
        let model_ns = op.model_ns;
        match self.try_run(op) {
            Ok((actual, wall, overhead, copy_bytes)) => {
                let actual = actual.max(1);
                if self.correct && model_ns > 0 {
                    let key = corr_key(spec);
                    let ratio = actual as f64 / model_ns as f64;
                    let e = self.corr.entry(key).or_insert(ratio);
                    *e = (1.0 - ALPHA) * *e + ALPHA * ratio;
                }
                self.overhead_ns += overhead;
                self.records.push(ExecRecord {
                    serial: op.serial,
                    tenant: op.tenant.index() as u32,
                    kind: spec.kind,
                    layer: match op.dag.op(op.index).segment {
                        slicesched_model::Segment::Layer(l) => Some(l),
                        _ => None,
                    },
                    group: op.group.0,
                    home: op.group == self.home[op.instance as usize],
                    tokens: spec.tokens(),
                    model_ns,
                    predicted_ns: op.predicted_ns,
                    actual_ns: actual,
                    wall_ns: wall,
                    overhead_ns: overhead,
                    copy_bytes,
                });
                actual
            }
            Err(e) => {
                // The simulation goes on with the prediction; the run reports the failure.
                if self.errors.len() < 20 {
                    self.errors.push(format!("iteration {} op {} ({}): {e}", op.serial, op.index, spec.kind.name()));
                }
                op.predicted_ns
            }
        }
    }

    fn iteration_done(&mut self, serial: u64) {
        if let Some(st) = self.steps.remove(&serial) {
            self.runner.end(st, true);
        }
    }

    fn correction(&self, spec: &OpSpec) -> f64 {
        if !self.correct {
            return 1.0;
        }
        self.corr.get(&corr_key(spec)).copied().unwrap_or(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slicesched_model::{DecodeItem, IterationBatch, ModelConfig};

    fn qkv(model: &str, decodes: u32) -> OpSpec {
        let m = ModelConfig::preset(model).unwrap();
        let b = IterationBatch { prefills: vec![], decodes: (0..decodes).map(|_| DecodeItem { kv_len: 64 }).collect() };
        m.iteration_dag(&b, 1).layer.into_iter().find(|o| o.kind == OpKind::QkvProj).unwrap()
    }

    #[test]
    fn each_weight_shape_has_its_own_correction() {
        // One correction per shape and octave: 5 and 7 decodes share one, 8 starts the next.
        assert_eq!(corr_key(&qkv("tiny-2l", 5)), corr_key(&qkv("tiny-2l", 7)));
        assert_ne!(corr_key(&qkv("tiny-2l", 7)), corr_key(&qkv("tiny-2l", 8)));
        assert_ne!(corr_key(&qkv("tiny-2l", 1)), corr_key(&qkv("tiny-4l", 1)));
    }
}
