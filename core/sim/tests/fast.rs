//! The fast path (an iteration as one event where the policy has no choice) gives the
//! per-op path's results exactly, and is taken only where it may be.

mod common;
use common::*;
use proptest::prelude::*;
use slicesched_cost::CpuOverhead;
use slicesched_sim::{plan, OpWindow, ReplayOptions, ReplayResult, Scenario};

fn replay(scn: &Scenario, policy: &str, opts: ReplayOptions) -> ReplayResult {
    let mut p = slicesched_policy::builtin(policy).expect("built-in");
    let scn = plan(scn, p.replicas()).expect("planner");
    slicesched_sim::replay(&scn, p.as_mut(), slicesched_cost::CostModel::default_a100(), opts, &mut |_| {})
}

/// Replays both ways; asserts every output is the same; returns the fast run.
fn assert_same(scn: &Scenario, policy: &str, opts: ReplayOptions) -> Result<ReplayResult, TestCaseError> {
    let fast = replay(scn, policy, ReplayOptions { fast_path: true, ..opts.clone() });
    let slow = replay(scn, policy, ReplayOptions { fast_path: false, ..opts });
    prop_assert_eq!(slow.fast_iterations, 0);
    prop_assert_eq!(without_timing(&fast.summary), without_timing(&slow.summary));
    prop_assert_eq!(serde_json::to_value(&fast.records).unwrap(), serde_json::to_value(&slow.records).unwrap());
    prop_assert_eq!(serde_json::to_value(&fast.series).unwrap(), serde_json::to_value(&slow.series).unwrap());
    prop_assert_eq!(&fast.busy, &slow.busy);
    prop_assert_eq!(&fast.ops, &slow.ops);
    prop_assert_eq!(fast.dependency_violations, slow.dependency_violations);
    Ok(fast)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn the_fast_path_gives_the_per_op_results(
        seed in 0u64..1000,
        tenants in proptest::collection::vec((0usize..4, 0u8..3, 0.5f64..5.0, 1u32..3000, 1u32..200), 1..4),
        budget in prop::sample::select(vec![512u32, 2048, 8192]),
        policy in prop::sample::select(vec!["dedicated", "pooled", "slice"]),
        scale in prop::sample::select(vec![0.25f64, 1.0, 3.0]),
        busy in any::<bool>(),
        window in prop::option::of((0u64..6_000, 1u64..2_000)),
        no_cpu in any::<bool>(),
    ) {
        let text = random_scenario("fast", seed, (6, 20), "H100-80GB", budget, &tenants);
        let spec: slicesched_sim::ScenarioSpec = toml::from_str(&text).unwrap();
        let Ok(scn) = Scenario::from_spec(spec, std::path::Path::new("f.toml"), std::path::Path::new(".")) else {
            return Ok(());
        };
        let scn = scn.with_rate_scale(scale);
        // A recorded window (replayed up to its end, as timelines are) makes the
        // iterations around it run op by op.
        let (record_ops, stop_after_ns) = match window {
            Some((from_ms, len_ms)) => {
                let w = OpWindow::once(from_ms * 1_000_000, (from_ms + len_ms) * 1_000_000, 5_000);
                (Some(w), Some(w.to_ns))
            }
            None => (None, None),
        };
        // Without CPU overhead a batch launches inside the call that scheduled it, which
        // then asks the policy to admit another.
        let cpu_overhead = if no_cpu { CpuOverhead::ZERO } else { CpuOverhead::default_a100() };
        let opts = ReplayOptions { record_busy: busy, record_ops, stop_after_ns, cpu_overhead, ..checked() };
        let fast = assert_same(&scn, policy, opts)?;
        prop_assert_eq!(fast.dependency_violations, 0);
    }
}

/// Two tenants on GPUs of their own: the fast path takes nearly every iteration.
#[test]
fn dedicated_runs_iterations_as_one_event_with_the_same_results() {
    let scn = scenario(TWO_TENANTS);
    let fast = assert_same(&scn, "dedicated", ReplayOptions { record_busy: true, ..ReplayOptions::default() }).unwrap();
    assert!(fast.summary.iterations > 100);
    assert_eq!(fast.fast_iterations, fast.summary.iterations, "no GPU is shared, nothing can borrow");
}

/// A policy that can borrow is asked about every op: no fast path, even where the
/// group has no lender, and the same result with the switch either way.
/// Two 7-8B tenants with a GPU each on H100s: room for each other's weights.
const LENDERS: &str = r#"
name = "lenders"
seed = 5
duration_s = 20
[cluster]
[[cluster.nodes]]
gpu = "H100-80GB"
gpus = 2
[[tenants]]
name = "a"
model = "llama-3-8b"
gpus = [0]
sla = { ttft_ms = 300, tpot_ms = 40 }
trace = { kind = "gamma", rate = 7.0, cv = 4.0 }
[[tenants]]
name = "b"
model = "mistral-7b"
gpus = [1]
sla = { ttft_ms = 300, tpot_ms = 40 }
trace = { kind = "poisson", rate = 1.0 }
"#;

/// [`LENDERS`], where only `a`'s load asks for copies (the planner gives `b`, whose home
/// has room to spare, none): `a`'s home GPU is its alone (fast), `b`'s GPU also serves
/// `a`'s copy (op by op).
fn one_copy() -> String {
    LENDERS.to_string()
}

#[test]
fn a_policy_that_can_borrow_never_takes_the_fast_path() {
    let scn = scenario(LENDERS);
    for policy in ["timeslice", "mps"] {
        let mut p = slicesched_policy::builtin(policy).unwrap();
        let planned = plan(&scn, p.replicas()).unwrap();
        assert!(!p.home_only() && !p.home_when_free(), "{policy}");
        let r = slicesched_sim::replay(
            &planned,
            p.as_mut(),
            slicesched_cost::CostModel::default_a100(),
            ReplayOptions::default(),
            &mut |_| {},
        );
        assert_eq!(r.fast_iterations, 0, "{policy}");
        assert!(r.summary.iterations > 0);
    }
}

/// `slice` keeps an op home whenever its home is free: an iteration nothing else can
/// reach (no other instance of its tenant or of a tenant with weights on its GPUs has
/// work, and none of their requests arrives meanwhile) runs as one event, the rest op
/// by op, borrowing where it may, with the same results either way.
#[test]
fn slice_runs_iterations_nothing_can_reach_as_one_event() {
    let scn = scenario(LENDERS);
    let slice = assert_same(&scn, "slice", ReplayOptions { record_busy: true, ..ReplayOptions::default() }).unwrap();
    let reps = &slice.summary.scheduling.replicas;
    assert!(!reps.is_empty(), "a lender is there to borrow from");
    assert!(slice.summary.scheduling.borrowed_ops > 0 || reps.iter().any(|r| r.3), "{reps:?}");
    assert!(slice.fast_iterations > 0 && slice.fast_iterations < slice.summary.iterations);
}

/// Under `pooled` a serving replica on another tenant's GPU shares it: iterations
/// there run op by op while the other instance has work, the rest fast (among them the
/// home of the tenant with a copy elsewhere, whose GPU its `route` reads
/// mid-iteration), and the results are the same.
#[test]
fn a_shared_gpu_runs_op_by_op_while_its_other_instance_has_work() {
    let scn = scenario(&one_copy());
    let fast = assert_same(&scn, "pooled", ReplayOptions::default()).unwrap();
    let reps = &fast.summary.scheduling.replicas;
    assert!(reps.iter().any(|r| r.3), "a serving copy: {reps:?}");
    assert!(fast.fast_iterations > 0 && fast.fast_iterations < fast.summary.iterations);
}

/// A chain borrowed across tenants' copies: on `mix-6t` under `slice` a follower of the
/// 13B's borrowed layer (on its copy's GPUs, homes of two tenants whose iterations run
/// fast) was judged against the GPUs' state as of the policy's last call, older on the
/// fast path (which calls it less), and the two paths parted 32 s in. The checks now
/// read the state as of the moment they judge.
#[test]
fn a_follower_away_from_home_is_judged_on_the_gpus_as_they_are() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/mix-6t.toml");
    let scn = Scenario::from_file_for(&path, Some(80.0)).unwrap();
    let fast = assert_same(&scn, "slice", ReplayOptions::default()).unwrap();
    assert!(fast.fast_iterations > 0 && fast.summary.scheduling.borrowed_ops > 0);
}
