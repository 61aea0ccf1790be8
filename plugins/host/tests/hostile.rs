//! Hostile plugins, built from `plugins/hostile` one misbehaviour at a time: each call
//! fails with a named cause, the plugin is quarantined after the configured number of
//! failures, the fallback decides instead, and the replay completes with nothing lost.

mod common;

use common::*;
use slicesched_plugin_host::{Cause, PluginOptions, PluginStats, WasmPolicy, PROBES_PER_CALL};
use slicesched_sim::ReplayOptions;

const QUARANTINE_AFTER: u32 = 3;
const FUEL: u64 = 20_000_000;

/// Replays smoke under the hostile build `feature`; checks the run against the safe
/// built-in's and returns the failures. The plugin is offered every op, attention
/// included (the core does not place any with its producer).
fn hostile_replay(feature: &str) -> (Vec<Cause>, serde_json::Value, PluginStats) {
    let scn = scenario("smoke", Some(20.0));
    let every_op = || ReplayOptions { follow_producer: false, ..Default::default() };
    let mut base = slicesched_policy::builtin("dedicated").unwrap();
    let baseline = run_with(&scn, base.as_mut(), every_op());
    let opts = PluginOptions { fuel_per_call: FUEL, memory_cap_bytes: 32 << 20, quarantine_after: QUARANTINE_AFTER };
    let mut p = WasmPolicy::new(&hostile(feature), &opts).expect("a hostile plugin still loads");
    let r = run_with(&scn, &mut p, every_op());
    let s = p.stats();
    assert_eq!(s.failures, QUARANTINE_AFTER, "{feature}: {:?}", s.errors);
    assert!(s.quarantined, "{feature}");
    assert!(s.fallback_decisions > s.failures as u64, "{feature}: the fallback keeps deciding after quarantine");
    assert_eq!(r.summary.oom_events, 0, "{feature}");
    assert_eq!(r.summary.requests, baseline.summary.requests, "{feature}");
    assert_eq!(r.summary.completed, baseline.summary.completed, "{feature}: nothing lost");
    assert_eq!(r.dependency_violations, 0);
    for e in &s.errors {
        let text = e.to_string();
        assert!(text.starts_with("plugin `hostile` 6.6.6: "), "{text}");
    }
    assert!(matches!(s.errors.last().unwrap().cause, Cause::Quarantined { failures: QUARANTINE_AFTER }));
    (s.errors[..s.errors.len() - 1].iter().map(|e| e.cause.clone()).collect(), comparable(&r), s.clone())
}

#[test]
fn an_endless_loop_runs_out_of_fuel_at_the_same_point_every_time() {
    let (causes, first, _) = hostile_replay("spin");
    let (_, second, _) = hostile_replay("spin");
    assert_eq!(first, second, "fuel makes interruption, and so the replay, deterministic");
    assert!(causes.iter().all(|c| matches!(c, Cause::FuelExhausted { hook: "place", fuel: FUEL })), "{causes:?}");
}

#[test]
fn a_probe_storm_is_bounded_by_the_probe_budget_and_ends_with_the_fuel() {
    let (causes, _, stats) = hostile_replay("probe-storm");
    // Each failed call asked its whole budget, and went on asking past it.
    assert!(stats.probes >= u64::from(QUARANTINE_AFTER) * u64::from(PROBES_PER_CALL), "{stats:?}");
    assert!(stats.probes <= stats.calls * u64::from(PROBES_PER_CALL), "{stats:?}");
    assert!(stats.probes_over_budget > stats.probes, "{stats:?}");
    assert!(causes.iter().all(|c| matches!(c, Cause::FuelExhausted { hook: "place", fuel: FUEL })), "{causes:?}");
}

#[test]
fn a_memory_bomb_hits_the_cap() {
    let (causes, _, _) = hostile_replay("bomb");
    assert!(causes.iter().all(|c| matches!(c, Cause::MemoryCap { hook: "place", .. })), "{causes:?}");
}

#[test]
fn a_panic_traps_and_its_message_reaches_the_host() {
    let (causes, _, _) = hostile_replay("panic");
    for c in &causes {
        let Cause::Trap { log: Some(log), .. } = c else { panic!("{c:?}") };
        assert!(log.contains("hostile plugin gave up on a batch of"), "{log}");
    }
}

#[test]
fn an_error_answer_is_a_refusal() {
    let (causes, _, _) = hostile_replay("refuse");
    assert!(causes.iter().all(|c| matches!(c, Cause::Refused { message, .. } if message == "refusing to decide")));
}

#[test]
fn garbage_and_oversized_answers_are_malformed() {
    for feature in ["garbage", "oversized"] {
        let (causes, _, _) = hostile_replay(feature);
        assert!(causes.iter().all(|c| matches!(c, Cause::Malformed { hook: "place", .. })), "{feature}: {causes:?}");
    }
}

#[test]
fn placements_the_core_would_refuse_are_invalid() {
    for (feature, reason) in [
        ("no-group", "no such GPU group"),
        ("no-weights", "weights not resident on the group"),
        ("attention-away", "attention away from its KV cache"),
    ] {
        let (causes, _, _) = hostile_replay(feature);
        assert!(
            causes.iter().all(|c| matches!(c, Cause::InvalidPlacement { reason: r, .. } if *r == reason)),
            "{feature}: {causes:?}"
        );
    }
}
