//! The planner's what-if (`choose_plan`): each distinct candidate plan replayed under
//! the policy on the busiest stretch of the load, the best one kept.

use slicesched_cost::CostModel;
use slicesched_sim::{
    choose_plan, plan, plan_ordered, replay, whatif_window, PhaseOrder, PlanChoice, ReplayOptions, ReplicaMode,
    Scenario,
};
use std::path::Path;

fn shipped(name: &str, duration_s: f64) -> Scenario {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(name);
    Scenario::from_file_for(&p, Some(duration_s)).expect("shipped scenario loads")
}

fn slice() -> Result<Box<dyn slicesched_policy::Policy>, String> {
    slicesched_policy::builtin("slice").ok_or_else(|| "no built-in slice".to_string())
}

fn choose(scn: &Scenario, mode: ReplicaMode) -> (Scenario, Option<PlanChoice>) {
    choose_plan(scn, mode, CostModel::default_a100(), &ReplayOptions::default(), &mut slice).expect("plans")
}

#[test]
fn the_plan_kept_is_the_candidate_with_the_fewest_violations() {
    // bursty-8t's 24B tenants overflow their homes: the phase orders give different plans.
    let scn = shipped("bursty-8t.toml", 120.0).with_rate_scale(4.0);
    let (planned, choice) = choose(&scn, ReplicaMode::Both);
    let choice = choice.expect("bursty-8t's candidate plans differ");
    assert!(choice.candidates.len() >= 2, "{choice:?}");
    assert_eq!(choice.candidates[0].order, PhaseOrder::TierFirst);
    // The kept one has the lowest rate; a candidate stopped early was past it already.
    let kept = choice.candidates.iter().find(|c| c.order == choice.chosen).expect("kept is a candidate");
    assert!(!kept.stopped_early, "{choice:?}");
    for c in &choice.candidates {
        assert!(c.violation_rate >= kept.violation_rate, "{choice:?}");
    }
    // The first of equals wins.
    let first_best = choice.candidates.iter().find(|c| c.violation_rate == kept.violation_rate).unwrap();
    assert_eq!(first_best.order, choice.chosen);
    // The plan returned is that candidate's plan.
    let direct = plan_ordered(&scn, ReplicaMode::Both, CostModel::default_a100(), choice.chosen).unwrap();
    assert_eq!(planned.deployment, direct.deployment);
    assert_eq!(planned.guest_reserve, direct.guest_reserve);
    // The whole trace is 120 s here: the what-if replayed all of it, so the kept
    // candidate's rate is the replay's own.
    assert_eq!(choice.window_start_s, 0.0);
    let mut p = slice().unwrap();
    let r = replay(&planned, p.as_mut(), CostModel::default_a100(), ReplayOptions::default(), &mut |_| {});
    assert_eq!(r.summary.violation_rate, kept.violation_rate);
    assert_eq!(r.summary.oom_events, 0);
}

#[test]
fn the_choice_is_deterministic() {
    let scn = shipped("bursty-8t.toml", 240.0).with_rate_scale(3.0);
    let (a, ca) = choose(&scn, ReplicaMode::Both);
    let (b, cb) = choose(&scn, ReplicaMode::Both);
    assert_eq!(ca, cb);
    assert_eq!(a.deployment, b.deployment);
}

#[test]
fn only_an_operator_level_plan_has_candidates() {
    let scn = shipped("bursty-8t.toml", 60.0).with_rate_scale(4.0);
    let (planned, choice) = choose(&scn, ReplicaMode::Serving);
    assert!(choice.is_none());
    assert_eq!(planned.deployment, plan(&scn, ReplicaMode::Serving).unwrap().deployment);
    // The request-level candidate of an operator-level plan is `pooled`'s plan.
    let serving_only =
        plan_ordered(&scn, ReplicaMode::Both, CostModel::default_a100(), PhaseOrder::ServingOnly).unwrap();
    assert_eq!(serving_only.deployment, planned.deployment);
    assert!(serving_only.guest_reserve.iter().all(|&b| b == 0), "{:?}", serving_only.guest_reserve);
}

#[test]
fn the_window_is_the_busiest_stretch_of_the_load() {
    let mut scn = shipped("bursty-8t.toml", 600.0);
    // Tenant 0 only between 300 and 340 s, at twenty times its rate; the others quiet.
    let burst = 300_000_000_000u64..340_000_000_000;
    let mut extra = Vec::new();
    for (t, r) in &scn.requests {
        if *t == 0 {
            for k in 0..20u64 {
                let mut q = r.clone();
                q.arrival_ns = burst.start + (r.arrival_ns * 7 + k * 1_999_999_999) % (burst.end - burst.start);
                extra.push((0u32, q));
            }
        }
    }
    scn.requests.retain(|(t, r)| *t != 0 && r.arrival_ns % 50 == 0);
    scn.requests.extend(extra);
    scn.requests.sort_by_key(|(t, r)| (r.arrival_ns, *t));
    let (start, end) = whatif_window(&scn, CostModel::default_a100(), 120_000_000_000);
    assert_eq!(end - start, 120_000_000_000);
    assert!(start <= burst.start && end >= burst.end, "{start}..{end}");
    // A trace shorter than the window is replayed whole.
    let short = shipped("bursty-8t.toml", 60.0);
    assert_eq!(whatif_window(&short, CostModel::default_a100(), 120_000_000_000).0, 0);
}
