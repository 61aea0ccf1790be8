//! The planner never plans past a GPU's memory: on random clusters, tenants and loads,
//! every GPU's weights, KV caches, activation reserves and guest reserve fit in what
//! serving may use, and every home keeps a KV cache.

mod common;
use common::*;
use proptest::prelude::*;
use slicesched_sim::{plan, ReplicaMode};

const MODELS: &[&str] = &["llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "llama-2-13b", "mistral-small-24b"];

/// A scenario of `tenants` (model index, TP 1 or 2, rate, bursty) packed onto H100s in
/// order, one home per group; None when they need more GPUs than `gpus`.
fn text(gpus: u32, tenants: &[(usize, u32, f64, bool)]) -> Option<String> {
    let mut t = format!(
        "name = \"p\"\nseed = 5\nduration_s = 120\n[cluster]\n[[cluster.nodes]]\ngpu = \"H100-80GB\"\ngpus = {gpus}\n"
    );
    let mut next = 0u32;
    for (i, &(m, tp, rate, bursty)) in tenants.iter().enumerate() {
        if next + tp > gpus {
            return None;
        }
        let homes: Vec<String> = (next..next + tp).map(|g| g.to_string()).collect();
        next += tp;
        let trace = if bursty {
            format!("{{ kind = \"onoff\", rate_on = {}, rate_off = 0.1, mean_on_s = 10, mean_off_s = 30 }}", rate * 3.0)
        } else {
            format!("{{ kind = \"poisson\", rate = {rate} }}")
        };
        t += &format!(
            "[[tenants]]\nname = \"t{i}\"\nmodel = \"{}\"\ngpus = [{}]\nsla = {{ ttft_ms = 400, tpot_ms = 50 }}\ntrace = {trace}\n",
            MODELS[m],
            homes.join(", ")
        );
    }
    Some(t)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_plan_exceeds_a_gpus_memory(
        gpus in 2u32..=8,
        tenants in prop::collection::vec((0..MODELS.len(), 1u32..=2, 0.05f64..30.0, any::<bool>()), 2..=6),
    ) {
        let Some(text) = text(gpus, &tenants) else { return Ok(()) };
        let base = scenario(&text);
        for mode in [ReplicaMode::Serving, ReplicaMode::Both, ReplicaMode::Weights] {
            let p = plan(&base, mode).expect("a scenario that loads plans");
            for (g, gpu) in p.cluster.gpus.iter().enumerate() {
                let id = slicesched_hw::GpuId(g as u32);
                let usable = gpu.sku.memory - p.unusable_bytes(gpu.sku.memory);
                let acts: u64 = p
                    .deployment
                    .homes
                    .iter()
                    .filter(|h| h.serves && p.deployment.group(h.group).gpus.contains(&id))
                    .map(|h| p.tenants[h.tenant.index()].activation_reserve)
                    .sum();
                let used = p.deployment.weight_bytes_on(id) + p.kv_bytes_on(id) + acts + p.guest_reserve[g];
                prop_assert!(used <= usable, "{mode:?}: GPU {g} plans {used} of {usable} bytes\n{text}");
            }
            for (i, t) in p.tenants.iter().enumerate() {
                prop_assert!(t.kv_blocks > 0, "{mode:?}: {} has no KV cache", t.name);
                let home = p.deployment.home(slicesched_gmg::TenantId(i as u32)).unwrap();
                prop_assert_eq!(home.kv_blocks, t.kv_blocks);
            }
        }
    }
}
