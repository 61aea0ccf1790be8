//! KV caches shared by the engine instances on one GPU.
//!
//! When a tenant's home and other tenants' serving copies run in one serving process
//! per GPU (`pooled`'s MuxServe-style unified KV cache, `slice`), their paged KV caches
//! draw blocks from one pool: a bursting tenant's copy grows into the KV an idle home is
//! not using, and gives it back as its requests finish. A home keeps a reserve
//! no copy may take: its tenant's explicit `keep_kv_tokens`, else the KV its load holds at
//! its peak (the planner's `load.rs`). Policies that model one process per container
//! (time-slicing's context switches, MPS lanes) keep the planner's static split.

use crate::replay::Sim;

/// The shared pool of one GPU.
#[derive(Debug, Clone, Default)]
pub(crate) struct GpuPool {
    /// KV bytes of all serving instances on the GPU.
    pub cap: u64,
    /// Bytes their requests hold now.
    pub used: u64,
    /// Instances drawing on this pool.
    pub residents: Vec<u32>,
}

/// An instance's part in the pools of its GPUs.
#[derive(Debug, Clone, Default)]
pub(crate) struct KvShare {
    /// Bytes per KV block on each GPU of its group.
    pub block_bytes: u64,
    /// Bytes no other instance may take from it.
    pub reserve: u64,
    /// Blocks held as last synced into the pools.
    pub held: u32,
}

impl Sim<'_> {
    /// Sets up the pools where instances share a GPU and the policy runs them in one
    /// process; everywhere else each engine keeps its static cache.
    pub(crate) fn init_kv_pools(&mut self) {
        if self.policy.spatial_sharing() || self.policy.context_switch_ns() > 0 {
            return;
        }
        let n = self.scn.cluster.len();
        let mut pools = vec![GpuPool::default(); n];
        for (i, rt) in self.insts.iter().enumerate() {
            let t = &self.scn.tenants[rt.tenant.index()];
            let block_bytes = t.model.kv_bytes_per_token(t.gpus.len() as u32) * t.engine.block_size as u64;
            let bytes = rt.engine.kv_blocks_total() as u64 * block_bytes;
            for g in &self.scn.deployment.group(rt.group).gpus {
                pools[g.0 as usize].cap += bytes;
                pools[g.0 as usize].residents.push(i as u32);
            }
            let reserve = if rt.is_home { bytes.min(t.keep_bytes()) } else { 0 };
            self.kv_shares.push(KvShare { block_bytes, reserve, held: 0 });
        }
        // Online replanning carves copies' weights out of every GPU's pool, alone or not.
        if pools.iter().any(|p| p.residents.len() > 1) || self.replans_online() {
            self.kv_pools = pools;
            for i in 0..self.insts.len() {
                self.kv_refresh(i);
            }
        } else {
            self.kv_shares.clear();
        }
    }

    fn shares_pool(&self, inst: usize) -> bool {
        !self.kv_pools.is_empty()
            && (self.copies.on
                || self
                    .scn
                    .deployment
                    .group(self.insts[inst].group)
                    .gpus
                    .iter()
                    .any(|g| self.kv_pools[g.0 as usize].residents.len() > 1))
    }

    /// Bytes instance `inst` may add on GPU `g`: the pool's free bytes less what the
    /// other residents' reserves still claim.
    fn kv_room(&self, inst: usize, g: usize, ceiling: bool) -> u64 {
        let p = &self.kv_pools[g];
        let used =
            if ceiling { 0 } else { p.used - self.kv_shares[inst].held as u64 * self.kv_shares[inst].block_bytes };
        p.cap.saturating_sub(used + self.kv_claimed(g, Some(inst), ceiling))
    }

    /// What the reserves of GPU `g`'s residents (but `except`) claim beyond what they
    /// hold (`ceiling`: their whole reserves).
    pub(crate) fn kv_claimed(&self, g: usize, except: Option<usize>, ceiling: bool) -> u64 {
        self.kv_pools[g]
            .residents
            .iter()
            .filter(|&&j| Some(j as usize) != except)
            .map(|&j| {
                let s = &self.kv_shares[j as usize];
                if ceiling {
                    s.reserve
                } else {
                    s.reserve.saturating_sub(s.held as u64 * s.block_bytes)
                }
            })
            .sum()
    }

    /// Starts the idle residents (but `except`) of the group's GPUs that have work
    /// waiting: blocks were freed under them.
    pub(crate) fn kv_wake(&mut self, group: slicesched_gmg::GroupId, except: Option<usize>) {
        let scn = self.scn;
        for g in &scn.deployment.group(group).gpus {
            let g = g.0 as usize;
            for k in 0..self.kv_pools[g].residents.len() {
                let j = self.kv_pools[g].residents[k] as usize;
                if Some(j) != except && self.insts[j].inflight == 0 && self.insts[j].engine.has_schedulable() {
                    self.start_iterations(j);
                }
            }
        }
    }

    /// Resizes the instance's cache to what it holds plus what its pools can give it
    /// now (`ceiling`: with every other resident empty, for refusing requests that
    /// could never fit).
    pub(crate) fn kv_resize(&mut self, inst: usize, ceiling: bool) {
        if !self.shares_pool(inst) {
            return;
        }
        if !self.copies.holds_kv(inst) {
            // A copy whose weights are not there (yet) holds no KV.
            self.insts[inst].engine.set_kv_blocks_total(0);
            return;
        }
        let gpus = &self.scn.deployment.group(self.insts[inst].group).gpus;
        let room = gpus.iter().map(|g| self.kv_room(inst, g.0 as usize, ceiling)).min().unwrap_or(0);
        let blocks = (room / self.kv_shares[inst].block_bytes).min(u32::MAX as u64) as u32;
        self.insts[inst].engine.set_kv_blocks_total(blocks);
    }

    pub(crate) fn kv_refresh(&mut self, inst: usize) {
        self.kv_resize(inst, false);
    }

    /// Books the instance's change in held blocks into its pools; when it freed some,
    /// wakes the idle residents that may have waited for them.
    pub(crate) fn kv_sync(&mut self, inst: usize) {
        if !self.shares_pool(inst) {
            return;
        }
        let held = self.insts[inst].engine.kv_blocks_held();
        let s = &mut self.kv_shares[inst];
        let (old, bytes) = (s.held as u64 * s.block_bytes, held as u64 * s.block_bytes);
        s.held = held;
        let group = self.insts[inst].group;
        for g in &self.scn.deployment.group(group).gpus {
            let p = &mut self.kv_pools[g.0 as usize];
            p.used = p.used + bytes - old;
        }
        if bytes < old {
            self.kv_wake(group, Some(inst));
        }
    }
}
