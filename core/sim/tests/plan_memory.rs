//! The planner never plans past a GPU's memory: on random clusters, tenants and loads,
//! every GPU's weights, KV caches, activation reserves and guest reserve fit in what
//! serving may use, and every home keeps a KV cache.

mod common;
use common::*;
use proptest::prelude::*;
use slicesched_sim::{plan, plan_ordered, PhaseOrder, ReplicaMode};

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
        // Every candidate the what-if may keep (`choose_plan`): each phase order of an
        // operator-level plan, and the request- and weight-only plans.
        let plans = PhaseOrder::ALL
            .iter()
            .map(|&o| (ReplicaMode::Both, o))
            .chain([(ReplicaMode::Serving, PhaseOrder::TierFirst), (ReplicaMode::Weights, PhaseOrder::TierFirst)]);
        for (mode, order) in plans {
            let cost = slicesched_cost::CostModel::default_a100();
            let p = plan_ordered(&base, mode, cost, order).expect("a scenario that loads plans");
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
                prop_assert!(used <= usable, "{mode:?} {order:?}: GPU {g} plans {used} of {usable} bytes\n{text}");
            }
            for (i, t) in p.tenants.iter().enumerate() {
                prop_assert!(t.kv_blocks > 0, "{mode:?} {order:?}: {} has no KV cache", t.name);
                let home = p.deployment.home(slicesched_gmg::TenantId(i as u32)).unwrap();
                prop_assert_eq!(home.kv_blocks, t.kv_blocks);
            }
        }
    }
}

/// A serving copy keeps the KV room it was placed with: weight-only copies placed after
/// it do not take it. In gen-10 of scenarios/family at rate scale 1.6709 the 7B code
/// tenant's serving copies went to the 70B's GPUs and the 34B's weight ranges after them
/// took what the copies' KV was judged on: 9,872 tokens a copy, and the 70B's home fell
/// to 110,704 tokens of the 125,460 its load keeps (`slice` 11.5% late there, `pooled`
/// with the same serving copies and no ranges 8.8%).
#[test]
fn a_serving_copy_keeps_its_kv_room() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/family/gen-10.toml");
    let scn = slicesched_sim::Scenario::from_file_for(&path, None).unwrap().with_rate_scale(1.6709);
    let p = plan(&scn, ReplicaMode::Both).unwrap();
    for h in p.deployment.homes.iter() {
        let t = &p.tenants[h.tenant.index()];
        let tokens = h.kv_blocks as u64 * t.engine.block_size as u64;
        if h.is_home {
            assert!(tokens >= t.keep_kv_tokens, "{}: home KV {tokens} under the {} it keeps", t.name, t.keep_kv_tokens);
        } else if h.serves {
            // Room for half its weights' bytes of KV, less the host's split: tens of
            // thousands of a 7B's tokens, not a few requests' (26,848 each since the
            // copies' guest reserves are booked after every phase and the 34B's ranges
            // fit beside them again; 9,872 with the bug).
            assert!(tokens >= 20_000, "{}'s serving copy: {tokens} tokens of KV", t.name);
        }
    }
}

/// An operator-level policy gets the serving copies a request-level one gets: their guest
/// reserves are booked after every phase, where room is left. Booked at once, on gen-09
/// of scenarios/family at rate scale 6.79, they took the memory of the next serving
/// copies, and the bursty 7B and the long-context 14B (both overflowing their homes) got
/// three serving copies under `slice` where `pooled` got six.
#[test]
fn serving_copies_do_not_wait_for_guest_reserves() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/family/gen-09.toml");
    let scn = slicesched_sim::Scenario::from_file_for(&path, None).unwrap().with_rate_scale(6.79);
    let serving = |mode| {
        let p = plan(&scn, mode).unwrap();
        let mut v: Vec<(u32, u32)> =
            p.deployment.homes.iter().filter(|h| !h.is_home && h.serves).map(|h| (h.tenant.0, h.group.0)).collect();
        v.sort_unstable();
        v
    };
    let (both, pooled) = (serving(ReplicaMode::Both), serving(ReplicaMode::Serving));
    assert_eq!(pooled.len(), 6, "{pooled:?}");
    assert_eq!(both, pooled);
}
