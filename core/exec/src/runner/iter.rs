//! Launching one iteration: op by op in the DAG's topological order, each on the group
//! its placement names, after its inputs' events, with a copy for every input produced
//! on another device.

use super::collective::CollectiveStats;
pub(super) use super::meta::{prepare, Meta, Part};
use super::{ExecBatch, Runner, Tenant};
use crate::backend::{Arena, Backend, BufId, DeviceId, Dtype, Event, HostData, StreamId, View};
use crate::kernels::Kernel;
use crate::ExecError;
use serde::Serialize;
use slicesched_model::{IterationDag, OpKind, Segment};
use std::sync::Arc;

/// Where one op runs: a group of the tenant (0 is home) and its stream priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpPlace {
    pub group: usize,
    pub priority: i32,
}

/// What one op did, in ns since the backend's epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpTiming {
    pub index: u32,
    pub kind: OpKind,
    pub layer: Option<u32>,
    pub group: usize,
    /// When the host submitted its first launch.
    pub submit_ns: u64,
    /// Its first kernel's start and last kernel's end (input copies excluded).
    pub start_ns: u64,
    pub end_ns: u64,
    /// Kernel time summed over its launches and ranks.
    pub kernel_ns: u64,
    /// Device time of the op: its launches' busy time summed, per rank (ranks run side
    /// by side on their devices). What `run` and `profile` take as its duration.
    pub busy_ns: u64,
    /// Input copies from other devices: bytes and their summed time.
    pub copy_bytes: u64,
    pub copy_ns: u64,
    pub launches: u32,
}

pub(super) struct OpRec {
    index: u32,
    kind: OpKind,
    layer: Option<u32>,
    group: usize,
    /// Ranks the op ran on (its launches are spread evenly over them).
    ranks: usize,
    pub(super) kernels: Vec<Event>,
    copies: Vec<(Event, u64)>,
}

/// An iteration submitted to the streams and not yet collected.
pub struct Pending {
    tenant: usize,
    ops: Vec<OpRec>,
    tokens: (View, Event),
    /// The logits view with (shards, rows, shard width).
    logits: (View, usize, usize, usize),
    sampled: Vec<u64>,
    bufs: Vec<BufId>,
}

/// What an iteration produced.
#[derive(Debug, Clone, PartialEq)]
pub struct IterOutput {
    /// The greedy token of every sampling sequence, in batch order.
    pub tokens: Vec<(u64, i32)>,
    /// Their f32 logits (when asked for).
    pub logits: Option<Vec<Vec<f32>>>,
    pub ops: Vec<OpTiming>,
}

/// One rank's copy of a tensor: where it is and the event that completes it.
#[derive(Clone)]
pub(super) struct Loc {
    pub(super) view: View,
    pub(super) dtype: Dtype,
    pub(super) device: DeviceId,
    pub(super) ready: Event,
}

pub(super) struct Build<'a> {
    pub b: &'a dyn Backend,
    pub bufs: Vec<BufId>,
    pub meta: Meta,
    /// Which path each all-reduce took (the runner's counters).
    pub stats: Arc<CollectiveStats>,
}

impl Build<'_> {
    pub(super) fn alloc(&mut self, dev: DeviceId, dtype: Dtype, len: usize) -> Result<View, ExecError> {
        let id = self.b.alloc(dev, Arena::Workspace, dtype, len)?;
        self.bufs.push(id);
        Ok(View::whole(id, len))
    }
    pub(super) fn meta(&mut self, dev: DeviceId, part: Part) -> Result<View, ExecError> {
        let whole = match self.meta.on.get(&dev) {
            Some(v) => *v,
            None => {
                let v = self.alloc(dev, Dtype::I32, self.meta.host.len().max(1))?;
                let v = View { len: self.meta.host.len(), ..v };
                self.b.upload(v, &HostData::I32(self.meta.host.clone()))?;
                self.meta.on.insert(dev, v);
                v
            }
        };
        let (off, len) = self.meta.parts[part as usize];
        Ok(whole.sub(off, len))
    }
    /// `loc` readable on `dev`: itself, or a copy queued on `stream`.
    pub(super) fn on(&mut self, loc: &Loc, dev: DeviceId, stream: StreamId, rec: &mut OpRec) -> Result<Loc, ExecError> {
        if loc.device == dev {
            return Ok(loc.clone());
        }
        let dst = self.alloc(dev, loc.dtype, loc.view.len)?;
        let ev = self.b.copy(stream, loc.view, dst, std::slice::from_ref(&loc.ready))?;
        rec.copies.push((ev.clone(), loc.view.len as u64 * loc.dtype.bytes()));
        Ok(Loc { view: dst, dtype: loc.dtype, device: dev, ready: ev })
    }
}

impl Runner<'_> {
    /// Submits one iteration of `tenant`: `place(op index)` names each op's group and
    /// priority. Refuses a placement that breaks locality (weights not on the group,
    /// attention away from the KV cache) before launching anything.
    pub fn submit(
        &mut self,
        tenant: usize,
        batch: &ExecBatch,
        place: &dyn Fn(u32, OpKind, Segment) -> OpPlace,
    ) -> Result<Pending, ExecError> {
        let b = self.backend;
        let t = self.tenants.get_mut(tenant).ok_or_else(|| ExecError::Placement(format!("no tenant {tenant}")))?;
        let (ib, meta) = prepare(t, batch)?;
        let dag = t.model.config.iteration_dag(&ib, t.tp as u32);
        let places: Vec<OpPlace> = dag.ops().map(|o| place(o.index, o.spec.kind, o.segment)).collect();
        check_locality(t, &dag, &places)?;
        let mut bld = Build { b, bufs: Vec::new(), meta, stats: self.collectives.clone() };
        match launch_all(t, &dag, &places, &mut bld, ib.tokens() as usize, ib.sampled() as usize) {
            Ok((ops, tokens, logits)) => {
                let sampled = batch.seqs.iter().filter(|s| s.samples || !s.prefill).map(|s| s.seq).collect();
                Ok(Pending { tenant, ops, tokens, logits, sampled, bufs: bld.bufs })
            }
            Err(e) => {
                // Frees are stream-ordered: work already queued keeps its buffers alive.
                for id in bld.bufs {
                    let _ = b.free(id);
                }
                Err(e)
            }
        }
    }

    /// Waits for a submitted iteration and collects its tokens, logits and op times.
    pub fn wait(&mut self, p: Pending, want_logits: bool) -> Result<IterOutput, ExecError> {
        let b = self.backend;
        let mut first_err = None;
        let mut ops = Vec::with_capacity(p.ops.len());
        for r in &p.ops {
            match timing(r) {
                Ok(t) => ops.push(t),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let out = (|| {
            if let Some(e) = first_err {
                return Err(e);
            }
            let (ids, logits) = collect(b, &p.tokens, p.logits, want_logits)?;
            Ok(IterOutput { tokens: p.sampled.iter().copied().zip(ids).collect(), logits, ops })
        })();
        for id in p.bufs {
            let _ = b.free(id);
        }
        let _ = p.tenant;
        out
    }

    /// Submits and waits.
    pub fn run(
        &mut self,
        tenant: usize,
        batch: &ExecBatch,
        place: &dyn Fn(u32, OpKind, Segment) -> OpPlace,
        want_logits: bool,
    ) -> Result<IterOutput, ExecError> {
        let p = self.submit(tenant, batch, place)?;
        self.wait(p, want_logits)
    }
}

/// Sampled rows' f32 logits, one vector per row.
pub(super) type Logits = Vec<Vec<f32>>;

/// Waits for the sampled ids and downloads them, with the logits (row-major, shards
/// concatenated) when asked.
pub(super) fn collect(
    b: &dyn Backend,
    tokens: &(View, Event),
    (v, shards, rows, n): (View, usize, usize, usize),
    want_logits: bool,
) -> Result<(Vec<i32>, Option<Logits>), ExecError> {
    tokens.1.wait()?;
    let HostData::I32(ids) = b.download(tokens.0)? else { unreachable!("tokens are i32") };
    let logits = if want_logits {
        let HostData::F32(l) = b.download(v)? else { unreachable!("logits are f32") };
        Some(
            (0..rows)
                .map(|r| (0..shards).flat_map(|s| l[(s * rows + r) * n..(s * rows + r + 1) * n].to_vec()).collect())
                .collect(),
        )
    } else {
        None
    };
    Ok((ids, logits))
}

/// Waits for an op's launches and sums them up.
pub(super) fn timing(r: &OpRec) -> Result<OpTiming, ExecError> {
    let mut t = OpTiming {
        index: r.index,
        kind: r.kind,
        layer: r.layer,
        group: r.group,
        submit_ns: u64::MAX,
        start_ns: u64::MAX,
        end_ns: 0,
        kernel_ns: 0,
        busy_ns: 0,
        copy_bytes: 0,
        copy_ns: 0,
        launches: r.kernels.len() as u32,
    };
    let mut err = None;
    for e in &r.kernels {
        match e.wait() {
            Ok(k) => {
                t.submit_ns = t.submit_ns.min(k.submit_ns);
                t.start_ns = t.start_ns.min(k.start_ns);
                t.end_ns = t.end_ns.max(k.end_ns);
                t.kernel_ns += k.duration_ns();
                t.busy_ns += k.busy_ns;
            }
            Err(e) => {
                err.get_or_insert(e);
            }
        }
    }
    for (e, bytes) in &r.copies {
        if let Ok(k) = e.wait() {
            t.copy_ns += k.duration_ns();
            t.copy_bytes += bytes;
        }
    }
    t.busy_ns /= r.ranks.max(1) as u64;
    err.map_or(Ok(t), Err)
}

fn layer_of(seg: Segment) -> Option<usize> {
    match seg {
        Segment::Layer(l) => Some(l as usize),
        _ => None,
    }
}

fn check_locality(t: &Tenant, dag: &IterationDag, places: &[OpPlace]) -> Result<(), ExecError> {
    for op in dag.ops() {
        check_op(t, &op, places[op.index as usize])?;
    }
    Ok(())
}

fn check_op(t: &Tenant, op: &slicesched_model::OpRef, p: OpPlace) -> Result<(), ExecError> {
    {
        let g = t
            .groups
            .get(p.group)
            .ok_or_else(|| ExecError::Placement(format!("op {}: no group {}", op.index, p.group)))?;
        let k = op.spec.kind;
        let ok = match k {
            OpKind::Embedding => g.range.head,
            OpKind::FinalNorm | OpKind::LmHead => g.range.tail,
            OpKind::Attention => p.group == 0,
            OpKind::InputNorm
            | OpKind::QkvProj
            | OpKind::OProj
            | OpKind::PostAttnNorm
            | OpKind::GateUpProj
            | OpKind::DownProj
            | OpKind::Router
            | OpKind::ExpertUp
            | OpKind::ExpertDown => layer_of(op.segment).is_some_and(|l| g.range.has_layer(l)),
            // Qwen3's RoPE op norms the heads first, with the layer's weights.
            OpKind::Rope if t.model.config.qk_norm => layer_of(op.segment).is_some_and(|l| g.range.has_layer(l)),
            _ => true,
        };
        if !ok {
            let why = if k == OpKind::Attention {
                "attention runs where its KV cache is (group 0)"
            } else {
                "its weights are not on that group"
            };
            return Err(ExecError::Placement(format!(
                "op {} ({}, {:?}) on group {}: {why}",
                op.index,
                k.name(),
                op.segment,
                p.group
            )));
        }
    }
    Ok(())
}

type Launched = (Vec<OpRec>, (View, Event), (View, usize, usize, usize));

fn launch_all(
    t: &Tenant,
    dag: &IterationDag,
    places: &[OpPlace],
    bld: &mut Build,
    tokens: usize,
    sampled: usize,
) -> Result<Launched, ExecError> {
    let mut acts: Vec<Option<Vec<Loc>>> = vec![None; dag.len() as usize];
    let mut recs = Vec::with_capacity(dag.len() as usize);
    let mut result = None;
    for i in 0..dag.len() {
        recs.push(launch_one(t, dag, i, places[i as usize], &mut acts, bld, (tokens, sampled), &mut result)?);
    }
    let (tok, logits) = result.ok_or_else(|| ExecError::Launch("the DAG has no LM head".into()))?;
    Ok((recs, tok, logits))
}

pub(super) type Sampling = Option<((View, Event), (View, usize, usize, usize))>;

/// Launches op `i` (its producers launched before) on `p`'s group.
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)] // ranks index the group and every input alike
pub(super) fn launch_one(
    t: &Tenant,
    dag: &IterationDag,
    i: u32,
    p: OpPlace,
    acts: &mut [Option<Vec<Loc>>],
    bld: &mut Build,
    (tokens, sampled): (usize, usize),
    result: &mut Sampling,
) -> Result<OpRec, ExecError> {
    let b = bld.b;
    let (h, tp) = (t.model.hidden(), t.tp);
    let eps = t.model.numerics.rms_norm_eps as f32;
    {
        let op = dag.op(i);
        check_op(t, &op, p)?;
        let g = &t.groups[p.group];
        let layer = layer_of(op.segment);
        let mut rec = OpRec {
            index: op.index,
            kind: op.spec.kind,
            layer: layer.map(|l| l as u32),
            group: p.group,
            // The LM head's all-gather samples on rank 0 alone.
            ranks: if op.spec.kind == OpKind::AllGather && layer.is_none() { 1 } else { tp },
            kernels: vec![],
            copies: vec![],
        };
        let preds = dag.preds(op.index);
        let mut outs = Vec::with_capacity(tp);
        let kind = op.spec.kind;
        let is = |q: &u32, k: OpKind| dag.op(*q).spec.kind == k;
        if kind == OpKind::AllToAll && preds.iter().any(|q| is(q, OpKind::Router)) {
            // Expert parallelism's dispatch: the MLP input (the routing every rank has).
            let input = preds.iter().find(|q| !is(q, OpKind::Router)).copied().unwrap_or(preds[0]);
            outs = super::ep::dispatch(g, p.priority, act(acts, input)?, tokens, bld, &mut rec)?;
        } else if kind.is_collective() {
            let src = if preds.len() > 1 {
                // Expert units' partial sums: added on each rank, then reduced once.
                super::collective::local_sum(&preds, acts, g, p.priority, bld, &mut rec)?
            } else {
                act(acts, preds[0])?.clone()
            };
            outs = match kind {
                OpKind::AllToAll => super::ep::combine(g, p.priority, &src, tokens, bld, &mut rec)?,
                // Inside a layer: expert parallelism's residual, whole again.
                OpKind::AllGather if layer.is_some() => super::ep::gather(g, p.priority, &src, tokens, bld, &mut rec)?,
                _ => super::collective::launch(kind, g, p.priority, &src, bld, &mut rec, sampled, result)?,
            };
        } else {
            // An expert op's unit and (for the down GEMMs, and the up ones under expert
            // parallelism, whose input is the dispatch) its layer's router, once per op.
            let unit = unit_of(dag, op.index);
            // Attention reads its q, k, v from the rotated copy where a RoPE op made one
            // (ALiBi has none); the raw qkv edge is then only an ordering.
            let rotated = preds.iter().any(|&q| dag.op(q).spec.kind == OpKind::Rope);
            let routed_apart = kind == OpKind::ExpertUp && !preds.iter().any(|q| is(q, OpKind::Router));
            let router =
                if kind == OpKind::ExpertDown || routed_apart { Some(router_of(dag, op.index)?) } else { None };
            for r in 0..tp {
                let rank = &g.ranks[r];
                let dev = rank.device;
                let s = b.stream(dev, p.priority)?;
                let heads = t.heads(r);
                let mut ins = Vec::new();
                let mut waits = Vec::new();
                for &q in &preds {
                    let src = &act(acts, q)?[r];
                    if kind == OpKind::Attention && rotated && dag.op(q).spec.kind == OpKind::QkvProj {
                        waits.push(src.ready.clone());
                        continue;
                    }
                    let l = bld.on(src, dev, s, &mut rec)?;
                    waits.push(l.ready.clone());
                    ins.push(l);
                }
                if let Some(router) = router {
                    // Its routing: the layer's router output, which the DAG does not draw
                    // as an edge (the unit's tokens reach it through the activation).
                    let l = bld.on(&act(acts, router)?[r], dev, s, &mut rec)?;
                    waits.push(l.ready.clone());
                    ins.push(l);
                }
                let (out, ev) = super::ops::launch_op(
                    t,
                    r,
                    rank,
                    kind,
                    layer,
                    &ins,
                    &waits,
                    s,
                    bld,
                    &mut rec,
                    (tokens, sampled, h, eps, heads),
                    unit,
                )?;
                if kind == OpKind::LmHead && tp == 1 {
                    let ids = bld.alloc(dev, Dtype::I32, sampled)?;
                    let n = rank.shard.vocab.len();
                    let aev = b.launch(
                        s,
                        Kernel::Argmax { logits: out, out: ids, rows: sampled, shards: 1, shard_n: n },
                        std::slice::from_ref(&ev),
                    )?;
                    rec.kernels.push(aev.clone());
                    *result = Some(((ids, aev), (out, 1, sampled, n)));
                }
                let dtype = if matches!(kind, OpKind::LmHead | OpKind::Router) { Dtype::F32 } else { Dtype::Bf16 };
                outs.push(Loc { view: out, dtype, device: dev, ready: ev });
            }
        }
        acts[i as usize] = Some(outs);
        Ok(rec)
    }
}

/// Which of the layer's expert units op `i` belongs to, of how many; for a
/// post-attention norm, which of the layer's (sandwich norms have three); `(0, 1)` for
/// others.
fn unit_of(dag: &IterationDag, i: u32) -> (usize, usize) {
    let kind = dag.op(i).spec.kind;
    if !matches!(kind, OpKind::ExpertUp | OpKind::ExpertDown | OpKind::PostAttnNorm) {
        return (0, 1);
    }
    let pos = ((i - dag.head.len() as u32) % dag.layer.len() as u32) as usize;
    let of = |ops: &[slicesched_model::OpSpec]| ops.iter().filter(|o| o.kind == kind).count();
    (of(&dag.layer[..pos]), of(&dag.layer))
}

/// The router op of op `i`'s layer.
fn router_of(dag: &IterationDag, i: u32) -> Result<u32, ExecError> {
    let (h, n) = (dag.head.len() as u32, dag.layer.len() as u32);
    let start = h + (i - h) / n * n;
    let pos = dag.layer.iter().position(|o| o.kind == OpKind::Router);
    pos.map(|p| start + p as u32).ok_or_else(|| ExecError::Launch("an expert op in a layer without a router".into()))
}

pub(super) fn act(acts: &[Option<Vec<Loc>>], i: u32) -> Result<&Vec<Loc>, ExecError> {
    acts.get(i as usize)
        .and_then(|a| a.as_ref())
        .ok_or_else(|| ExecError::Placement(format!("op {i}'s output is needed before the op ran")))
}
