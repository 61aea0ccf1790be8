//! An iteration's i32 metadata — token ids, positions, KV slots, block tables, query
//! starts, context lengths, sampled rows — built on the host in one array, uploaded once
//! to each device that reads it.

use super::{ExecBatch, Tenant};
use crate::ExecError;
use slicesched_model::{DecodeItem, IterationBatch, PrefillItem};
use std::collections::HashMap;

/// Offsets of the per-iteration i32 metadata, uploaded once to each device that reads it.
pub(crate) struct Meta {
    pub(super) host: Vec<i32>,
    pub(super) parts: [(usize, usize); 7],
    pub(super) on: HashMap<crate::backend::DeviceId, crate::backend::View>,
}

#[derive(Clone, Copy)]
pub(crate) enum Part {
    Ids = 0,
    Positions,
    Slots,
    Tables,
    QStart,
    Ctx,
    Sampled,
}

/// The DAG's batch and the i32 metadata (ids, positions, KV slots, block tables).
pub(super) fn prepare(t: &mut Tenant, batch: &ExecBatch) -> Result<(IterationBatch, Meta), ExecError> {
    let mut ib = IterationBatch::default();
    let (mut ids, mut pos, mut slots, mut q_start, mut ctx, mut sampled) =
        (Vec::new(), Vec::new(), Vec::new(), vec![0i32], Vec::new(), Vec::new());
    let mut tables: Vec<Vec<i32>> = Vec::new();
    let max_pos = t.model.numerics.max_positions;
    for (i, s) in batch.seqs.iter().enumerate() {
        if s.tokens.is_empty() || (!s.prefill && s.tokens.len() != 1) {
            return Err(ExecError::Placement(format!(
                "sequence {}: a decode computes one token, a chunk at least one",
                s.seq
            )));
        }
        if s.prefill && i > 0 && !batch.seqs[i - 1].prefill {
            return Err(ExecError::Placement("prefill chunks must come before decodes in a batch".into()));
        }
        let end = s.start_pos + s.tokens.len();
        if end > max_pos {
            return Err(ExecError::Placement(format!(
                "sequence {}: position {end} beyond the model's {max_pos}",
                s.seq
            )));
        }
        let blocks = t.blocks_for(s.seq, s.start_pos, end)?.to_vec();
        for (j, &tok) in s.tokens.iter().enumerate() {
            let p = s.start_pos + j;
            ids.push(tok);
            pos.push(p as i32);
            slots.push(blocks[p / 16] * 16 + (p % 16) as i32);
        }
        q_start.push(ids.len() as i32);
        ctx.push(end as i32);
        tables.push(blocks);
        if s.prefill {
            ib.prefills.push(PrefillItem {
                chunk: s.tokens.len() as u32,
                prior_kv: s.start_pos as u32,
                samples: s.samples,
            });
            if s.samples {
                sampled.push(ids.len() as i32 - 1);
            }
        } else {
            ib.decodes.push(DecodeItem { kv_len: end as u32 });
            sampled.push(ids.len() as i32 - 1);
        }
    }
    if ib.is_empty() {
        return Err(ExecError::Placement("an empty batch".into()));
    }
    let max_blocks = tables.iter().map(Vec::len).max().unwrap_or(0);
    let flat: Vec<i32> =
        tables.iter().flat_map(|b| b.iter().copied().chain(std::iter::repeat(-1)).take(max_blocks)).collect();
    let mut host = Vec::new();
    let mut parts = [(0, 0); 7];
    for (i, p) in [ids, pos, slots, flat, q_start, ctx, sampled].into_iter().enumerate() {
        parts[i] = (host.len(), p.len());
        host.extend(p);
    }
    Ok((ib, Meta { host, parts, on: HashMap::new() }))
}
