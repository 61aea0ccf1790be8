//! Deployment planner: copies of tenants' weights in other GPUs' free memory.
//!
//! Besides each tenant's home (its container), a policy that can use them gets
//! replicas: `Weights` replicas (whole models or layer ranges, no KV cache) let an
//! operator-level policy run a tenant's GEMMs elsewhere; `Serving` replicas (whole
//! models with their own KV cache and engine) let a request-level policy route whole
//! requests. Replicas only take memory that would otherwise have gone to the host's KV
//! cache, and at most `replica_memory_fraction` of it, so no tenant's KV is starved.

use crate::scenario::{size_kv_caches, Scenario, ScenarioError};
use serde::{Deserialize, Serialize};
use slicesched_gmg::{TenantHome, TenantId};
use slicesched_hw::GpuId;
pub use slicesched_policy::ReplicaMode;

/// Planner knobs (`[planner]` in a scenario).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerSpec {
    /// Most of a GPU's KV memory that other tenants' replicas may take.
    pub replica_memory_fraction: f64,
    /// For a policy that uses both kinds, the share of what serving copies leave of
    /// that budget weight-only copies may take (they cost the host KV cache and serve
    /// no request by themselves; on bursty-8t they cost `slice` 2 points of violations).
    pub weight_replica_fraction: f64,
    pub max_replicas_per_tenant: u32,
    /// Allow replicas of a layer range when the whole model does not fit.
    pub layer_ranges: bool,
    /// Activation memory kept for borrowed ops on a GPU hosting weight replicas, in
    /// units of the largest guest's activation reserve.
    pub guest_reserve_factor: f64,
    /// KV-cache tokens every home tenant keeps whatever replicas want (so a tenant
    /// with a large KV footprint is not starved to make room for others' weights),
    /// unless the tenant asks its own (`keep_kv_tokens` in `[[tenants]]`).
    pub keep_kv_tokens: u64,
}

impl Default for PlannerSpec {
    fn default() -> Self {
        Self {
            replica_memory_fraction: 0.75,
            weight_replica_fraction: 0.0,
            max_replicas_per_tenant: 3,
            layer_ranges: true,
            guest_reserve_factor: 4.0,
            keep_kv_tokens: 100_000,
        }
    }
}

impl PlannerSpec {
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=0.9).contains(&self.replica_memory_fraction) {
            return Err(format!("replica_memory_fraction must be in [0, 0.9], got {}", self.replica_memory_fraction));
        }
        if !(0.0..=1.0).contains(&self.weight_replica_fraction) {
            return Err(format!("weight_replica_fraction must be in [0, 1], got {}", self.weight_replica_fraction));
        }
        if !(self.guest_reserve_factor.is_finite() && self.guest_reserve_factor >= 0.0) {
            return Err("guest_reserve_factor must be non-negative".into());
        }
        Ok(())
    }
}

/// The scenario with replicas added for `mode` and KV caches re-sized around them.
pub fn plan(scn: &Scenario, mode: ReplicaMode) -> Result<Scenario, ScenarioError> {
    let mut out = scn.clone();
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
            let free = scn.kv_bytes_on(gpu);
            let keep: u64 = scn.tenants.iter().filter(|t| t.gpus.contains(&gpu)).map(|t| t.keep_bytes()).sum();
            ((free as f64 * spec.replica_memory_fraction) as u64).min(free.saturating_sub(keep))
        })
        .collect();
    let mut guest_max_act = vec![0u64; n];
    let mut homes: Vec<TenantHome> = scn.deployment.homes.iter().filter(|h| h.is_home).cloned().collect();
    // The tenant whose home holds the fewest KV tokens picks first: a copy's KV cache
    // is worth most to a KV-bound tenant (a 13B without GQA holds a sixth of the tokens
    // of an 8B with it in the same memory).
    homes.sort_by_key(|h| (scn.tenants[h.tenant.index()].kv_blocks, h.tenant));
    let mut copies = vec![0u32; scn.tenants.len()];
    // Serving copies first, for every policy that routes requests, so an operator-level
    // policy (`Both`) gets the same serving copies as a request-level one (`Serving`);
    // weight-only copies then take only what serving copies left.
    let phases: &[bool] = match mode {
        ReplicaMode::Serving => &[true],
        ReplicaMode::Both => &[true, false],
        _ => &[false],
    };
    for &serving in phases {
        if !serving && mode == ReplicaMode::Both {
            budget.iter_mut().for_each(|b| *b = (*b as f64 * spec.weight_replica_fraction) as u64);
        }
        for round in 0..spec.max_replicas_per_tenant {
            for h in &homes {
                let t = &scn.tenants[h.tenant.index()];
                if copies[h.tenant.index()] >= spec.max_replicas_per_tenant {
                    continue;
                }
                let tp = t.gpus.len();
                let layers = t.model.num_hidden_layers as u32;
                // Targets: other tenants' home groups of the same size (same TP layout),
                // nearest first (same node), then most budget left.
                let node = scn.cluster.gpu(t.gpus[0]).node;
                let mut targets: Vec<_> = homes
                    .iter()
                    .filter(|o| o.tenant != h.tenant)
                    .map(|o| out.deployment.group(o.group).clone())
                    .filter(|g| g.gpus.len() == tp && !g.gpus.iter().any(|x| t.gpus.contains(x)))
                    .filter(|g| !out.deployment.homes.iter().any(|r| r.tenant == h.tenant && r.group == g.id))
                    .collect();
                targets.sort_by_key(|g| g.id);
                targets.dedup_by_key(|g| g.id);
                targets.sort_by_key(|g| {
                    let left = g.gpus.iter().map(|x| budget[x.0 as usize]).min().unwrap_or(0);
                    (scn.cluster.gpu(g.gpus[0]).node != node, std::cmp::Reverse(left), g.id)
                });
                let Some(target) = targets.first() else { continue };
                let left = target.gpus.iter().map(|x| budget[x.0 as usize]).min().unwrap_or(0);
                let whole = t.model.weight_bytes_per_gpu(tp as u32);
                let (range, bytes) = if serving {
                    // A serving copy needs room for a useful KV cache too: a third of
                    // the budget stays for it.
                    if whole > left / 3 * 2 {
                        continue;
                    }
                    ((0, layers), whole)
                } else if whole <= left {
                    ((0, layers), whole)
                } else if spec.layer_ranges {
                    let per_layer = whole / (layers as u64 + 2);
                    let fit = (left / per_layer.max(1)).min(layers as u64) as u32;
                    if fit < layers / 4 || fit == 0 {
                        continue;
                    }
                    // Successive replicas of one tenant cover different layers.
                    let start = (round * fit) % (layers - fit + 1);
                    ((start, start + fit), per_layer * fit as u64)
                } else {
                    continue;
                };
                for x in &target.gpus {
                    budget[x.0 as usize] -= bytes.min(budget[x.0 as usize]);
                    guest_max_act[x.0 as usize] = guest_max_act[x.0 as usize].max(t.activation_reserve);
                }
                copies[h.tenant.index()] += 1;
                out.deployment.homes.push(TenantHome {
                    tenant: h.tenant,
                    group: target.id,
                    layers: range,
                    weight_bytes_per_gpu: bytes,
                    is_home: false,
                    serves: serving,
                    kv_blocks: 0,
                });
            }
        }
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
