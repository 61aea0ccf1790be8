//! Scenario files: the shipped ones load; bad ones are refused with the field named.

mod common;
use common::*;
use slicesched_sim::Scenario;
use std::path::Path;

fn shipped(name: &str) -> Scenario {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(name);
    Scenario::from_file(&p).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn shipped_scenarios_load() {
    let a = shipped("azure-code-4t.toml");
    assert_eq!(a.tenants.len(), 4);
    assert_eq!(a.cluster.len(), 8);
    assert!(a.cluster.gpus.iter().all(|g| g.sku.name == "H100-80GB"));
    // Four time-shifted copies of the 8,819-request trace (a few rows fall out of the
    // 3,420 s window at the wrap-around).
    assert!(a.requests.len() > 4 * 8_500, "{}", a.requests.len());
    let b = shipped("bursty-8t.toml");
    assert_eq!(b.tenants.len(), 8);
    let models: std::collections::BTreeSet<_> = b.tenants.iter().map(|t| t.model.name.clone()).collect();
    assert!(models.len() >= 4, "mixed models: {models:?}");
    assert_eq!(b.tenants.iter().filter(|t| t.model.parameters() > 20_000_000_000).count(), 2);
    shipped("smoke.toml");
    let m = shipped("moe-3t.toml");
    let moe: Vec<_> = m.tenants.iter().filter_map(|t| t.model.moe.map(|x| (t.name.as_str(), x.experts))).collect();
    assert_eq!(moe, [("assistant-mixtral", 8)]);
}

const BASE: &str = r#"
name = "x"
seed = 1
duration_s = 10
[cluster]
[[cluster.nodes]]
gpu = "A100-80GB"
gpus = 2
[[tenants]]
name = "a"
model = "MODEL"
gpus = GPUS
sla = { ttft_ms = 500, tpot_ms = 50 }
trace = { kind = "poisson", rate = 1.0 }
"#;

fn with(model: &str, gpus: &str) -> String {
    BASE.replace("MODEL", model).replace("GPUS", gpus)
}

/// Tenant `a` on GPU 0 and tenant `b` on GPU 1, each a (model, extra lines) pair.
fn two_tenants(a: (&str, &str), b: (&str, &str)) -> String {
    let mut text = with(a.0, &format!("[0]\n{}", a.1));
    let second = with(b.0, &format!("[1]\n{}", b.1));
    text.push_str(&second[second.find("[[tenants]]").unwrap()..].replace("name = \"a\"", "name = \"b\""));
    text
}

#[test]
fn unknown_model_is_named() {
    let e = scenario_err(&with("gpt-9", "[0]"));
    assert!(e.contains("bad.toml") && e.contains("tenants[0] (a).model") && e.contains("gpt-9"), "{e}");
}

#[test]
fn tenant_without_gpus() {
    let e = scenario_err(&with("llama-2-7b", "[]"));
    assert!(e.contains("tenants[0] (a).gpus") && e.contains("no GPUs"), "{e}");
}

#[test]
fn gpu_out_of_range() {
    let e = scenario_err(&with("llama-2-7b", "[5]"));
    assert!(e.contains("GPU 5 does not exist"), "{e}");
}

#[test]
fn deployment_that_does_not_fit() {
    // 70B in bf16 is ~138 GB: it cannot live on one 80 GB GPU.
    let e = scenario_err(&with("llama-2-70b", "[0]"));
    assert!(e.contains("GPU 0") && e.contains("GB") && e.contains("a"), "{e}");
}

#[test]
fn tp_that_does_not_divide_the_heads() {
    let text = with("llama-2-7b", "[0, 1]").replace("gpus = 2", "gpus = 3").replace("[0, 1]", "[0, 1, 2]");
    let e = scenario_err(&text);
    assert!(e.contains("split 3 ways"), "{e}");
}

#[test]
fn bad_sla() {
    let e = scenario_err(&with("llama-2-7b", "[0]").replace("tpot_ms = 50", "tpot_ms = -1"));
    assert!(e.contains("sla") && e.contains("tpot_ms"), "{e}");
}

#[test]
fn unknown_fields_and_syntax_errors_point_at_the_line() {
    let e = scenario_err(&with("llama-2-7b", "[0]").replace("seed = 1", "seed = 1\ncolour = 3"));
    assert!(e.contains("colour"), "{e}");
    let e = scenario_err(&with("llama-2-7b", "[0]").replace("seed = 1", "seed = = 1"));
    assert!(e.contains("line 3"), "{e}");
}

#[test]
fn bad_trace_is_named() {
    let e = scenario_err(
        &with("llama-2-7b", "[0]").replace(r#"kind = "poisson", rate = 1.0"#, r#"kind = "azure", path = "nope.csv""#),
    );
    assert!(e.contains("tenants[0] (a).trace") && e.contains("nope.csv"), "{e}");
}

#[test]
fn duplicate_tenant_names() {
    let mut text = with("llama-2-7b", "[0]");
    let second = text[text.find("[[tenants]]").unwrap()..].replace("[0]", "[1]");
    text.push_str(&second);
    let e = scenario_err(&text);
    assert!(e.contains("tenants[1].name") && e.contains("not unique"), "{e}");
}

#[test]
fn a_tenants_kv_request_bounds_the_replicas_on_its_gpu() {
    use slicesched_sim::{plan, ReplicaMode};
    // A busy 13B on GPU 0 and a light 8B (asking `keep`) on GPU 1, both 80 GB.
    let planned = |keep: &str| {
        let text = two_tenants(("llama-2-13b", ""), ("llama-3-8b", keep)).replacen("rate = 1.0", "rate = 6.0", 1);
        plan(&scenario(&text), ReplicaMode::Serving).unwrap()
    };
    // Without a request the 8B keeps what its load holds (1 request/s of short outputs:
    // a few thousand tokens), which leaves room for a serving copy of the 13B (26 GB).
    let default = planned("");
    assert!(default.tenants[1].keep_kv_tokens < 20_000, "{}", default.tenants[1].keep_kv_tokens);
    assert!(default.deployment.replicas(slicesched_gmg::TenantId(0)).any(|h| h.serves));
    // Asking for 300k tokens (38 GB) keeps that memory for the 8B's own KV cache.
    let kept = planned("keep_kv_tokens = 300000");
    assert_eq!(kept.tenants[1].keep_kv_tokens, 300_000);
    assert_eq!(kept.deployment.replicas(slicesched_gmg::TenantId(0)).count(), 0);
    assert!(kept.tenants[1].kv_blocks as u64 * 16 >= 300_000, "{}", kept.tenants[1].kv_blocks);
}

/// `bursty-8t` is the case where whole replicas do not fit: no 24B serving copy for a
/// request-level policy, while weight-only copies give every 24B tenant all its layers
/// somewhere else for an operator-level one. At four times its rate (where goodput is
/// decided) the 24B tenants' bursts need several GPUs and the light ones' fit their own.
#[test]
fn bursty_8t_fits_weights_of_its_large_models_but_no_serving_copies() {
    use slicesched_gmg::TenantId;
    use slicesched_sim::{plan, ReplicaMode};
    let b = shipped("bursty-8t.toml").with_rate_scale(4.0);
    let large: Vec<_> = (0..b.tenants.len())
        .filter(|&i| b.tenants[i].model.parameters() > 20_000_000_000)
        .map(|i| TenantId(i as u32))
        .collect();
    let serving = plan(&b, ReplicaMode::Serving).unwrap();
    for &t in &large {
        assert_eq!(serving.deployment.replicas(t).count(), 0, "{}", b.tenants[t.index()].name);
    }
    let both = plan(&b, ReplicaMode::Both).unwrap();
    for &t in &large {
        let layers = b.tenants[t.index()].model.num_hidden_layers as u32;
        let mut covered = vec![false; layers as usize];
        for h in both.deployment.replicas(t) {
            assert!(!h.serves, "{}: a serving copy", b.tenants[t.index()].name);
            covered[h.layers.0 as usize..h.layers.1 as usize].iter_mut().for_each(|c| *c = true);
        }
        assert!(covered.iter().all(|&c| c), "{}: layers left uncovered", b.tenants[t.index()].name);
    }
    // Each lender's budget is shared: every light GPU holds a range of both large models.
    for (i, t) in b.tenants.iter().enumerate().filter(|(i, _)| !large.contains(&TenantId(*i as u32))) {
        for &l in &large {
            let on = both.deployment.replicas(l).filter(|h| both.deployment.group(h.group).gpus == t.gpus).count();
            assert_eq!(on, 1, "{} on {}'s GPU (tenant {i})", b.tenants[l.index()].name, t.name);
        }
    }
    // The light tenants ask no copies of their own.
    for (i, t) in b.tenants.iter().enumerate().filter(|(i, _)| !large.contains(&TenantId(*i as u32))) {
        assert_eq!(both.deployment.replicas(TenantId(i as u32)).count(), 0, "{}", t.name);
    }
    // The KV reservations hold: no home's cache drops below what its load needs (or,
    // where that is more than it ever held, three quarters of what it held), to a block.
    for (t, t0) in both.tenants.iter().zip(&b.tenants) {
        let floor = t.keep_kv_tokens.min(t0.kv_blocks as u64 * 16 / 4 * 3);
        assert!(
            (t.kv_blocks as u64 + 1) * 16 >= floor,
            "{}: {} blocks, keep {}",
            t.name,
            t.kv_blocks,
            t.keep_kv_tokens
        );
    }
}

#[test]
fn only_a_tenant_whose_load_outgrows_its_home_gets_copies() {
    use slicesched_sim::{plan, ReplicaMode};
    // Tenant a at `a`, b at `b` requests/s.
    let planned = |a: &str, b: &str| {
        let text = two_tenants(("llama-3-8b", ""), ("llama-3-8b", ""))
            .replacen("rate = 1.0", &format!("rate = {a}"), 1)
            .replacen("rate = 1.0", &format!("rate = {b}"), 1);
        let s = scenario(&text);
        let loads = slicesched_sim::tenant_loads(&s);
        (plan(&s, ReplicaMode::Serving).unwrap(), loads)
    };
    // Both light (their peaks keep their A100 busy under half the time): nobody asks.
    let (light, loads) = planned("0.2", "0.2");
    assert!(loads.iter().all(|l| l.rho_peak < slicesched_sim::RHO_FIT), "{loads:?}");
    assert_eq!(light.deployment.homes.len(), 2);
    // Tenant a at 20 requests/s of ~2k-token prompts outgrows its A100; b still asks none.
    let (busy, _) = planned("20.0", "0.2");
    assert!(busy.deployment.replicas(slicesched_gmg::TenantId(0)).count() == 1, "{:?}", busy.deployment.homes);
    assert_eq!(busy.deployment.replicas(slicesched_gmg::TenantId(1)).count(), 0);
}

#[test]
fn every_draw_of_a_scenario_can_be_written_as_its_seed() {
    // A sweep lists its draws' seeds; a user copies one into a scenario file to replay
    // that draw alone, and TOML integers are signed 64-bit.
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/smoke.toml");
    let text = std::fs::read_to_string(&p).unwrap();
    for base in [0, 7, i64::MAX as u64, u64::MAX] {
        let draws: Vec<u64> = (0..8).map(|k| slicesched_sim::draw_seed(base, k)).collect();
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert_eq!(distinct.len(), draws.len(), "{draws:?}");
        for (k, &seed) in draws.iter().enumerate().skip(1) {
            let spec: slicesched_sim::ScenarioSpec =
                toml::from_str(&text.replace("\nseed = 7\n", &format!("\nseed = {seed}\n")))
                    .unwrap_or_else(|e| panic!("draw {k} of {base}: seed {seed}: {e}"));
            assert_eq!(spec.seed, seed);
        }
    }
    assert_eq!(slicesched_sim::draw_seed(7, 0), 7, "draw 0 is the file's own");
}
