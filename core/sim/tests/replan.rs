//! Copies that come and go (`copies.rs`, `--replan online`): a tenant's copies load
//! when its metered load wants them and its lender is quiet, drain and drop when the
//! load goes, and give their memory back when the lender's owner needs its KV; every
//! request still ends once, no GPU runs out of memory, and the run is as deterministic
//! (and the fast path as exact) as a static one.

mod common;
use common::*;
use slicesched_policy::ReplicaMode;
use slicesched_sim::{plan, replay, KvMigration, Replan, ReplayOptions, ReplayResult, Scenario};

/// Tenant `a` bursts (on/off) onto its GPU; `b`, on the other, is light, then (from
/// `b_late_s` on) sends long prompts of its own.
fn text(gpu: &str, a_model: &str, b_model: &str, b_rate: f64) -> String {
    text_with(gpu, a_model, b_model, b_rate, "")
}

/// [`text`] with more settings for `b`.
fn text_with(gpu: &str, a_model: &str, b_model: &str, b_rate: f64, b_extra: &str) -> String {
    format!(
        r#"
name = "replan"
seed = 5
duration_s = 240
drain_s = 120
[cluster]
[[cluster.nodes]]
gpu = "{gpu}"
gpus = 2
[[tenants]]
name = "a"
model = "{a_model}"
gpus = [0]
sla = {{ ttft_ms = 500, ttft_ms_per_1k = 150, tpot_ms = 60 }}
trace = {{ kind = "onoff", rate_on = 24.0, rate_off = 0.2, mean_on_s = 20.0, mean_off_s = 80.0, prompt = {{ dist = "uniform", min = 200, max = 3000 }}, output = {{ dist = "uniform", min = 20, max = 300 }} }}
[[tenants]]
name = "b"
model = "{b_model}"
gpus = [1]
{b_extra}
sla = {{ ttft_ms = 500, ttft_ms_per_1k = 150, tpot_ms = 60 }}
trace = {{ kind = "gamma", rate = {b_rate}, cv = 4.0, prompt = {{ dist = "uniform", min = 500, max = 6000 }}, output = {{ dist = "uniform", min = 50, max = 600 }} }}
"#
    )
}

/// `b` alternates a minute of heavy load with quiet ones: its average crosses the
/// planner's busy line.
fn shifting() -> String {
    text("H100-80GB", "llama-3-8b", "mistral-7b", 0.1).replace(
        r#"kind = "gamma", rate = 0.1, cv = 4.0"#,
        r#"kind = "onoff", rate_on = 5.0, rate_off = 0.1, mean_on_s = 60.0, mean_off_s = 100.0"#,
    )
}

fn planned(t: &str, mode: ReplicaMode) -> Scenario {
    let scn = plan(&scenario(t), mode).unwrap();
    assert!(scn.deployment.replicas(slicesched_gmg::TenantId(0)).next().is_some(), "the planner gave `a` a copy");
    scn
}

fn run_policy(scn: &Scenario, policy: &str, opts: ReplayOptions) -> ReplayResult {
    let mut p = slicesched_policy::builtin(policy).expect("built-in");
    replay(scn, p.as_mut(), slicesched_cost::CostModel::default_a100(), opts, &mut |_| {})
}

#[test]
fn copies_leave_a_lender_whose_owner_gets_busy_and_come_back() {
    // The copy of `a` on `b`'s GPU goes and returns with `b`'s load.
    let t = shifting();
    {
        let policy = "slice";
        let scn = planned(&t, ReplicaMode::Both);
        let on = run_policy(&scn, policy, ReplayOptions { replan: Replan::Online, ..checked() });
        sound(&on);
        let s = &on.summary.scheduling;
        assert_eq!(s.replan, "online");
        assert!(s.copies_dropped > 0 && s.copies_loaded > 0, "{policy}: {s:?}");
        assert!(s.copied_weights_gb > 0.0 && s.copy_load_ms > 0.0, "{policy}: {s:?}");
        let fixed = run_policy(&scn, policy, checked());
        sound(&fixed);
        let f = &fixed.summary.scheduling;
        assert_eq!((f.replan.as_str(), f.copies_loaded, f.copies_dropped), ("static", 0, 0));
    }
}

#[test]
fn an_owner_short_of_kv_takes_its_memory_back() {
    // `b` is Llama-2-7B (no GQA: half a megabyte of KV per token) asking for a small
    // guaranteed KV, so the planner lends its GPU; its long requests then need the
    // memory the copy of `a` took.
    let t = text_with("H100-80GB", "mistral-7b", "llama-2-7b", 0.5, "keep_kv_tokens = 4000")
        .replace("min = 500, max = 6000", "min = 1000, max = 3000")
        .replace("min = 50, max = 600", "min = 500, max = 1000");
    let scn = planned(&t, ReplicaMode::Serving);
    let r = run_policy(&scn, "pooled", ReplayOptions { replan: Replan::Online, ..checked() });
    sound(&r);
    let s = &r.summary.scheduling;
    assert!(s.copies_loaded > 0 && s.copies_dropped_for_memory > 0, "{s:?}");
}

#[test]
fn online_copies_are_deterministic_and_the_fast_path_exact() {
    let scn = planned(&shifting(), ReplicaMode::Both);
    let opts = |fast_path| ReplayOptions { replan: Replan::Online, fast_path, ..checked() };
    let (a, b) = (run_policy(&scn, "slice", opts(true)), run_policy(&scn, "slice", opts(true)));
    assert!(a.summary.scheduling.copies_dropped > 0, "{:?}", a.summary.scheduling);
    assert_eq!(without_timing(&a.summary), without_timing(&b.summary));
    let slow = run_policy(&scn, "slice", opts(false));
    assert!(a.fast_iterations > 0 && slow.fast_iterations == 0);
    assert_eq!(without_timing(&a.summary), without_timing(&slow.summary));
    let times = |r: &ReplayResult| r.records.iter().map(|x| (x.first_token_ns, x.finish_ns)).collect::<Vec<_>>();
    assert_eq!(times(&a), times(&slow));
}

#[test]
fn online_copies_and_kv_moves_together_keep_every_invariant() {
    let t = text("H100-80GB", "llama-2-13b", "mistral-7b", 0.5);
    for (policy, mode) in [("slice", ReplicaMode::Both), ("pooled", ReplicaMode::Serving)] {
        let scn = planned(&t, mode);
        let opts = ReplayOptions { replan: Replan::Online, kv_migration: KvMigration::Load, ..checked() };
        sound(&run_policy(&scn, policy, opts));
    }
}
