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
use slicesched_gmg::{Deployment, GroupId, TenantHome, TenantId};
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
    /// no request by themselves; on the former 7-14B bursty-8t they cost `slice` 2
    /// points of violations; where no serving copy fits, they are all a copy can be).
    pub weight_replica_fraction: f64,
    /// Most copies of one tenant, unless the tenant asks its own (`max_replicas`).
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
        if self.keep_kv_tokens > crate::scenario::MAX_KV_TOKENS {
            let max = crate::scenario::MAX_KV_TOKENS;
            return Err(format!("keep_kv_tokens must be at most {max}, got {}", self.keep_kv_tokens));
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
        // A lender's weight budget is split evenly among the tenants that may copy
        // weights onto it, so that each one's bursts can borrow from every lender
        // rather than a few lenders each: uncorrelated bursts rarely want the same
        // lender at once (bursty-8t at rate scale 4: 4.57% violations against 8.94%
        // with whole copies on three lenders per 24B tenant).
        let share: Vec<u64> = if serving {
            vec![u64::MAX; n]
        } else {
            let wanting = |g: usize| {
                let on_g = |t: &crate::scenario::TenantSetup| t.gpus.iter().any(|x| x.0 as usize == g);
                scn.tenants.iter().filter(|t| t.max_replicas > 0 && !on_g(t)).count().max(1) as u64
            };
            budget.iter().enumerate().map(|(g, &b)| b / wanting(g)).collect()
        };
        // A weight-only copy is the only help a model too large to serve from another
        // GPU can get: tenants without a serving copy take all their rounds first.
        let passes: Vec<Vec<&TenantHome>> = if serving {
            vec![homes.iter().collect()]
        } else {
            let served =
                |h: &&TenantHome| out.deployment.homes.iter().any(|r| r.tenant == h.tenant && r.serves && !r.is_home);
            let (some, none): (Vec<_>, Vec<_>) = homes.iter().partition(served);
            vec![none, some]
        };
        let rounds = scn.tenants.iter().map(|t| t.max_replicas).max().unwrap_or(0);
        for pass in &passes {
            for _round in 0..rounds {
                for &h in pass {
                    let t = &scn.tenants[h.tenant.index()];
                    if copies[h.tenant.index()] >= t.max_replicas {
                        continue;
                    }
                    let Some(copy) = next_copy(scn, &out.deployment, &homes, &budget, &share, h, serving) else {
                        continue;
                    };
                    for x in &out.deployment.group(copy.group).gpus {
                        budget[x.0 as usize] -= copy.weight_bytes_per_gpu.min(budget[x.0 as usize]);
                        guest_max_act[x.0 as usize] = guest_max_act[x.0 as usize].max(t.activation_reserve);
                    }
                    copies[h.tenant.index()] += 1;
                    out.deployment.homes.push(copy);
                }
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

/// The next copy of `h`'s tenant, if one fits: on another tenant's home group of the
/// same size (same TP layout), nearest first (same node), then the one with the most
/// budget left; whole, or (weight-only) the layer range that fits.
fn next_copy(
    scn: &Scenario,
    dep: &Deployment,
    homes: &[TenantHome],
    budget: &[u64],
    share: &[u64],
    h: &TenantHome,
    serving: bool,
) -> Option<TenantHome> {
    let t = &scn.tenants[h.tenant.index()];
    let tp = t.gpus.len();
    let layers = t.model.num_hidden_layers as u32;
    let node = scn.cluster.gpu(t.gpus[0]).node;
    let min_on = |v: &[u64], g: GroupId| dep.group(g).gpus.iter().map(|x| v[x.0 as usize]).min().unwrap_or(0);
    let left_on = |g: GroupId| min_on(budget, g);
    let mut targets: Vec<GroupId> = homes
        .iter()
        .filter(|o| o.tenant != h.tenant)
        .map(|o| o.group)
        .filter(|&g| dep.group(g).gpus.len() == tp && !dep.group(g).gpus.iter().any(|x| t.gpus.contains(x)))
        .filter(|&g| !dep.homes.iter().any(|r| r.tenant == h.tenant && r.group == g))
        .collect();
    targets.sort();
    targets.dedup();
    let target = targets
        .into_iter()
        .min_by_key(|&g| (scn.cluster.gpu(dep.group(g).gpus[0]).node != node, std::cmp::Reverse(left_on(g)), g))?;
    let left = left_on(target).min(min_on(share, target));
    let whole = t.model.weight_bytes_per_gpu(tp as u32);
    let (range, bytes) = if serving {
        // A serving copy needs room for a useful KV cache too: a third of the budget
        // stays for it.
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
        group: target,
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

    fn copy(layers: (u32, u32)) -> TenantHome {
        TenantHome {
            tenant: TenantId(0),
            group: GroupId(1),
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
