//! The iteration runner: a tenant's weight copies and KV cache on devices, and the
//! launch of one iteration's operator DAG (the simulator's, op for op) under a placement.

mod collective;
mod ep;
mod iter;
mod load;
mod meta;
mod ops;
mod step;

pub use collective::{CollectiveReport, CollectiveStats};
pub use iter::{IterOutput, OpPlace, OpTiming, Pending};
pub use load::{shard, LayerRange, Shard};
pub use step::{SampledOutput, Stepper};

use crate::backend::{Arena, Backend, BufId, DeviceId, Dtype, View};
use crate::kernels::{Heads, BLOCK_TOKENS};
use crate::model::{ExecModel, HostWeights};
use crate::ExecError;
use load::{load_rank, RankWeights};
use std::collections::HashMap;

/// A tensor-parallel set of devices holding one copy of (part of) a tenant's weights.
#[derive(Debug, Clone)]
pub struct Group {
    pub range: LayerRange,
    pub(crate) ranks: Vec<RankWeights>,
}

impl Group {
    pub fn devices(&self) -> Vec<DeviceId> {
        self.ranks.iter().map(|r| r.device).collect()
    }
}

/// One sequence's work in an iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct SeqWork {
    /// The caller's id of the sequence (its KV blocks are kept under it).
    pub seq: u64,
    /// Token ids this iteration computes: a prompt chunk, or the last sampled token.
    pub tokens: Vec<i32>,
    /// Tokens of the sequence already in the KV cache.
    pub start_pos: usize,
    /// A prefill chunk (else a decode step of one token).
    pub prefill: bool,
    /// Whether a token is sampled from its last position (decodes always sample).
    pub samples: bool,
}

/// One iteration's batch: prefill chunks first, then decodes (the DAG's token order).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExecBatch {
    pub seqs: Vec<SeqWork>,
}

pub(crate) struct KvRank {
    pub device: DeviceId,
    /// One cache per layer, `[2][blocks·16][KVH·D]`.
    pub caches: Vec<View>,
}

/// A tenant loaded on the executor.
pub struct Tenant {
    pub model: ExecModel,
    pub tp: usize,
    /// Group 0 is the home (every layer, the KV cache); the others are copies.
    pub groups: Vec<Group>,
    pub(crate) kv: Vec<KvRank>,
    pub kv_blocks: usize,
    free_blocks: Vec<i32>,
    seq_blocks: HashMap<u64, SeqKv>,
}

/// A sequence's KV blocks: `table[b]` is the block holding its positions `16b..16b+16`.
/// Under a sliding window a block no query can see again is recycled for a new position
/// (`slicesched_model::kv::live_blocks`, the rule the engine books by), so the entries
/// before `first_held` name blocks that now hold later positions; they stay in the table
/// because the attention kernel resolves every position's slot, and it reads none of them.
#[derive(Debug, Default)]
pub(crate) struct SeqKv {
    table: Vec<i32>,
    first_held: usize,
}

impl SeqKv {
    /// The blocks the sequence holds, each once.
    fn held(&self) -> &[i32] {
        &self.table[self.first_held..]
    }
}

impl Tenant {
    pub(crate) fn heads(&self, rank: usize) -> Heads {
        let s = &self.groups[0].ranks[rank].shard;
        Heads { q: s.q_heads.len(), kv: s.kv_heads.len(), dim: self.model.head_dim() }
    }
    pub fn free_kv_blocks(&self) -> usize {
        self.free_blocks.len()
    }
}

/// The executor's state over a backend: tenants, their copies and KV caches.
pub struct Runner<'b> {
    pub backend: &'b dyn Backend,
    pub tenants: Vec<Tenant>,
    /// Which path the all-reduces took (library or copies + Sum).
    pub collectives: std::sync::Arc<CollectiveStats>,
}

impl<'b> Runner<'b> {
    pub fn new(backend: &'b dyn Backend) -> Self {
        Self { backend, tenants: Vec::new(), collectives: Default::default() }
    }

    /// The all-reduce paths taken so far, with the backend's account of why.
    pub fn collective_report(&self) -> CollectiveReport {
        self.collectives.report(self.backend.collectives())
    }

    /// Loads a tenant at home on `devices` (its tensor-parallel group) with a KV cache of
    /// `kv_blocks` 16-token blocks per layer. Returns the tenant's index.
    pub fn load_tenant(
        &mut self,
        model: ExecModel,
        weights: &HostWeights,
        devices: &[DeviceId],
        kv_blocks: usize,
    ) -> Result<usize, ExecError> {
        let tp = devices.len();
        if tp == 0 {
            return Err(ExecError::Placement("a tenant needs at least one device".into()));
        }
        let home = self.load_group(&model, weights, devices, LayerRange::all(model.layers()))?;
        let mut kv = Vec::new();
        for (r, rank) in home.ranks.iter().enumerate() {
            let kvw = load::shard(&model, tp, r)?.kv_heads.len() * model.head_dim();
            let len = 2 * kv_blocks * BLOCK_TOKENS * kvw;
            let mut caches = Vec::new();
            for _ in 0..model.layers() {
                match self.backend.alloc(rank.device, Arena::KvBlocks, Dtype::Bf16, len) {
                    Ok(id) => caches.push(View::whole(id, len)),
                    Err(e) => {
                        self.free_group(&home);
                        for c in kv.iter().flat_map(|k: &KvRank| &k.caches).chain(&caches) {
                            let _ = self.backend.free(c.buf);
                        }
                        return Err(e);
                    }
                }
            }
            kv.push(KvRank { device: rank.device, caches });
        }
        self.tenants.push(Tenant {
            model,
            tp,
            groups: vec![home],
            kv,
            kv_blocks,
            free_blocks: (0..kv_blocks as i32).rev().collect(),
            seq_blocks: HashMap::new(),
        });
        Ok(self.tenants.len() - 1)
    }

    /// Adds a copy of `range` of the tenant's weights on `devices`; returns its group.
    pub fn add_copy(
        &mut self,
        tenant: usize,
        weights: &HostWeights,
        devices: &[DeviceId],
        range: LayerRange,
    ) -> Result<usize, ExecError> {
        let t = self.tenants.get(tenant).ok_or_else(|| ExecError::Placement(format!("no tenant {tenant}")))?;
        if devices.len() != t.tp {
            return Err(ExecError::Placement(format!(
                "a copy needs {} devices (the tenant's tensor-parallel degree), got {}",
                t.tp,
                devices.len()
            )));
        }
        if range.end > t.model.layers() || range.start > range.end {
            return Err(ExecError::Placement(format!("layers {}..{} outside the model", range.start, range.end)));
        }
        let model = t.model.clone();
        let g = self.load_group(&model, weights, devices, range)?;
        let t = &mut self.tenants[tenant];
        t.groups.push(g);
        Ok(t.groups.len() - 1)
    }

    /// Lets `tenant` run ops on group `group` of tenant `from` (another engine instance
    /// of the same model and weights, e.g. a serving copy): the weights are shared, not
    /// loaded again, and stay owned (and freed) by `from`. Returns the new group index.
    pub fn share_group(&mut self, tenant: usize, from: usize, group: usize) -> Result<usize, ExecError> {
        let (Some(t), Some(f)) = (self.tenants.get(tenant), self.tenants.get(from)) else {
            return Err(ExecError::Placement(format!("no tenant {tenant} or {from}")));
        };
        if t.model.config != f.model.config || t.tp != f.tp {
            return Err(ExecError::Placement(format!(
                "tenants {tenant} and {from} run different models or tensor-parallel degrees: no weights to share"
            )));
        }
        let g =
            f.groups.get(group).ok_or_else(|| ExecError::Placement(format!("tenant {from} has no group {group}")))?;
        let mut alias = Group { range: g.range, ranks: g.ranks.clone() };
        for r in &mut alias.ranks {
            // Not ours to free.
            r.bufs.clear();
        }
        let t = &mut self.tenants[tenant];
        t.groups.push(alias);
        Ok(t.groups.len() - 1)
    }

    fn load_group(
        &self,
        model: &ExecModel,
        w: &HostWeights,
        devices: &[DeviceId],
        range: LayerRange,
    ) -> Result<Group, ExecError> {
        let mut ranks = Vec::new();
        for (r, &d) in devices.iter().enumerate() {
            match load_rank(self.backend, model, w, devices.len(), r, d, range) {
                Ok(rw) => ranks.push(rw),
                Err(e) => {
                    self.free_group(&Group { range, ranks });
                    return Err(e);
                }
            }
        }
        Ok(Group { range, ranks })
    }

    fn free_group(&self, g: &Group) {
        for id in g.ranks.iter().flat_map(|r| &r.bufs) {
            let _ = self.backend.free(*id);
        }
    }

    /// Returns a finished sequence's KV blocks.
    pub fn release(&mut self, tenant: usize, seq: u64) {
        if let Some(t) = self.tenants.get_mut(tenant) {
            if let Some(b) = t.seq_blocks.remove(&seq) {
                t.free_blocks.extend(b.held().iter().rev());
            }
        }
    }

    /// Unloads every tenant, freeing their memory.
    pub fn clear(&mut self) {
        for t in std::mem::take(&mut self.tenants) {
            for g in &t.groups {
                self.free_group(g);
            }
            for c in t.kv.iter().flat_map(|k| &k.caches) {
                let _ = self.backend.free(c.buf);
            }
        }
    }

    /// Buffers a tenant holds (for tests of the ledger).
    pub fn tenant_buffers(&self, tenant: usize) -> Vec<BufId> {
        let t = &self.tenants[tenant];
        t.groups.iter().flat_map(|g| g.ranks.iter().flat_map(|r| r.bufs.iter().copied())).collect()
    }
}

impl Drop for Runner<'_> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl Tenant {
    /// Makes sure `seq` has blocks for a step computing its positions `start..end`;
    /// returns its block table. Under a sliding window, blocks whose positions the step's
    /// first query can no longer see are recycled before any comes from the free list.
    pub(crate) fn blocks_for(&mut self, seq: u64, start: usize, end: usize) -> Result<&[i32], ExecError> {
        // Only a window on every layer frees positions: a global layer reads them all.
        let window = self.model.config.kv_window().map_or(0, |w| w as usize);
        let first_live = if window > 0 { (start + 1).saturating_sub(window) / BLOCK_TOKENS } else { 0 };
        let kv = self.seq_blocks.entry(seq).or_default();
        let new = end.div_ceil(BLOCK_TOKENS).saturating_sub(kv.table.len());
        let recyclable = first_live.min(kv.table.len()).saturating_sub(kv.first_held).min(new);
        if new - recyclable > self.free_blocks.len() {
            return Err(ExecError::Placement(format!(
                "sequence {seq} needs {} more KV blocks, {} free",
                new - recyclable,
                self.free_blocks.len()
            )));
        }
        for k in 0..new {
            let block = if k < recyclable {
                kv.first_held += 1;
                kv.table[kv.first_held - 1]
            } else {
                self.free_blocks.pop().expect("checked")
            };
            kv.table.push(block);
        }
        Ok(&kv.table)
    }
}
