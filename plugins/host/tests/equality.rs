//! One source, two builds: each shipped policy's Wasm build replays every shipped
//! scenario exactly as its native build does (summary equal except wall-clock timing),
//! without a single failed call. The larger scenarios are cut short to keep the suite
//! quick on two cores; `slicesched plugin bench` compares whole replays.

mod common;

use common::*;
use slicesched_plugin_host::{PluginOptions, WasmPolicy};

fn same_as_native(scenario_name: &str, duration_s: Option<f64>, policies: &[&str]) {
    let scn = scenario(scenario_name, duration_s);
    for name in policies {
        let mut native = slicesched_policy::builtin(name).unwrap();
        let n = run(&scn, native.as_mut());
        let mut wasm = WasmPolicy::new(&shipped(name), &PluginOptions::default()).unwrap();
        assert_eq!(wasm.info().name, *name);
        let w = run(&scn, &mut wasm);
        assert_eq!(wasm.stats().failures, 0, "{name}: {:?}", wasm.stats().errors);
        assert!(wasm.stats().calls > 0);
        assert!(n.summary.completed > 0, "{scenario_name}/{name}: the comparison must cover real work");
        assert_eq!(comparable(&n), comparable(&w), "{scenario_name}: `{name}` native and Wasm differ");
    }
}

const ALL: &[&str] = &["dedicated", "timeslice", "mps", "pooled", "slice"];

#[test]
fn smoke_is_identical_for_every_shipped_policy() {
    same_as_native("smoke", None, ALL);
}

#[test]
fn uniform_4t_start_is_identical() {
    same_as_native("uniform-4t", Some(15.0), ALL);
}

#[test]
fn bursty_8t_start_is_identical() {
    same_as_native("bursty-8t", Some(15.0), ALL);
}

#[test]
fn azure_code_4t_start_is_identical_under_slice() {
    same_as_native("azure-code-4t", Some(10.0), &["slice", "pooled"]);
}

/// `slice`'s route reads 0.3.0's prefill backlog: its Wasm build must see what the
/// native build sees, or their replays part where a long prompt holds a home. A
/// long-prompt tenant (median prompt 6,700 tokens) beside six others.
#[test]
fn a_long_prompt_mix_is_identical_under_slice() {
    same_as_native("family/gen-09", Some(120.0), &["slice"]);
}
