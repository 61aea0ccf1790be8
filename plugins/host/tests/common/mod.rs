//! Shared by the host's tests: plugins built from source, scenarios, replays.

#![allow(dead_code)]

use slicesched_cost::CostModel;
use slicesched_plugin_host::toolchain;
use slicesched_policy::Policy;
use slicesched_sim::{replay, ReplayOptions, ReplayResult, Scenario, ScenarioSpec};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds are serialized: they share one guest target directory.
static BUILDS: Mutex<()> = Mutex::new(());

/// A shipped plugin's component: the one `scripts/test.sh` built, else built now.
pub fn shipped(name: &str) -> Vec<u8> {
    let out = root().join("target/plugins").join(format!("{name}.wasm"));
    if !out.exists() {
        let _g = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
        if !out.exists() {
            toolchain::build(&root().join("plugins").join(name), &out, &root().join("target/wasm"), &[])
                .unwrap_or_else(|e| panic!("building plugins/{name}: {e}"));
        }
    }
    std::fs::read(out).unwrap()
}

/// The hostile plugin built with one misbehaviour feature.
pub fn hostile(feature: &str) -> Vec<u8> {
    let out = root().join("target/plugins/hostile").join(format!("{feature}.wasm"));
    let _g = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    toolchain::build(&root().join("plugins/hostile"), &out, &root().join("target/wasm"), &[feature])
        .unwrap_or_else(|e| panic!("building the hostile plugin `{feature}`: {e}"));
    std::fs::read(out).unwrap()
}

/// A shipped scenario, optionally cut to its first `duration_s` seconds.
pub fn scenario(name: &str, duration_s: Option<f64>) -> Scenario {
    let path = root().join("scenarios").join(format!("{name}.toml"));
    let mut spec: ScenarioSpec = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    if duration_s.is_some() {
        spec.duration_s = duration_s;
    }
    Scenario::from_spec(spec, &path, path.parent().unwrap()).unwrap()
}

pub fn run(scn: &Scenario, pol: &mut dyn Policy) -> ReplayResult {
    run_with(scn, pol, ReplayOptions::default())
}

pub fn run_with(scn: &Scenario, pol: &mut dyn Policy, opts: ReplayOptions) -> ReplayResult {
    let planned = slicesched_sim::plan(scn, pol.replicas()).unwrap();
    replay(&planned, pol, CostModel::default_a100(), opts, &mut |_| {})
}

/// The summary without its wall-clock figures.
pub fn comparable(r: &ReplayResult) -> serde_json::Value {
    let mut v = serde_json::to_value(&r.summary).unwrap();
    v.as_object_mut().unwrap().remove("timing");
    v
}
