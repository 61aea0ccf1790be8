//! Copies that come and go: the deployment revised online as load shifts
//! (`--replan online`).
//!
//! The planner (`planner.rs`) chooses which copies each tenant's load is worth and
//! where they fit, from the loads as the trace offers them. With [`Replan::Static`]
//! (the default) they stay for the whole run. With [`Replan::Online`] the run starts
//! with them too, and the core revises when each lender can host them, from what it
//! sees as the run goes (each tenant's [`LoadMeter`](crate::load::LoadMeter), the meter
//! a live service reports, checked every [`TICK_NS`]; the owners' KV queues at every
//! admission and iteration):
//!
//! - a lender whose owners' average load (the meters' moving average, as the planner
//!   judges lenders by their mean) reaches [`OWNER_BUSY`] loses its copies: they
//!   drain (no new requests, no new borrowed ops) and are dropped once nothing of them
//!   runs;
//! - an owner whose queue waits for KV blocks takes the memory back at once: idle
//!   copies on its GPUs are dropped until the queue's head fits, busy ones drain, and
//!   none comes back there for [`RELOAD_AFTER_NS`];
//! - a dropped copy comes back when its lender is quiet again and the lender's KV pool
//!   has the bytes free: the memory is taken when the copy starts, the weights take the
//!   link from the tenant's home for their bytes per GPU, and the copy serves (or lends
//!   its weights) once they have landed.
//!
//! Loading copies only when a tenant's forecast asked for them was tried first and
//! dropped: a burst is seen when its first 10-s window closes, and bursts of half a
//! minute were a third over before their copies came (20 mixes of `scenarios/family`
//! at their 9% rate scale under `slice`: 16 of 20 worse, 8.5% to 15.0% violating on
//! average).
//!
//! Memory: a copy's weights are carved from its GPUs' KV pools' free bytes (never a
//! home's reserve) and given back to them, so the ledger's weights plus KV pool per GPU
//! never exceed the planned layout's, which the what-if timeline's baseline holds. Only
//! where the GPUs' KV caches are pooled (one serving process per GPU: `pooled`,
//! `slice`), in a replay without an executor; elsewhere the copies stay as planned.

use crate::load::ServiceCost;
use crate::planner::{service_cost, OWNER_BUSY};
use crate::replay::{Ev, Sim};
use slicesched_gmg::{Deployment, GroupId, MemoryKind, TenantId};
use slicesched_policy::View;

/// How often the copies are revised.
pub const TICK_NS: u64 = 1_000_000_000;
/// A copy dropped because its lender's owner needed the memory stays away this long:
/// the forecast's own memory (a minute of peaks), so a copy does not bounce between
/// an owner's bursts.
pub const RELOAD_AFTER_NS: u64 = 60_000_000_000;

/// Whether the planned copies are fixed for the run or revised as load shifts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Replan {
    /// Every planned copy resident from the start (planned from the whole trace's load).
    #[default]
    Static,
    /// Copies loaded, drained and dropped as the metered load shifts (module doc).
    Online,
}

impl Replan {
    /// The name `--replan` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Static => "static",
            Self::Online => "online",
        }
    }
}

impl std::str::FromStr for Replan {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "static" => Ok(Self::Static),
            "online" => Ok(Self::Online),
            _ => Err(format!("unknown replan mode `{s}` (known: static, online)")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyState {
    Resident,
    /// Its weights travel; the memory is taken.
    Loading,
    /// Nothing new goes to it; dropped once nothing of it runs.
    Draining,
    Absent,
}

/// The copies' states, what their owners' loads cost, and what moved in the whole run.
#[derive(Debug, Default)]
pub(crate) struct Copies {
    /// Revised online (set up by [`Sim::init_copies`]).
    pub on: bool,
    /// Per entry of the planned deployment's `homes` (homes stay resident).
    state: Vec<CopyState>,
    /// Borrowed ops queued or running on each entry's weights.
    ops: Vec<u32>,
    /// The serving instance of each entry, if it serves.
    inst: Vec<Option<u32>>,
    /// Per instance, its entry (the inverse of `inst`: looked up at every iteration's end).
    entry: Vec<usize>,
    /// Per instance, whether requests may be routed (or moved) to it, and whether it
    /// may hold KV (resident or draining).
    routable: Vec<bool>,
    holds_kv: Vec<bool>,
    /// Entries drained for their owner's memory, and when each may load again.
    for_memory: Vec<bool>,
    not_before: Vec<u64>,
    svc: Vec<ServiceCost>,
    /// The deployment as policies see it: the homes and the resident copies.
    pub live: Deployment,
    pub loaded: u64,
    pub dropped: u64,
    pub dropped_for_memory: u64,
    /// Weight bytes copied, over every GPU they went to, and the time the copies took.
    pub bytes: u64,
    pub load_ns: u64,
}

impl Copies {
    /// The deployment policies see and the core checks against.
    pub(crate) fn dep<'a>(&'a self, planned: &'a Deployment) -> &'a Deployment {
        if self.on {
            &self.live
        } else {
            planned
        }
    }

    /// Whether instance `i` may take new requests.
    pub(crate) fn routable(&self, i: usize) -> bool {
        !self.on || self.routable[i]
    }

    /// Whether instance `i`'s weights are there for its KV cache to grow beside.
    pub(crate) fn holds_kv(&self, i: usize) -> bool {
        !self.on || self.holds_kv[i]
    }
}

impl Sim<'_> {
    /// Whether copies are revised online in this run: asked for, no executor, and the
    /// policy pools each GPU's KV caches (what the memory carving needs).
    pub(crate) fn replans_online(&self) -> bool {
        self.opts.replan == Replan::Online
            && self.exec.is_none()
            && !self.policy.spatial_sharing()
            && self.policy.context_switch_ns() == 0
    }

    /// Starts an online run from the plan, every copy resident (after `init_kv_pools`,
    /// which set up a pool on every GPU, and the timeline, whose baseline is the planned
    /// layout).
    pub(crate) fn init_copies(&mut self) {
        if !self.replans_online() || self.kv_pools.is_empty() {
            return;
        }
        let dep = &self.scn.deployment;
        let n = dep.homes.len();
        let mut c = Copies {
            on: true,
            state: vec![CopyState::Resident; n],
            ops: vec![0; n],
            inst: vec![None; n],
            entry: vec![usize::MAX; self.insts.len()],
            routable: vec![true; self.insts.len()],
            holds_kv: vec![true; self.insts.len()],
            for_memory: vec![false; n],
            not_before: vec![0; n],
            // Lenders are judged by their owners' GPU time, as the planner judges them.
            svc: (0..self.scn.tenants.len())
                .map(|i| service_cost(self.scn, i, self.cost, &slicesched_cost::CpuOverhead::ZERO))
                .collect(),
            live: dep.clone(),
            ..Default::default()
        };
        for (i, rt) in self.insts.iter().enumerate() {
            if let Some(e) = dep.homes.iter().position(|h| h.tenant == rt.tenant && h.group == rt.group && h.serves) {
                c.inst[e] = Some(i as u32);
                c.entry[i] = e;
            }
        }
        self.copies = c;
        self.rebuild_live();
        for i in 0..self.insts.len() {
            self.kv_refresh(i);
        }
        if !self.scn.requests.is_empty() {
            self.push(TICK_NS, Ev::Replan);
        }
    }

    /// Counts an arrival in its tenant's meter (every run has them: the online revision
    /// reads them, a live service reports them).
    pub(crate) fn meter(&mut self, t: u32, prompt: u32, output: u32) {
        self.meters[t as usize].observe(self.now, prompt, output);
    }

    /// The periodic revision (module doc).
    pub(crate) fn replan(&mut self) {
        let now = self.now;
        // A lender is judged by its owners' average load, as the planner judges it by
        // their mean over the trace.
        let mut owner_rho = vec![0f64; self.scn.cluster.len()];
        let scn = self.scn;
        for h in scn.deployment.homes.iter().filter(|h| h.is_home) {
            let m = &mut self.meters[h.tenant.index()];
            m.advance(now);
            let rho = self.copies.svc[h.tenant.index()].rho(&m.average());
            for g in &scn.deployment.group(h.group).gpus {
                owner_rho[g.0 as usize] += rho;
            }
        }
        for e in 0..scn.deployment.homes.len() {
            let h = &scn.deployment.homes[e];
            if h.is_home {
                continue;
            }
            let quiet = scn.deployment.group(h.group).gpus.iter().all(|g| owner_rho[g.0 as usize] < OWNER_BUSY);
            match self.copies.state[e] {
                CopyState::Resident if !quiet => self.drain(e, false),
                CopyState::Draining if quiet && !self.copies.for_memory[e] => {
                    self.copies.state[e] = CopyState::Resident;
                    self.rebuild_live();
                }
                CopyState::Absent if quiet && now >= self.copies.not_before[e] => {
                    self.load_copy(e);
                }
                _ => {}
            }
        }
        for e in 0..self.copies.state.len() {
            self.drop_if_idle(e);
        }
        let last = self.scn.requests.last().map_or(0, |r| r.1.arrival_ns);
        if now < last {
            self.push(now + TICK_NS, Ev::Replan);
        }
    }

    /// Starts copying entry `e`'s weights if its GPUs' pools have the bytes free now.
    fn load_copy(&mut self, e: usize) -> bool {
        let scn = self.scn;
        let h = &scn.deployment.homes[e];
        let w = h.weight_bytes_per_gpu;
        let gpus = &scn.deployment.group(h.group).gpus;
        if !gpus.iter().all(|g| self.pool_free(g.0 as usize) >= w) {
            return false;
        }
        for g in gpus {
            let g = g.0 as usize;
            let l = &mut self.dev.gpus[g].ledger;
            if !self.kv_pools[g].residents.is_empty() {
                self.kv_pools[g].cap -= w;
                l.release(MemoryKind::KvPool, w);
            }
            l.alloc(MemoryKind::Weights, w, self.now);
        }
        self.refresh_residents(h.group);
        let home = scn.deployment.home(h.tenant).expect("every tenant has a home").group;
        let ns = crate::place::view!(self).transfer_ns(home, h.group, w);
        self.copies.state[e] = CopyState::Loading;
        self.copies.loaded += 1;
        self.copies.bytes += w * gpus.len() as u64;
        self.copies.load_ns += ns;
        self.push(self.now + ns, Ev::CopyLanded(e as u32));
        true
    }

    /// Bytes of GPU `g`'s KV pool that neither a request holds nor a home's reserve
    /// claims; unbounded on a GPU with no serving instance (nothing else wants it).
    fn pool_free(&self, g: usize) -> u64 {
        let p = &self.kv_pools[g];
        if p.residents.is_empty() {
            return u64::MAX;
        }
        p.cap.saturating_sub(p.used + self.kv_claimed(g, None, false))
    }

    /// A copy's weights landed: it serves, and lends its weights, from now on.
    pub(crate) fn copy_landed(&mut self, e: u32) {
        let e = e as usize;
        debug_assert_eq!(self.copies.state[e], CopyState::Loading);
        self.copies.state[e] = CopyState::Resident;
        self.rebuild_live();
        if let Some(i) = self.copies.inst[e] {
            self.kv_refresh(i as usize);
        }
    }

    /// Stops sending work to entry `e`; drops it at once if nothing of it runs.
    fn drain(&mut self, e: usize, for_memory: bool) {
        self.copies.for_memory[e] |= for_memory;
        // Already draining: nothing the policies see changes (no new epoch, which a Wasm
        // policy's adapter would copy the deployment for).
        if self.copies.state[e] != CopyState::Draining {
            self.copies.state[e] = CopyState::Draining;
            self.rebuild_live();
        }
        self.drop_if_idle(e);
    }

    /// Drops a draining copy once no borrowed op and no request of it is left.
    pub(crate) fn drop_if_idle(&mut self, e: usize) {
        if self.copies.state[e] != CopyState::Draining || self.copies.ops[e] > 0 {
            return;
        }
        if let Some(i) = self.copies.inst[e] {
            let rt = &self.insts[i as usize];
            let busy = rt.inflight > 0 || rt.engine.has_work() || rt.moving_in > 0 || rt.moving_out > 0;
            if busy || rt.engine.kv_blocks_held() > 0 {
                return;
            }
        }
        self.copies.state[e] = CopyState::Absent;
        self.copies.dropped += 1;
        if std::mem::take(&mut self.copies.for_memory[e]) {
            self.copies.dropped_for_memory += 1;
            self.copies.not_before[e] = self.now + RELOAD_AFTER_NS;
        }
        self.give_memory(e);
        let group = self.scn.deployment.homes[e].group;
        self.refresh_residents(group);
        // The owners may have waited for these blocks.
        self.kv_wake(group, None);
    }

    /// Entry `e`'s weight bytes leave its GPUs and return to their KV pools.
    fn give_memory(&mut self, e: usize) {
        let scn = self.scn;
        let h = &scn.deployment.homes[e];
        let w = h.weight_bytes_per_gpu;
        for g in &scn.deployment.group(h.group).gpus {
            let g = g.0 as usize;
            let l = &mut self.dev.gpus[g].ledger;
            l.release(MemoryKind::Weights, w);
            if !self.kv_pools[g].residents.is_empty() {
                l.alloc(MemoryKind::KvPool, w, self.now);
                self.kv_pools[g].cap += w;
            }
        }
        self.rebuild_live();
    }

    fn refresh_residents(&mut self, group: GroupId) {
        let scn = self.scn;
        for g in &scn.deployment.group(group).gpus {
            let g = g.0 as usize;
            for k in 0..self.kv_pools[g].residents.len() {
                let j = self.kv_pools[g].residents[k] as usize;
                self.kv_refresh(j);
            }
        }
    }

    /// An owner whose queue waits for KV blocks takes its GPUs' memory back from the
    /// copies on them: idle ones are dropped until the queue's head fits, busy ones drain.
    pub(crate) fn give_back(&mut self, inst: usize) {
        if !self.copies.on || !self.insts[inst].is_home || self.insts[inst].engine.kv_shortfall() == 0 {
            return;
        }
        let scn = self.scn;
        let (tenant, group) = (self.insts[inst].tenant, self.insts[inst].group);
        for e in 0..self.copies.state.len() {
            let h = &scn.deployment.homes[e];
            if h.is_home
                || h.tenant == tenant
                || !matches!(self.copies.state[e], CopyState::Resident | CopyState::Draining)
            {
                continue;
            }
            let own = &scn.deployment.group(group).gpus;
            if !scn.deployment.group(h.group).gpus.iter().any(|g| own.contains(g)) {
                continue;
            }
            self.drain(e, true);
            self.kv_refresh(inst);
            if self.insts[inst].engine.kv_shortfall() == 0 {
                return;
            }
        }
    }

    /// The live deployment and instance routes after a state change; a new epoch, so
    /// policies that cache the deployment see the change.
    fn rebuild_live(&mut self) {
        let dep = &self.scn.deployment;
        let st = &self.copies.state;
        self.copies.live.homes = (0..dep.homes.len())
            .filter(|&e| dep.homes[e].is_home || st[e] == CopyState::Resident)
            .map(|e| dep.homes[e].clone())
            .collect();
        for (e, i) in self.copies.inst.iter().enumerate() {
            if let Some(i) = i {
                let home = dep.homes[e].is_home;
                self.copies.routable[*i as usize] = home || st[e] == CopyState::Resident;
                self.copies.holds_kv[*i as usize] = home || matches!(st[e], CopyState::Resident | CopyState::Draining);
            }
        }
        self.epoch = slicesched_policy::new_epoch();
    }

    /// The planned entry holding `tenant`'s weights on `group` (a borrowed op's host).
    fn entry_at(&self, tenant: TenantId, group: GroupId) -> Option<usize> {
        self.scn.deployment.homes.iter().position(|h| h.tenant == tenant && h.group == group && !h.is_home)
    }

    /// A borrowed op of `tenant` was queued on `group`, or ended there.
    pub(crate) fn copy_op(&mut self, tenant: TenantId, group: GroupId, started: bool) {
        if !self.copies.on {
            return;
        }
        let Some(e) = self.entry_at(tenant, group) else { return };
        if started {
            self.copies.ops[e] += 1;
        } else {
            self.copies.ops[e] -= 1;
            self.drop_if_idle(e);
        }
    }

    /// An instance whose copy drains ended some work: it may be dropped now.
    pub(crate) fn copy_inst_idle(&mut self, inst: usize) {
        if !self.copies.on || self.insts[inst].is_home {
            return;
        }
        let e = self.copies.entry[inst];
        if e != usize::MAX {
            self.drop_if_idle(e);
        }
    }
}
