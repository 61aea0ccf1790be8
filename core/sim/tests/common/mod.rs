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

/// The 7-8B presets the random scenarios draw from.
pub const MODELS: [&str; 4] = ["llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2.5-7b"];

/// A random scenario on four `gpu`s lasting `(duration_s, drain_s)`: per tenant (model
/// index, shape, rate, longest prompt, longest output). Shape: a GPU of its own, a TP
/// pair, or GPU 0 shared with others (co-located).
pub fn random_scenario(
    name: &str,
    seed: u64,
    (duration_s, drain_s): (u32, u32),
    gpu: &str,
    budget: u32,
    tenants: &[(usize, u8, f64, u32, u32)],
) -> String {
    let mut s = format!(
        "name = \"{name}\"\nseed = {seed}\nduration_s = {duration_s}\ndrain_s = {drain_s}\n[engine]\n\
         max_batched_tokens = {budget}\n[cluster]\n[[cluster.nodes]]\ngpu = \"{gpu}\"\ngpus = 4\n"
    );
    for (i, &(m, shape, rate, prompt, output)) in tenants.iter().enumerate() {
        let gpus = match shape % 3 {
            0 => format!("[{}]", i % 4),
            1 => format!("[{}, {}]", (2 * i) % 4, (2 * i + 1) % 4),
            _ => "[0]".to_string(),
        };
        s += &format!(
            "[[tenants]]\nname = \"t{i}\"\nmodel = \"{}\"\ngpus = {gpus}\nsla = {{ ttft_ms = 300, tpot_ms = 40 }}\n\
             trace = {{ kind = \"gamma\", rate = {rate}, cv = 2.0, prompt = {{ dist = \"uniform\", min = 1, max = {prompt} }}, output = {{ dist = \"uniform\", min = 1, max = {output} }} }}\n",
            MODELS[m]
        );
    }
    s
}

/// The invariants every replay keeps: no OOM, no op before its inputs, memory within
/// capacity, every request ended once (finished, or dropped with a reason).
pub fn sound(r: &ReplayResult) {
    assert_eq!(r.summary.oom_events, 0);
    assert_eq!(r.dependency_violations, 0);
    assert!(r.summary.gpus.iter().all(|g| g.peak_memory_gb <= g.capacity_gb));
    for rec in &r.records {
        assert!(rec.finish_ns.is_some() != rec.dropped.is_some(), "request {} in limbo", rec.id);
    }
    assert_eq!(r.summary.requests, r.summary.completed + r.summary.dropped);
}

pub fn checked() -> ReplayOptions {
    ReplayOptions { check_dependencies: true, ..Default::default() }
}

/// Two tenants on three A100s (one of them TP 2), 40 s of Poisson and bursty load.
pub const TWO_TENANTS: &str = r#"
name = "two"
seed = 11
duration_s = 40
[cluster]
[[cluster.nodes]]
gpu = "A100-80GB"
gpus = 3
[[tenants]]
name = "a"
model = "llama-2-7b"
gpus = [0]
sla = { ttft_ms = 500, ttft_ms_per_1k = 200, tpot_ms = 50 }
trace = { kind = "poisson", rate = 3.0 }
[[tenants]]
name = "b"
model = "mistral-7b"
gpus = [1, 2]
sla = { ttft_ms = 500, tpot_ms = 50 }
trace = { kind = "gamma", rate = 2.0, cv = 4.0 }
"#;

/// A summary as JSON without `timing`, the only part that differs between identical runs.
pub fn without_timing(s: &slicesched_sim::Summary) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap();
    v.as_object_mut().unwrap().remove("timing");
    v
}
