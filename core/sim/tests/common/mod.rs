//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use slicesched_sim::{replay, ReplayOptions, ReplayResult, Scenario, ScenarioSpec};
use std::path::Path;

pub fn scenario(toml_text: &str) -> Scenario {
    let spec: ScenarioSpec = toml::from_str(toml_text).expect("test scenario parses");
    Scenario::from_spec(spec, Path::new("test.toml"), Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("test scenario loads")
}

pub fn scenario_err(toml_text: &str) -> String {
    let spec: ScenarioSpec = match toml::from_str(toml_text) {
        Ok(s) => s,
        Err(e) => return e.to_string(),
    };
    match Scenario::from_spec(spec, Path::new("bad.toml"), Path::new(env!("CARGO_MANIFEST_DIR"))) {
        Ok(_) => panic!("scenario should have been refused"),
        Err(e) => e.to_string(),
    }
}

pub fn run(scn: &Scenario, opts: ReplayOptions) -> ReplayResult {
    let mut policy = slicesched_policy::builtin("dedicated").expect("built-in");
    replay(scn, policy.as_mut(), slicesched_cost::CostModel::default_a100(), opts, &mut |_| {})
}

pub fn checked() -> ReplayOptions {
    ReplayOptions { check_dependencies: true, ..Default::default() }
}
