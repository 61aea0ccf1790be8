//! Interface versions: plugins built for 0.1.0 and 0.2.0 keep loading and run unchanged
//! beside 0.3.0 ones, and `what-if` answers a Wasm plugin exactly as the core answers
//! the same policy's native build.

mod common;

use common::*;
use slicesched_plugin_host::{inspect, PluginOptions, WasmPolicy};

#[test]
fn a_plugin_built_for_0_1_0_still_loads_and_runs_as_it_did() {
    let bytes = shipped("legacy-v0-1");
    let info = inspect(&bytes).unwrap();
    assert_eq!((info.name.as_str(), info.interface_version.as_str()), ("legacy", "0.1.0"));
    replays_as_dedicated(&bytes);
}

/// Replays a legacy plugin, whose rule is `dedicated`'s, beside the native `dedicated`:
/// the replays must agree, policy name aside. Returns what the plugin did.
fn replays_as_dedicated(bytes: &[u8]) -> slicesched_plugin_host::PluginStats {
    let scn = scenario("smoke", Some(30.0));
    let mut legacy = WasmPolicy::new(bytes, &PluginOptions::default()).unwrap();
    let l = run(&scn, &mut legacy);
    assert_eq!(legacy.stats().failures, 0, "{:?}", legacy.stats().errors);
    let d = run(&scn, slicesched_policy::builtin("dedicated").unwrap().as_mut());
    let (mut l, mut d) = (comparable(&l), comparable(&d));
    l.as_object_mut().unwrap().remove("policy");
    d.as_object_mut().unwrap().remove("policy");
    assert!(d["completed"].as_u64().unwrap() > 0);
    assert_eq!(l, d);
    legacy.stats().clone()
}

#[test]
fn a_plugin_built_for_0_2_0_still_loads_asks_what_if_and_runs_as_it_did() {
    let bytes = shipped("legacy-v0-2");
    let info = inspect(&bytes).unwrap();
    assert_eq!((info.name.as_str(), info.interface_version.as_str()), ("legacy-v0-2", "0.2.0"));
    let s = replays_as_dedicated(&bytes);
    assert!(s.probes > 0, "it asks what-if before every answer: {s:?}");
}

#[test]
fn shipped_plugins_implement_the_newest_interface() {
    for name in ["dedicated", "slice", "earliest"] {
        let info = inspect(&shipped(name)).unwrap();
        assert_eq!(info.interface_version, slicesched_plugin_sdk::INTERFACE_VERSION, "{name}");
    }
    assert_eq!(slicesched_plugin_host::SUPPORTED, &["0.1.0", "0.2.0", "0.3.0"]);
}

/// The example policy that decides by what-if: its native and Wasm builds must see
/// the same answers, so their replays are identical; and it must really have used
/// them (borrowed ops, probes asked).
fn earliest_same_as_native(scenario_name: &str, duration_s: Option<f64>, rate_scale: f64) {
    let scn = scenario(scenario_name, duration_s).with_rate_scale(rate_scale);
    let mut native = slicesched_policy::builtin("earliest").unwrap();
    let n = run(&scn, native.as_mut());
    let mut wasm = WasmPolicy::new(&shipped("earliest"), &PluginOptions::default()).unwrap();
    let w = run(&scn, &mut wasm);
    let s = wasm.stats();
    assert_eq!(s.failures, 0, "{:?}", s.errors);
    assert!(s.probes > s.calls / 2, "{s:?}");
    assert_eq!(s.probes_over_budget, 0);
    assert!(n.summary.completed > 0);
    assert!(n.summary.scheduling.borrowed_ops > 0, "{scenario_name}: the what-if never chose a borrow");
    let rejected: u64 = n.summary.rejected_placements.iter().map(|(_, k)| k).sum();
    assert_eq!(rejected, 0, "{:?}", n.summary.rejected_placements);
    assert_eq!(comparable(&n), comparable(&w), "{scenario_name}: `earliest` native and Wasm differ");
    assert_eq!(native.name(), "earliest");
}

#[test]
fn what_if_answers_the_same_through_the_sandbox_on_smoke() {
    earliest_same_as_native("smoke", Some(30.0), 1.0);
}

#[test]
fn what_if_answers_the_same_through_the_sandbox_on_bursty_8t() {
    // At four times its rate (where its goodput is measured), whose bursts outgrow the
    // 24B tenants' homes: the planner gives them copies to borrow.
    earliest_same_as_native("bursty-8t", Some(15.0), 4.0);
}
