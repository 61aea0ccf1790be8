//! Deployment planner: copies of tenants' weights in other GPUs' free memory.
//!
//! Besides each tenant's home (its container), a policy that can use them gets
//! replicas: `Weights` replicas (whole models or layer ranges, no KV cache) let an
//! operator-level policy run a tenant's GEMMs elsewhere; `Serving` replicas (whole
//! models with their own KV cache and engine) let a request-level policy route whole
//! requests. Replicas only take memory that would otherwise have gone to the host's KV
//! cache, and at most `replica_memory_fraction` of it, never what the host's own load
//! needs at its peak. Which tenants get copies, how many and where follows from each
//! tenant's offered load (`load.rs`): a tenant whose peak fits its home asks none, and
//! copies go only to GPUs whose owners leave time spare.

use crate::load::{peak_backlog_s, window_rates, LoadProfile, ServiceCost};
use crate::scenario::{size_kv_caches, Scenario, ScenarioError};
use serde::{Deserialize, Serialize};
use slicesched_cost::{CostModel, CpuOverhead, DeviceCtx};
use slicesched_gmg::{Deployment, TenantHome, TenantId};
use slicesched_hw::GpuId;
pub use slicesched_policy::ReplicaMode;

/// Planner knobs (`[planner]` in a scenario). Which tenants get copies, how many and
/// where, and how much KV each home keeps, follow from the tenants' load (`load.rs`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerSpec {
    /// Most of a GPU's KV memory that other tenants' replicas may take.
    pub replica_memory_fraction: f64,
    /// Allow replicas of a layer range when the whole model does not fit.
    pub layer_ranges: bool,
    /// Activation memory kept for borrowed ops on a GPU hosting weight replicas, in
    /// units of the largest guest's activation reserve.
    pub guest_reserve_factor: f64,
}

impl Default for PlannerSpec {
    fn default() -> Self {
        Self { replica_memory_fraction: 0.75, layer_ranges: true, guest_reserve_factor: 4.0 }
    }
}

impl PlannerSpec {
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=0.9).contains(&self.replica_memory_fraction) {
            return Err(format!("replica_memory_fraction must be in [0, 0.9], got {}", self.replica_memory_fraction));
        }
        if !(self.guest_reserve_factor.is_finite() && self.guest_reserve_factor >= 0.0) {
            return Err("guest_reserve_factor must be non-negative".into());
        }
        Ok(())
    }
}

/// A tenant asks other GPUs for capacity when its peak forecast would keep its home
/// busier than this share: enough to bring its peak down to it on each GPU serving it
/// (queueing delay grows as rho / (1 - rho): at one half a request waits about one
/// service time)...
pub const RHO_FIT: f64 = 0.5;
/// ...and the tenants whose bursts outrun their home longer than their SLA can wait
/// ([`TenantLoad::overflows`]) choose first, serving and weight-only copies, before the
/// others take what is left. One tier at `RHO_FIT` gave the light tenants of bursty-8t
/// at four times its rate (peaks 0.7-0.9) serving copies that took the lenders' memory
/// from the 24B tenants, whose peaks are twice their GPU.
///
/// A request arriving while its home has `backlog` seconds of work queued waits about
/// that long; over the window in which a burst builds the backlog up to its peak, the
/// requests arriving wait half the peak on average: past twice the TTFT target the
/// typical request of the burst misses it.
pub const OVERFLOW_TTFTS: f64 = 2.0;
/// A GPU whose owners keep it busier than this on average lends nothing: a copy's work
/// there would wait behind the owner's, and take KV its owner serves from.
pub const OWNER_BUSY: f64 = 0.5;

/// A tenant's load as the planner sees it.
#[derive(Debug, Clone, Copy)]
pub struct TenantLoad {
    pub profile: LoadProfile,
    /// Busy share of its home's engine at its mean load and at its peak forecast:
    /// kernels and the CPU time between iterations, what decides whether the home
    /// keeps up.
    pub rho_mean: f64,
    pub rho_peak: f64,
    /// The same loads' share of the home's GPU time, kernels alone: how much of the GPU
    /// its owner leaves to guests (a guest's op runs while the owner's engine is on
    /// its CPU).
    pub gpu_mean: f64,
    pub gpu_peak: f64,
    /// KV tokens its peak load holds at once.
    pub kv_tokens: u64,
    /// The most engine work its home has queued at once, window by window as the load
    /// arrives ([`peak_backlog_s`]), and the wait its SLA allows a request of its mean
    /// prompt before the first token.
    pub backlog_s: f64,
    pub ttft_s: f64,
}

impl TenantLoad {
    /// Whether its bursts outrun its home for longer than its SLA can wait
    /// ([`OVERFLOW_TTFTS`]): the requests arriving then miss their first token whatever
    /// the averages say. The peak forecast alone (over or under one home) judged by
    /// kernels did not tell: gen-17 of scenarios/family has a 7B taking 50 short requests
    /// a second in bursts, 0.84 of its GPU's kernel time at its peak and 1.33 of its
    /// engine's with the CPU between iterations, 11.6 s of work queued by the burst's
    /// end; bursty-8t's chat tenant at rate scale 5.2, 1.11 of its engine for one
    /// window, queues 1.1 s against its 0.66 s TTFT and is fine with what is left.
    pub fn overflows(&self) -> bool {
        self.backlog_s > OVERFLOW_TTFTS * self.ttft_s
    }
}

/// Every tenant's load, metered over the scenario's requests (already rate-scaled),
/// priced by the default cost model.
pub fn tenant_loads(scn: &Scenario) -> Vec<TenantLoad> {
    tenant_loads_with(scn, CostModel::default_a100())
}

/// [`tenant_loads`] priced by `cost`: the model the replay (or the executor) runs with,
/// so that a load is heavy where its ops are slow.
pub fn tenant_loads_with(scn: &Scenario, cost: &CostModel) -> Vec<TenantLoad> {
    scn.tenants
        .iter()
        .enumerate()
        .map(|(i, t)| {
            // Requests over the tenant's context window are dropped at arrival: no load.
            let arrivals = || {
                scn.requests
                    .iter()
                    .filter(|(k, r)| *k as usize == i && t.length_refusal(r.prompt_tokens, r.output_tokens).is_none())
                    .map(|(_, r)| (r.arrival_ns, r.prompt_tokens, r.output_tokens))
            };
            let profile = LoadProfile::of(&t.sla, arrivals());
            let c = service_cost(scn, i, cost, &CpuOverhead::default_a100());
            let g = service_cost(scn, i, cost, &CpuOverhead::ZERO);
            let mean_prompt = profile.mean.prompt_tokens / profile.mean.requests.max(f64::MIN_POSITIVE);
            TenantLoad {
                profile,
                rho_mean: c.rho(&profile.mean),
                rho_peak: c.rho(&profile.peak),
                gpu_mean: g.rho(&profile.mean),
                gpu_peak: g.rho(&profile.peak),
                kv_tokens: (profile.peak.kv_tokens.ceil() as u64).min(crate::scenario::MAX_KV_TOKENS),
                backlog_s: peak_backlog_s(&window_rates(&t.sla, arrivals()), &c),
                ttft_s: t.sla.ttft_target_ns(mean_prompt.round() as u32) as f64 / 1e9,
            }
        })
        .collect()
}

/// What tenant `i`'s work costs on its home group, with `cpu` the engine's CPU time per
/// iteration: the replay's (`ReplayOptions::default`, `CpuOverhead::default_a100`) for
/// what the engine serves, none for what the GPU runs.
pub(crate) fn service_cost(scn: &Scenario, i: usize, cost: &CostModel, cpu: &CpuOverhead) -> ServiceCost {
    let t = &scn.tenants[i];
    let dev = DeviceCtx { sku: scn.cluster.gpu(t.gpus[0]).sku.clone(), group_link: scn.cluster.group_link(&t.gpus) };
    ServiceCost::new(cost, cpu, &dev, &t.model, t.gpus.len() as u32, &t.sla, t.engine.max_batched_tokens)
}

/// The serving capacity a tenant asks of other GPUs, in homes' worth: what brings its
/// peak down to [`RHO_FIT`]; a little (one copy) when its home cannot hold the KV its
/// peak needs.
fn capacity_wanted(load: &TenantLoad, home_kv_tokens: u64) -> f64 {
    let by_time = (load.rho_peak / RHO_FIT - 1.0).max(0.0);
    if load.kv_tokens > home_kv_tokens {
        by_time.max(f64::MIN_POSITIVE)
    } else {
        by_time
    }
}

/// What a copy on a group adds to its tenant's capacity: the share of the time its
/// owners leave, times the share of the layers it holds.
fn capacity_of(copy: &TenantHome, layers: u32, owner_busy: f64) -> f64 {
    (1.0 - owner_busy).max(0.0) * (copy.layers.1 - copy.layers.0) as f64 / layers.max(1) as f64
}

/// The scenario with replicas added for `mode` and KV caches re-sized around them,
/// loads priced by the default cost model.
pub fn plan(scn: &Scenario, mode: ReplicaMode) -> Result<Scenario, ScenarioError> {
    plan_with(scn, mode, CostModel::default_a100())
}

/// [`plan`] with loads priced by `cost` (e.g. a model fitted on the user's own device).
pub fn plan_with(scn: &Scenario, mode: ReplicaMode, cost: &CostModel) -> Result<Scenario, ScenarioError> {
    plan_ordered(scn, mode, cost, PhaseOrder::TierFirst)
}

/// In which order an operator-level policy's plan (`ReplicaMode::Both`) hands out
/// serving and weight-only copies. Neither order is better on every load: a 70B past
/// saving and 24B tenants being saved ask the same weight-only copies, and nothing in
/// the loads tells them apart (README, "A family of mixes"); the what-if
/// (`crate::plan_whatif`) replays the candidates and keeps the best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhaseOrder {
    /// Tier by tier, serving copies then weight-only ones: the overflowing tenants'
    /// weight-only ranges come before the other tenants' serving copies.
    TierFirst,
    /// Every tier's serving copies before any weight-only copy.
    ServingFirst,
    /// Serving copies only, no weight-only copy and no guest reserve: the
    /// request-level plan (`pooled`'s).
    ServingOnly,
}

impl PhaseOrder {
    pub const ALL: [PhaseOrder; 3] = [PhaseOrder::TierFirst, PhaseOrder::ServingFirst, PhaseOrder::ServingOnly];

    pub fn name(self) -> &'static str {
        match self {
            PhaseOrder::TierFirst => "tier-first",
            PhaseOrder::ServingFirst => "serving-first",
            PhaseOrder::ServingOnly => "serving-only",
        }
    }
}

/// [`plan_with`] handing copies out in `order` (which matters for `ReplicaMode::Both`
/// alone).
pub fn plan_ordered(
    scn: &Scenario,
    mode: ReplicaMode,
    cost: &CostModel,
    order: PhaseOrder,
) -> Result<Scenario, ScenarioError> {
    plan_for_loads(scn, mode, &tenant_loads_with(scn, cost), order)
}

/// [`plan_ordered`] for loads already metered ([`tenant_loads_with`]: the plan depends on
/// the cost model only through them), so that the what-if's candidates meter the trace
/// once between them.
pub fn plan_for_loads(
    scn: &Scenario,
    mode: ReplicaMode,
    loads: &[TenantLoad],
    order: PhaseOrder,
) -> Result<Scenario, ScenarioError> {
    if mode == ReplicaMode::Both && order == PhaseOrder::ServingOnly {
        return plan_for_loads(scn, ReplicaMode::Serving, loads, PhaseOrder::TierFirst);
    }
    let mut out = scn.clone();
    // A home keeps what its load holds at its peak, unless its tenant asked for a size.
    for (t, l) in out.tenants.iter_mut().zip(loads) {
        t.keep_kv_tokens = t.kv_request.unwrap_or(l.kv_tokens);
    }
    if mode == ReplicaMode::None || scn.tenants.len() < 2 {
        return Ok(out);
    }
    let spec = scn.spec.planner;
    let n = scn.cluster.len();
    // What each GPU would give its KV caches without replicas, and the share of it
    // replicas may take.
    let mut budget: Vec<u64> = (0..n)
        .map(|g| {
            let gpu = GpuId(g as u32);
            // A GPU no tenant calls home has no KV cache to give up: all it may use is free.
            let owned = scn.tenants.iter().any(|t| t.gpus.contains(&gpu));
            let mem = scn.cluster.gpu(gpu).sku.memory;
            let free = if owned { scn.kv_bytes_on(gpu) } else { mem - scn.unusable_bytes(mem).min(mem) };
            let keep: u64 = out.tenants.iter().filter(|t| t.gpus.contains(&gpu)).map(|t| t.keep_bytes()).sum();
            ((free as f64 * spec.replica_memory_fraction) as u64).min(free.saturating_sub(keep))
        })
        .collect();
    // Per GPU, its owners' mean busy share (a busy owner's GPU lends nothing) and
    // whether an owner's bursts overflow it (it takes no serving copy: a copy's requests
    // stay for their whole prefill and decode and their KV with them, so they are there
    // when the owner's next burst comes; gen-15 of scenarios/family put a long-prompt
    // tenant's copy, 95k-token prompts, on a bursty owner's GPU).
    let mut owner_rho = vec![0f64; n];
    let mut owner_bursts = vec![false; n];
    for (t, l) in scn.tenants.iter().zip(loads) {
        for g in &t.gpus {
            owner_rho[g.0 as usize] += l.gpu_mean;
            owner_bursts[g.0 as usize] |= l.overflows();
        }
    }
    let tenant_rho: Vec<f64> = loads.iter().map(|l| l.gpu_mean).collect();
    let tenant_peak: Vec<f64> = loads.iter().map(|l| l.gpu_peak).collect();
    let wanted: Vec<f64> = out
        .tenants
        .iter()
        .zip(loads)
        .map(|(t, l)| capacity_wanted(l, t.kv_blocks as u64 * t.engine.block_size as u64))
        .collect();
    // Tier 1: the tenants whose bursts overflow their home (or whose KV does not fit
    // it); tier 2: the others that want capacity.
    let tier: Vec<u8> = out
        .tenants
        .iter()
        .zip(loads)
        .map(|(t, l)| {
            let kv_short = l.kv_tokens > t.kv_blocks as u64 * t.engine.block_size as u64;
            if l.overflows() || kv_short {
                1
            } else {
                2
            }
        })
        .collect();
    let mut got = vec![0f64; scn.tenants.len()];
    let mut deferred: Vec<(Vec<GpuId>, u64)> = Vec::new();
    let mut guest_max_act = vec![0u64; n];
    let mut homes: Vec<TenantHome> = scn.deployment.homes.iter().filter(|h| h.is_home).cloned().collect();
    // The tenant whose home holds the fewest KV tokens picks first: a copy's KV cache
    // is worth most to a KV-bound tenant (a 13B without GQA holds a sixth of the tokens
    // of an 8B with it in the same memory).
    homes.sort_by_key(|h| (scn.tenants[h.tenant.index()].kv_blocks, h.tenant));
    // In each tier, serving copies first, for every policy that routes requests, so an
    // operator-level policy (`Both`) gets the same serving copies as a request-level one
    // (`Serving`); weight-only copies then go to the tenants no serving copy fits for (a
    // model too large to serve beside another home), in what serving copies left.
    let phases: &[(u8, bool)] = match mode {
        ReplicaMode::Serving => &[(1, true), (2, true)],
        ReplicaMode::Both if order == PhaseOrder::ServingFirst => &[(1, true), (2, true), (1, false), (2, false)],
        ReplicaMode::Both => &[(1, true), (1, false), (2, true), (2, false)],
        _ => &[(1, false), (2, false)],
    };
    for &(tier_now, serving) in phases {
        let pass: Vec<&TenantHome> = homes
            .iter()
            .filter(|h| wanted[h.tenant.index()] > 0.0 && tier[h.tenant.index()] == tier_now)
            .filter(|h| serving || !out.deployment.replicas(h.tenant).any(|r| r.serves))
            .collect();
        // A lender's weight budget is split evenly among the tenants that may copy
        // weights onto it, so that each one's bursts can borrow from every lender
        // rather than a few lenders each: uncorrelated bursts rarely want the same
        // lender at once (bursty-8t at rate scale 4: 4.57% violations against 8.94%
        // with whole copies on three lenders per 24B tenant).
        let share: Vec<u64> = if serving {
            vec![u64::MAX; n]
        } else {
            let wanting = |g: usize| {
                let on_g = |h: &&TenantHome| scn.tenants[h.tenant.index()].gpus.iter().any(|x| x.0 as usize == g);
                pass.iter().filter(|h| !on_g(h)).count().max(1) as u64
            };
            budget.iter().enumerate().map(|(g, &b)| b / wanting(g)).collect()
        };
        // Round by round, one copy per tenant still short of what it wants; each
        // tenant gets at most one copy per group, so the rounds end.
        loop {
            let mut placed = false;
            for &h in &pass {
                let i = h.tenant.index();
                let t = &scn.tenants[i];
                if got[i] >= wanted[i] {
                    continue;
                }
                // A serving copy is judged on its own memory, as a request-level policy
                // would judge it: the room for other tenants' borrowed ops is taken
                // beside it only where some is left (below). Charging it first left the
                // bursty code tenants of generated mixes with weight-only copies where
                // `pooled` got serving ones, and twice the violations.
                let guest_factor = if mode == ReplicaMode::Serving { 0.0 } else { spec.guest_reserve_factor };
                let lenders = Lenders {
                    budget: &budget,
                    share: &share,
                    owner_rho: &owner_rho,
                    tenant_rho: &tenant_rho,
                    tenant_peak: &tenant_peak,
                    owner_bursts: &owner_bursts,
                    guest_act: &guest_max_act,
                    guest_factor: if serving { 0.0 } else { guest_factor },
                };
                let Some((gpus, mut copy)) = next_copy(scn, &out.deployment, &lenders, h, serving) else {
                    continue;
                };
                copy.group = out.deployment.group_for(&gpus);
                let busy = owners_busy(scn, &tenant_rho, &gpus);
                got[i] += capacity_of(&copy, t.model.num_hidden_layers as u32, busy);
                // Ops borrowed into the copy's group need the guest reserve on every GPU
                // of it; where it does not fit, the copy serves requests only (the core
                // refuses borrowed ops beyond the reserve).
                // A serving copy's guest reserve (room for its tenant's ops borrowed into
                // it) is booked after every phase, where room is left: booked at once, it
                // took the memory the next serving copies needed, and `slice` got fewer of
                // them than `pooled` (gen-09 of scenarios/family at rate scale 6.79: its
                // bursty 7B two instead of four, its long-context 14B one instead of two;
                // 17.35% of requests late against `pooled`'s 8.87%, 7.30% now).
                let act = t.activation_reserve;
                if serving && guest_factor > 0.0 {
                    deferred.push((gpus.clone(), act));
                } else {
                    let (weights, factor) = (copy.weight_bytes_per_gpu, guest_factor);
                    book_guest_reserve(&mut budget, &mut guest_max_act, &gpus, act, factor, weights);
                }
                // A serving copy was judged with room for a KV cache beside its weights
                // (`copy_on`); that room stays booked, or later weight-only copies take it
                // and leave the copy a few requests' KV and its host's home under what its
                // load keeps (gen-10 of scenarios/family: the 7B code tenant's copies on
                // the 70B's GPUs got 9,872 tokens each, the 70B's home 110,704 of its
                // 125,460, once the 34B's ranges went there too).
                let kv_room = if copy.serves { copy.weight_bytes_per_gpu / 2 } else { 0 };
                for x in &gpus {
                    let cost = copy.weight_bytes_per_gpu + kv_room;
                    budget[x.0 as usize] -= cost.min(budget[x.0 as usize]);
                }
                out.deployment.homes.push(copy);
                placed = true;
            }
            if !placed {
                break;
            }
        }
    }
    // The serving copies' guest reserves, as far as the lenders' budgets hold them; a
    // copy without one serves requests only (the core refuses ops borrowed beyond it).
    for (gpus, act) in deferred {
        book_guest_reserve(&mut budget, &mut guest_max_act, &gpus, act, spec.guest_reserve_factor, 0);
    }
    if mode != ReplicaMode::Serving {
        out.guest_reserve = guest_max_act.iter().map(|&a| (a as f64 * spec.guest_reserve_factor) as u64).collect();
    }
    size_kv_caches(&out.cluster, &mut out.deployment, &out.tenants, out.memory, &out.guest_reserve, true).map_err(
        |e| ScenarioError::Field { path: out.path.display().to_string(), field: "planner".into(), msg: e.to_string() },
    )?;
    for (i, t) in out.tenants.iter_mut().enumerate() {
        t.kv_blocks = out.deployment.home(TenantId(i as u32)).map_or(0, |h| h.kv_blocks);
    }
    Ok(out)
}

/// What the GPUs can lend: bytes left for copies, the most one tenant may take of
/// them (weight-only copies), their owners' mean busy share, and the largest guest
/// activation reserve so far (the guest reserve grows with it, out of the same budget).
#[derive(Clone, Copy)]
struct Lenders<'a> {
    budget: &'a [u64],
    share: &'a [u64],
    owner_rho: &'a [f64],
    /// Each tenant's mean busy share, and at its peak forecast.
    tenant_rho: &'a [f64],
    tenant_peak: &'a [f64],
    owner_bursts: &'a [bool],
    guest_act: &'a [u64],
    guest_factor: f64,
}

impl Lenders<'_> {
    /// Bytes GPU `g`'s guest reserve grows by for a guest with activation reserve `act`.
    fn reserve_growth(&self, g: usize, act: u64) -> u64 {
        reserve_growth(self.guest_act[g], act, self.guest_factor)
    }
}

/// Bytes a GPU's guest reserve (`factor` times its largest guest's activation reserve,
/// `largest`) grows by for a guest whose activation reserve is `act`.
fn reserve_growth(largest: u64, act: u64, factor: f64) -> u64 {
    (act.saturating_sub(largest) as f64 * factor).ceil() as u64
}

/// Books on every GPU of `gpus` the guest reserve's growth for a guest with activation
/// reserve `act`, where each GPU's budget holds it beside `beside` bytes booked with it
/// (a copy's weights); none where one does not.
fn book_guest_reserve(budget: &mut [u64], guest_act: &mut [u64], gpus: &[GpuId], act: u64, factor: f64, beside: u64) {
    let fits =
        gpus.iter().all(|x| beside + reserve_growth(guest_act[x.0 as usize], act, factor) <= budget[x.0 as usize]);
    if fits {
        for x in gpus.iter().map(|x| x.0 as usize) {
            budget[x] -= reserve_growth(guest_act[x], act, factor);
            guest_act[x] = guest_act[x].max(act);
        }
    }
}

/// The next copy of `h`'s tenant, if one fits, and the GPUs it goes on: any set of as
/// many GPUs as its home has, of one SKU and one node (the copy runs the home's
/// tensor-parallel layout), none of them already holding the tenant's weights, whose
/// owners together are not busy ([`OWNER_BUSY`], [`owners_busy`]) and, for a serving
/// copy, whose owners' bursts fit their GPUs; nearest first (same node), then the one
/// whose owners leave the most time spare at their peaks, then the one with the most
/// budget left; whole, or (weight-only) the layer range that fits.
fn next_copy(
    scn: &Scenario,
    dep: &Deployment,
    lenders: &Lenders,
    h: &TenantHome,
    serving: bool,
) -> Option<(Vec<GpuId>, TenantHome)> {
    let t = &scn.tenants[h.tenant.index()];
    let tp = t.gpus.len();
    let node = scn.cluster.gpu(t.gpus[0]).node;
    let min_on = |v: &[u64], g: &[GpuId]| g.iter().map(|x| v[x.0 as usize]).min().unwrap_or(0);
    let busy = |g: &[GpuId]| owners_busy(scn, lenders.tenant_rho, g);
    // GPUs the tenant's weights are on already (its home, its copies): a copy overlapping
    // one would share its GPUs' memory and time with the tenant's own work.
    let holds: Vec<GpuId> = dep
        .homes
        .iter()
        .filter(|r| r.tenant == h.tenant)
        .flat_map(|r| dep.group(r.group).gpus.iter().copied())
        .collect();
    // A group need not be another tenant's home: a one-GPU copy on one GPU of a larger
    // home, a two-GPU copy over two one-GPU homes, or idle GPUs no one owns. Memory is
    // booked per GPU (weights, KV pools, guest reserves) and a group's op waits for
    // every GPU of it, so overlapping groups need nothing more of the core; before,
    // copies went only to other homes of the same size, and a tenant whose TP degree no
    // other home had (a 4-GPU long-prompt home beside 1-GPU ones) got none at all.
    let free: Vec<GpuId> = scn
        .cluster
        .gpus
        .iter()
        .filter(|g| !holds.contains(&g.id) && lenders.owner_rho[g.id.0 as usize] < OWNER_BUSY)
        .filter(|g| !(serving && lenders.owner_bursts[g.id.0 as usize]))
        .map(|g| g.id)
        .collect();
    let mut targets: Vec<Vec<GpuId>> = Vec::new();
    gpu_sets(&free, tp, &mut Vec::new(), &mut targets, &|set: &[GpuId], x: GpuId| {
        let (a, b) = (scn.cluster.gpu(set[0]), scn.cluster.gpu(x));
        a.node == b.node && a.sku.name == b.sku.name
    });
    targets.retain(|g| busy(g) < OWNER_BUSY);
    // Spare time in quarters, so that among lenders about as idle the budget decides;
    // judged at the owners' peaks, so that of two owners light on average the one whose
    // own bursts want help lends last (gen-15 of scenarios/family: a 70B's weight copy on
    // the GPU of a 7B code tenant serving 7 requests a second took its time and memory,
    // and that tenant went from 1.8% to 9.6% of its requests violating).
    let spare = |g: &[GpuId]| ((1.0 - owners_busy(scn, lenders.tenant_peak, g)).max(0.0) * 4.0) as u32;
    targets.sort_by_cached_key(|g| {
        let far = scn.cluster.gpu(g[0]).node != node;
        (far, std::cmp::Reverse(spare(g)), std::cmp::Reverse(min_on(lenders.budget, g)), g.clone())
    });
    targets.into_iter().find_map(|g| {
        let budget = g.iter().map(|x| {
            let x = x.0 as usize;
            lenders.budget[x].saturating_sub(lenders.reserve_growth(x, t.activation_reserve))
        });
        let left = budget.min().unwrap_or(0).min(min_on(lenders.share, &g));
        copy_on(scn, dep, h, left, serving).map(|c| (g, c))
    })
}

/// The share of the time some owner of `gpus` keeps one of them busy: an op on a group
/// waits for every GPU of it, so it finds the group free of owners only when each owner
/// is away (their loads taken as independent). One owner's GPUs count once: a copy on
/// two GPUs of one two-GPU home waits for that owner alone, a copy over four owners'
/// GPUs for all four (gen-14 of scenarios/family gave a 4-GPU weight copy of its 32B
/// tenant four owners' GPUs, and the tenant gained nothing from it).
fn owners_busy(scn: &Scenario, tenant_rho: &[f64], gpus: &[GpuId]) -> f64 {
    let idle: f64 = scn
        .tenants
        .iter()
        .zip(tenant_rho)
        .filter(|(t, _)| t.gpus.iter().any(|g| gpus.contains(g)))
        .map(|(_, &r)| 1.0 - r.clamp(0.0, 1.0))
        .product();
    1.0 - idle
}

/// Every set of `k` of `free` (ascending, as groups are named) whose members `fits`
/// the set's first one, appended to `out`.
fn gpu_sets(
    free: &[GpuId],
    k: usize,
    set: &mut Vec<GpuId>,
    out: &mut Vec<Vec<GpuId>>,
    fits: &dyn Fn(&[GpuId], GpuId) -> bool,
) {
    if set.len() == k {
        out.push(set.clone());
        return;
    }
    for (i, &x) in free.iter().enumerate() {
        if free.len() - i < k - set.len() {
            break;
        }
        if set.is_empty() || fits(set, x) {
            set.push(x);
            gpu_sets(&free[i + 1..], k, set, out, fits);
            set.pop();
        }
    }
}

/// A copy of `h`'s tenant in `left` bytes per GPU, if one fits (its group is set by
/// the caller).
fn copy_on(scn: &Scenario, dep: &Deployment, h: &TenantHome, left: u64, serving: bool) -> Option<TenantHome> {
    let t = &scn.tenants[h.tenant.index()];
    let layers = t.model.num_hidden_layers as u32;
    let whole = t.model.weight_bytes_per_gpu(t.gpus.len() as u32);
    let (range, bytes) = if serving {
        // A serving copy needs room for a useful KV cache too: a third of the budget
        // stays for it, booked by the caller (half the copy's weight bytes).
        if whole > left / 3 * 2 {
            return None;
        }
        ((0, layers), whole)
    } else if whole <= left {
        ((0, layers), whole)
    } else if scn.spec.planner.layer_ranges {
        let per_layer = whole / (layers as u64 + 2);
        let fit = (left / per_layer.max(1)).min(layers as u64) as u32;
        if fit < layers / 4 || fit == 0 {
            return None;
        }
        let start = least_covered_start(&dep.homes, h.tenant, layers, fit);
        ((start, start + fit), per_layer * fit as u64)
    } else {
        return None;
    };
    Some(TenantHome {
        tenant: h.tenant,
        group: h.group,
        layers: range,
        weight_bytes_per_gpu: bytes,
        is_home: false,
        serves: serving,
        kv_blocks: 0,
    })
}

/// Where a copy of `fit` of the tenant's `layers` layers should start: on the layers its
/// copies so far cover least (first such start on a tie), so that two ranges of a model
/// too large to copy whole cover all of it between them and every layer's GEMMs have
/// somewhere to go (rotating starts by round left the last layers uncovered).
fn least_covered_start(homes: &[TenantHome], tenant: TenantId, layers: u32, fit: u32) -> u32 {
    let mut cover = vec![0u32; layers as usize];
    for h in homes.iter().filter(|h| h.tenant == tenant && !h.is_home) {
        cover.iter_mut().take(h.layers.1 as usize).skip(h.layers.0 as usize).for_each(|c| *c += 1);
    }
    (0..=layers - fit).min_by_key(|&s| (cover[s as usize..(s + fit) as usize].iter().sum::<u32>(), s)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// One tenant per (model, home GPUs, Poisson rate, extra lines) on H100s.
    fn scenario(gpus: u32, tenants: &[(&str, &str, f64, &str)]) -> Scenario {
        let mut text = format!(
            "name = \"t\"\nseed = 3\nduration_s = 300\n[cluster]\n[[cluster.nodes]]\ngpu = \"H100-80GB\"\ngpus = {gpus}\n"
        );
        for (i, (model, homes, rate, extra)) in tenants.iter().enumerate() {
            text += &format!(
                "[[tenants]]\nname = \"t{i}\"\nmodel = \"{model}\"\ngpus = {homes}\n{extra}\n\
                 sla = {{ ttft_ms = 400, ttft_ms_per_1k = 200, tpot_ms = 50 }}\n"
            );
            // `extra` may give the trace; else a Poisson one at `rate`.
            if !extra.starts_with("trace") {
                text += &format!(
                    "trace = {{ kind = \"poisson\", rate = {rate}, prompt = {{ dist = \"lognormal\", median = 1500, p90 = 4000, max = 8192 }}, output = {{ dist = \"lognormal\", median = 100, p90 = 300, max = 1024 }} }}\n"
                );
            }
        }
        let spec: crate::ScenarioSpec = toml::from_str(&text).unwrap();
        Scenario::from_spec(spec, Path::new("t.toml"), Path::new(".")).unwrap()
    }

    /// A trace of 20-s bursts at 30 requests a second, `off_s` apart on average.
    fn onoff(off_s: f64) -> String {
        format!(
            "trace = {{ kind = \"onoff\", rate_on = 30.0, rate_off = 0.05, mean_on_s = 20.0, mean_off_s = {off_s:.1}, \
                       prompt = {{ dist = \"lognormal\", median = 1500, p90 = 4000, max = 8192 }}, \
                       output = {{ dist = \"lognormal\", median = 10, p90 = 30, max = 64 }} }}"
        )
    }

    fn copies_of(s: &Scenario, t: u32) -> Vec<Vec<u32>> {
        s.deployment
            .replicas(TenantId(t))
            .map(|h| s.deployment.group(h.group).gpus.iter().map(|g| g.0).collect())
            .collect()
    }

    #[test]
    fn a_homes_kv_reservation_follows_its_load_and_its_model() {
        let s = scenario(2, &[("llama-2-13b", "[0]", 1.0, ""), ("llama-2-13b", "[1]", 4.0, "")]);
        let p = plan(&s, ReplicaMode::Both).unwrap();
        let (light, heavy) = (p.tenants[0].keep_kv_tokens, p.tenants[1].keep_kv_tokens);
        // 1 req/s (about 2/s in its busiest 10 s) of ~2k-token contexts, each held ~7 s
        // at the TPOT target: ~30k tokens, not a fixed 100k (80 GB without GQA).
        assert!(light > 10_000 && light < 50_000, "{light}");
        assert!(heavy > 2 * light, "{heavy} vs {light}");
        // An explicit request wins whatever the load.
        let s = scenario(2, &[("llama-2-13b", "[0]", 1.0, "keep_kv_tokens = 70000"), ("llama-3-8b", "[1]", 1.0, "")]);
        assert_eq!(plan(&s, ReplicaMode::Both).unwrap().tenants[0].keep_kv_tokens, 70_000);
    }

    #[test]
    fn a_tenant_whose_peak_fits_its_home_asks_no_copies() {
        let s = scenario(2, &[("llama-3-8b", "[0]", 0.5, ""), ("llama-3-8b", "[1]", 0.5, "")]);
        let loads = tenant_loads(&s);
        assert!(loads.iter().all(|l| l.rho_peak < RHO_FIT), "{loads:?}");
        let p = plan(&s, ReplicaMode::Both).unwrap();
        assert_eq!(p.deployment.homes.len(), 2, "no copies: {:?}", p.deployment.homes);
    }

    #[test]
    fn copies_go_to_the_idle_owner_never_to_the_busy_one() {
        // t0 is overloaded, t1 (GPU 1) is busy all the time, t2 (GPU 2) is nearly idle.
        let s = scenario(
            3,
            &[("llama-3-8b", "[0]", 14.0, ""), ("llama-3-8b", "[1]", 10.0, ""), ("llama-3-8b", "[2]", 0.2, "")],
        );
        let loads = tenant_loads(&s);
        assert!(loads[0].overflows() && loads[1].gpu_mean > OWNER_BUSY, "{loads:?}");
        assert!(loads[2].gpu_mean < OWNER_BUSY, "{loads:?}");
        for mode in [ReplicaMode::Serving, ReplicaMode::Both] {
            let p = plan(&s, mode).unwrap();
            for t in 0..3 {
                assert!(!copies_of(&p, t).contains(&vec![1]), "{mode:?}: a copy on the busy GPU 1");
            }
            assert!(copies_of(&p, 0).contains(&vec![2]), "{mode:?}: {:?}", p.deployment.homes);
            // The light tenant asks for nothing.
            assert!(copies_of(&p, 2).is_empty());
        }
    }

    #[test]
    fn a_model_no_serving_copy_fits_beside_gets_weight_only_layer_ranges() {
        // A 24B (48 GB) beside an 8B home keeps no useful KV: weights only, in ranges.
        let s = scenario(2, &[("mistral-small-24b", "[0]", 6.0, ""), ("llama-3-8b", "[1]", 0.3, "")]);
        assert!(copies_of(&plan(&s, ReplicaMode::Serving).unwrap(), 0).is_empty());
        let p = plan(&s, ReplicaMode::Both).unwrap();
        let c: Vec<_> = p.deployment.replicas(TenantId(0)).collect();
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(!c[0].serves);
        // Weight-only copies are left for the tenants with no serving copy.
        let s = scenario(2, &[("llama-3-8b", "[0]", 12.0, ""), ("llama-3-8b", "[1]", 0.3, "")]);
        let p = plan(&s, ReplicaMode::Both).unwrap();
        assert!(p.deployment.replicas(TenantId(0)).all(|h| h.serves));
    }

    #[test]
    fn a_tenant_whose_bursts_overflow_its_home_chooses_first() {
        // t0 (a 13B without GQA: the fewest KV tokens, so first in its tier) is busy but
        // keeps up; t1 queues a minute of work in 20-s bursts. The lender on GPU 2 has room
        // for one serving copy: the overflowing tenant gets it (and, t0 being away half
        // the time, another on t0's GPU).
        let bursts = onoff(100.0);
        let s = scenario(
            3,
            &[("llama-2-13b", "[0]", 1.6, ""), ("llama-3-8b", "[1]", 0.0, &bursts), ("llama-3-8b", "[2]", 0.2, "")],
        );
        let loads = tenant_loads(&s);
        assert!(loads[0].rho_peak > RHO_FIT && !loads[0].overflows(), "{loads:?}");
        assert!(loads[1].overflows(), "{loads:?}");
        let p = plan(&s, ReplicaMode::Serving).unwrap();
        assert!(copies_of(&p, 1).contains(&vec![2]), "{:?}", p.deployment.homes);
        assert!(copies_of(&p, 0).is_empty(), "{:?}", p.deployment.homes);
    }

    #[test]
    fn the_engines_cpu_time_is_in_its_own_load_not_in_what_it_leaves_guests() {
        let s = scenario(2, &[("llama-3-8b", "[0]", 8.0, ""), ("llama-3-8b", "[1]", 0.2, "")]);
        for l in tenant_loads(&s) {
            assert!(l.rho_mean > l.gpu_mean && l.rho_peak > l.gpu_peak, "{l:?}");
        }
    }

    #[test]
    fn a_gpu_whose_owner_bursts_past_it_takes_no_serving_copy() {
        // t0 is overloaded; t1 is idle on average but its bursts overflow GPU 1 (ON 20 s
        // at 30 req/s, OFF 200 s); t2 is steady and light.
        let bursts = onoff(200.0);
        let s = scenario(
            3,
            &[("llama-3-8b", "[0]", 14.0, ""), ("llama-3-8b", "[1]", 0.0, &bursts), ("llama-3-8b", "[2]", 0.2, "")],
        );
        let loads = tenant_loads(&s);
        assert!(loads[1].gpu_mean < OWNER_BUSY && loads[1].overflows(), "{loads:?}");
        for mode in [ReplicaMode::Serving, ReplicaMode::Both] {
            let p = plan(&s, mode).unwrap();
            let on_1 = |h: &TenantHome| p.deployment.group(h.group).gpus == [GpuId(1)];
            assert!(
                !p.deployment.homes.iter().any(|h| h.serves && !h.is_home && on_1(h)),
                "{mode:?}: a serving copy on the bursty owner's GPU: {:?}",
                p.deployment.homes
            );
            assert!(copies_of(&p, 0).contains(&vec![2]), "{mode:?}: {:?}", p.deployment.homes);
        }
    }

    #[test]
    fn copies_need_not_match_another_homes_tp_layout() {
        // An overloaded one-GPU tenant beside a light two-GPU home: its copy goes on one
        // GPU of that home (before, only homes of its own size could lend).
        let s = scenario(3, &[("llama-3-8b", "[0]", 14.0, ""), ("llama-3-8b", "[1, 2]", 0.2, "")]);
        for mode in [ReplicaMode::Serving, ReplicaMode::Both] {
            let p = plan(&s, mode).unwrap();
            let c = copies_of(&p, 0);
            assert!(!c.is_empty() && c.iter().all(|g| g.len() == 1 && g[0] != 0), "{mode:?}: {c:?}");
        }
        // An overloaded two-GPU tenant beside two light one-GPU homes: one copy spans both.
        let s = scenario(
            4,
            &[("llama-3-8b", "[0, 1]", 24.0, ""), ("llama-3-8b", "[2]", 0.2, ""), ("llama-3-8b", "[3]", 0.2, "")],
        );
        let p = plan(&s, ReplicaMode::Both).unwrap();
        assert_eq!(copies_of(&p, 0), vec![vec![2, 3]], "{:?}", p.deployment.homes);
    }

    #[test]
    fn a_gpu_no_one_owns_lends_and_a_tenant_never_copies_onto_its_own_gpus() {
        let s = scenario(3, &[("llama-3-8b", "[0]", 14.0, ""), ("llama-3-8b", "[1]", 10.0, "")]);
        for mode in [ReplicaMode::Serving, ReplicaMode::Both] {
            let p = plan(&s, mode).unwrap();
            assert!(copies_of(&p, 0).contains(&vec![2]), "{mode:?}: {:?}", p.deployment.homes);
            for t in 0..2u32 {
                let home = p.deployment.home(TenantId(t)).unwrap();
                let own = &p.deployment.group(home.group).gpus;
                let mut seen: Vec<u32> = own.iter().map(|g| g.0).collect();
                for c in copies_of(&p, t) {
                    assert!(
                        c.iter().all(|g| !seen.contains(g)),
                        "{mode:?}: t{t} copies overlap: {:?}",
                        p.deployment.homes
                    );
                    seen.extend(c);
                }
            }
        }
    }

    #[test]
    fn a_group_is_free_of_owners_only_when_each_is_away() {
        let s = scenario(
            4,
            &[("llama-3-8b", "[0]", 1.0, ""), ("llama-3-8b", "[1]", 1.0, ""), ("llama-3-8b", "[2, 3]", 1.0, "")],
        );
        let rho = [0.3, 0.4, 0.2];
        let g = |v: &[u32]| v.iter().map(|&x| GpuId(x)).collect::<Vec<_>>();
        // One owner's GPUs count once, however many of them the group takes.
        assert!((owners_busy(&s, &rho, &g(&[2, 3])) - 0.2).abs() < 1e-12);
        assert!((owners_busy(&s, &rho, &g(&[2])) - 0.2).abs() < 1e-12);
        // Two owners: free only when both are away, 0.7 x 0.6 of the time.
        assert!((owners_busy(&s, &rho, &g(&[0, 1])) - 0.58).abs() < 1e-12);
        assert!((owners_busy(&s, &rho, &g(&[0, 1, 2])) - (1.0 - 0.7 * 0.6 * 0.8)).abs() < 1e-12);
    }

    fn copy(layers: (u32, u32)) -> TenantHome {
        TenantHome {
            tenant: TenantId(0),
            group: slicesched_gmg::GroupId(1),
            layers,
            weight_bytes_per_gpu: 0,
            is_home: false,
            serves: false,
            kv_blocks: 0,
        }
    }

    #[test]
    fn successive_layer_ranges_cover_the_whole_model() {
        assert_eq!(least_covered_start(&[], TenantId(0), 40, 28), 0);
        // The second range takes the tail the first left uncovered.
        assert_eq!(least_covered_start(&[copy((0, 28))], TenantId(0), 40, 28), 12);
        // A third, shorter one: head and tail are covered once, the middle twice.
        assert_eq!(least_covered_start(&[copy((0, 28)), copy((12, 40))], TenantId(0), 40, 10), 0);
        // Another tenant's copies do not count.
        let mut other = copy((0, 28));
        other.tenant = TenantId(1);
        assert_eq!(least_covered_start(&[other], TenantId(0), 40, 28), 0);
    }
}
