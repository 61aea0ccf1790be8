//! Tensor-parallel collectives of one iteration. An all-reduce goes to the backend's
//! collective library when it offers one for the group (NCCL on CUDA), else every rank
//! gathers every rank's part (copies) and sums them in rank order, so all ranks end
//! with identical bits; the LM head's all-gather always takes the copies. Which path
//! ran is counted for the executor's report. A collective fed by several ops (expert
//! units' partial sums) adds them on each rank first (`local_sum`).

use super::iter::{Build, Loc, OpRec, Sampling};
use super::Group;
use crate::backend::{Dtype, Event, ReduceRank};
use crate::kernels::Kernel;
use crate::ExecError;
use serde::Serialize;
use slicesched_model::OpKind;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many all-reduces took each path (shared by a runner's iterations).
#[derive(Debug, Default)]
pub struct CollectiveStats {
    pub backend: AtomicU64,
    pub copies: AtomicU64,
}

/// What the executor's report says about collectives.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CollectiveReport {
    /// All-reduces run by the backend's library (NCCL).
    pub library_all_reduces: u64,
    /// All-reduces run as copies + a rank-order Sum kernel per rank.
    pub copy_sum_all_reduces: u64,
    /// The backend's own account of its path and why (e.g. why NCCL is not used).
    pub backend: String,
}

impl CollectiveStats {
    pub fn report(&self, backend: String) -> CollectiveReport {
        CollectiveReport {
            library_all_reduces: self.backend.load(Ordering::Relaxed),
            copy_sum_all_reduces: self.copies.load(Ordering::Relaxed),
            backend,
        }
    }
}

/// Launches a collective op (all-reduce or the LM head's all-gather + argmax) of `g`;
/// returns each target rank's output.
#[allow(clippy::too_many_arguments)] // the op's place, its inputs and the iteration's state
pub(super) fn launch(
    kind: OpKind,
    g: &Group,
    priority: i32,
    src: &[Loc],
    bld: &mut Build,
    rec: &mut OpRec,
    sampled: usize,
    result: &mut Sampling,
) -> Result<Vec<Loc>, ExecError> {
    let b = bld.b;
    let tp = src.len();
    if kind == OpKind::AllReduce {
        if let Some(outs) = library_all_reduce(g, priority, src, bld, rec)? {
            bld.stats.backend.fetch_add(1, Ordering::Relaxed);
            return Ok(outs);
        }
        bld.stats.copies.fetch_add(1, Ordering::Relaxed);
    }
    let targets: Vec<usize> = if kind == OpKind::AllGather { vec![0] } else { (0..tp).collect() };
    let mut outs = Vec::with_capacity(targets.len());
    for r in targets {
        let dev = g.ranks[r].device;
        let s = b.stream(dev, priority)?;
        let parts = (0..tp).map(|q| bld.on(&src[q], dev, s, rec)).collect::<Result<Vec<_>, _>>()?;
        let waits: Vec<Event> = parts.iter().map(|l| l.ready.clone()).collect();
        if kind == OpKind::AllReduce {
            let out = bld.alloc(dev, Dtype::Bf16, src[0].view.len)?;
            let ev = b.launch(s, Kernel::Sum { parts: parts.iter().map(|l| l.view).collect(), out }, &waits)?;
            rec.kernels.push(ev.clone());
            outs.push(Loc { view: out, dtype: Dtype::Bf16, device: dev, ready: ev });
        } else {
            let n = src[0].view.len;
            let out = bld.alloc(dev, Dtype::F32, n * tp)?;
            let mut evs = Vec::new();
            for (q, l) in parts.iter().enumerate() {
                let ev = b.copy(s, l.view, out.sub(q * n, n), &waits)?;
                rec.kernels.push(ev.clone());
                evs.push(ev);
            }
            let ids = bld.alloc(dev, Dtype::I32, sampled)?;
            let shard_n = n / sampled.max(1);
            let ev = b.launch(s, Kernel::Argmax { logits: out, out: ids, rows: sampled, shards: tp, shard_n }, &evs)?;
            rec.kernels.push(ev.clone());
            *result = Some(((ids, ev.clone()), (out, tp, sampled, shard_n)));
            outs.push(Loc { view: out, dtype: Dtype::F32, device: dev, ready: ev });
        }
    }
    Ok(outs)
}

/// The all-reduce through the backend's library, or `None` when it declines (before
/// anything was queued: the parts each rank already holds are not copied).
fn library_all_reduce(
    g: &Group,
    priority: i32,
    src: &[Loc],
    bld: &mut Build,
    rec: &mut OpRec,
) -> Result<Option<Vec<Loc>>, ExecError> {
    let b = bld.b;
    let mut ranks = Vec::with_capacity(src.len());
    let mut outs = Vec::with_capacity(src.len());
    for (r, part) in src.iter().enumerate() {
        let dev = g.ranks[r].device;
        let stream = b.stream(dev, priority)?;
        // A part produced elsewhere (a copy group's rank) is brought to its rank first.
        let part = bld.on(part, dev, stream, rec)?;
        let dst = bld.alloc(dev, Dtype::Bf16, part.view.len)?;
        outs.push(dst);
        ranks.push(ReduceRank { stream, src: part.view, dst, waits: vec![part.ready.clone()] });
    }
    let Some(events) = b.all_reduce(&ranks)? else { return Ok(None) };
    if events.len() != ranks.len() {
        return Err(ExecError::Launch(format!("all-reduce of {} ranks returned {} events", ranks.len(), events.len())));
    }
    rec.kernels.extend(events.iter().cloned());
    Ok(Some(
        outs.into_iter()
            .zip(&ranks)
            .zip(events)
            .map(|((view, r), ready)| Loc { view, dtype: Dtype::Bf16, device: r.stream.device, ready })
            .collect(),
    ))
}

/// Every rank's sum of `preds`' outputs (in pred order), on the rank's device.
pub(super) fn local_sum(
    preds: &[u32],
    acts: &[Option<Vec<Loc>>],
    g: &super::Group,
    priority: i32,
    bld: &mut Build,
    rec: &mut OpRec,
) -> Result<Vec<Loc>, ExecError> {
    let b = bld.b;
    let mut out = Vec::with_capacity(g.ranks.len());
    for (r, rank) in g.ranks.iter().enumerate() {
        let dev = rank.device;
        let s = b.stream(dev, priority)?;
        let mut parts = Vec::with_capacity(preds.len());
        for &q in preds {
            parts.push(bld.on(&super::iter::act(acts, q)?[r], dev, s, rec)?);
        }
        let len = parts[0].view.len;
        let sum = bld.alloc(dev, Dtype::Bf16, len)?;
        let waits: Vec<Event> = parts.iter().map(|l| l.ready.clone()).collect();
        let ev = b.launch(s, Kernel::Sum { parts: parts.iter().map(|l| l.view).collect(), out: sum }, &waits)?;
        rec.kernels.push(ev.clone());
        out.push(Loc { view: sum, dtype: Dtype::Bf16, device: dev, ready: ev });
    }
    Ok(out)
}
