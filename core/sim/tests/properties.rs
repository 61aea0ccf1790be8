//! Property tests over random scenarios: the simulator's invariants hold whatever the
//! load, models and placement of tenants.

mod common;
use common::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_on_random_scenarios(
        seed in 0u64..1000,
        tenants in proptest::collection::vec((0usize..4, 0u8..3, 0.5f64..6.0, 1u32..6000, 1u32..300), 1..4),
        gpu in prop::sample::select(vec!["A100-80GB", "H100-80GB", "L40S"]),
        budget in prop::sample::select(vec![512u32, 2048, 8192]),
    ) {
        let text = random_scenario("prop", seed, (8, 30), gpu, budget, &tenants);
        let spec: slicesched_sim::ScenarioSpec = toml::from_str(&text).unwrap();
        // Co-locating several models may not fit; refusing is correct then.
        let Ok(scn) = slicesched_sim::Scenario::from_spec(spec, std::path::Path::new("p.toml"), std::path::Path::new(".")) else {
            return Ok(());
        };
        let r = run(&scn, checked());
        // No op starts before its inputs finish.
        prop_assert_eq!(r.dependency_violations, 0);
        // GPU memory never exceeds capacity.
        prop_assert_eq!(r.summary.oom_events, 0);
        for g in &r.summary.gpus {
            prop_assert!(g.peak_memory_gb <= g.capacity_gb, "gpu {} peak {} > {}", g.gpu, g.peak_memory_gb, g.capacity_gb);
        }
        // Every request completes or is reported dropped with a reason.
        for rec in &r.records {
            prop_assert!(rec.finish_ns.is_some() != rec.dropped.is_some(), "request {} is in limbo", rec.id);
            if let (Some(f), Some(t)) = (rec.finish_ns, rec.first_token_ns) {
                prop_assert!(rec.arrival_ns <= t && t <= f);
            }
        }
        prop_assert_eq!(r.summary.requests, r.summary.completed + r.summary.dropped);
    }
}
