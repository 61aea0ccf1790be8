//! Expert parallelism's collectives (`slicesched_model::moe`): each rank of the group
//! holds a contiguous share of the experts whole, and rank `q` owns the rows `share(q)`
//! of the batch's tokens.
//! - dispatch (the first all-to-all): every rank's share of the MLP input goes to every
//!   rank, whose expert kernels take the rows routed to its experts. A real all-to-all
//!   sends only those rows; picking them needs the routing on the host (a sync per
//!   layer) or a compaction kernel, so the whole share travels.
//! - combine (the second): rank `q` sums, in rank order, every rank's partial outputs
//!   for its rows — one order whatever ran where, so the bits do not move.
//! - all-gather: every rank concatenates the shares, and the residual stream is whole
//!   and identical on every rank again.
//!
//! Copies queued on one stream complete in order, so an output's last copy stands for
//! all of them.

use super::iter::{Build, Loc, OpRec};
use super::Group;
use crate::backend::{Dtype, Event, View};
use crate::kernels::Kernel;
use crate::ExecError;
use std::ops::Range;

/// The token rows rank `q` of `tp` owns.
fn share(rows: usize, tp: usize, q: usize) -> Range<usize> {
    q * rows / tp..(q + 1) * rows / tp
}

/// Elements per row, when `len` elements are `rows` rows.
fn width(len: usize, rows: usize) -> Result<usize, ExecError> {
    if rows == 0 || !len.is_multiple_of(rows) {
        return Err(ExecError::Launch(format!("{len} elements are not {rows} rows")));
    }
    Ok(len / rows)
}

/// Every rank's `[rows][w]`: rank `q`'s share of the rows from its `src`, at `own(q)`.
fn assemble(
    g: &Group,
    priority: i32,
    src: &[Loc],
    (rows, w): (usize, usize),
    own: impl Fn(usize) -> Range<usize>,
    bld: &mut Build,
    rec: &mut OpRec,
) -> Result<Vec<Loc>, ExecError> {
    let b = bld.b;
    let tp = src.len();
    let mut outs = Vec::with_capacity(g.ranks.len());
    for rank in &g.ranks {
        let dev = rank.device;
        let s = b.stream(dev, priority)?;
        let out = bld.alloc(dev, Dtype::Bf16, rows * w)?;
        let mut last: Option<Event> = None;
        for (q, part) in src.iter().enumerate() {
            let sh = share(rows, tp, q);
            if sh.is_empty() {
                continue;
            }
            let from = own(q);
            let ev = b.copy(
                s,
                part.view.sub(from.start * w, sh.len() * w),
                out.sub(sh.start * w, sh.len() * w),
                std::slice::from_ref(&part.ready),
            )?;
            rec.kernels.push(ev.clone());
            last = Some(ev);
        }
        let ready = last.ok_or_else(|| ExecError::Launch("a collective over no rows".into()))?;
        outs.push(Loc { view: out, dtype: Dtype::Bf16, device: dev, ready });
    }
    Ok(outs)
}

/// The dispatch: each rank's `[rows][w]` input, assembled from the ranks owning them.
pub(super) fn dispatch(
    g: &Group,
    priority: i32,
    src: &[Loc],
    rows: usize,
    bld: &mut Build,
    rec: &mut OpRec,
) -> Result<Vec<Loc>, ExecError> {
    let (tp, w) = (src.len(), width(src.first().map_or(0, |l| l.view.len), rows)?);
    assemble(g, priority, src, (rows, w), |q| share(rows, tp, q), bld, rec)
}

/// The residual's all-gather: rank `q`'s `src` holds its share's rows alone.
pub(super) fn gather(
    g: &Group,
    priority: i32,
    src: &[Loc],
    rows: usize,
    bld: &mut Build,
    rec: &mut OpRec,
) -> Result<Vec<Loc>, ExecError> {
    let (tp, w) = (src.len(), width(src.iter().map(|l| l.view.len).sum(), rows)?);
    assemble(g, priority, src, (rows, w), |q| 0..share(rows, tp, q).len(), bld, rec)
}

/// The combine: rank `q`'s rows of every rank's `[rows][w]` partial sums, added in rank
/// order; each rank's output holds its share's rows alone.
pub(super) fn combine(
    g: &Group,
    priority: i32,
    src: &[Loc],
    rows: usize,
    bld: &mut Build,
    rec: &mut OpRec,
) -> Result<Vec<Loc>, ExecError> {
    let b = bld.b;
    let tp = src.len();
    let w = width(src.first().map_or(0, |l| l.view.len), rows)?;
    let mut outs = Vec::with_capacity(tp);
    for (q, rank) in g.ranks.iter().enumerate() {
        let dev = rank.device;
        let s = b.stream(dev, priority)?;
        let sh = share(rows, tp, q);
        let len = sh.len() * w;
        let mut parts: Vec<View> = Vec::with_capacity(tp);
        let mut waits: Vec<Event> = Vec::with_capacity(tp);
        for part in src {
            let from = part.view.sub(sh.start * w, len);
            if part.device == dev {
                parts.push(from);
                waits.push(part.ready.clone());
            } else {
                let to = bld.alloc(dev, Dtype::Bf16, len.max(1))?.sub(0, len);
                let ev = b.copy(s, from, to, std::slice::from_ref(&part.ready))?;
                rec.kernels.push(ev.clone());
                parts.push(to);
                waits.push(ev);
            }
        }
        let out = bld.alloc(dev, Dtype::Bf16, len.max(1))?.sub(0, len);
        let ev = b.launch(s, Kernel::Sum { parts, out }, &waits)?;
        rec.kernels.push(ev.clone());
        outs.push(Loc { view: out, dtype: Dtype::Bf16, device: dev, ready: ev });
    }
    Ok(outs)
}
