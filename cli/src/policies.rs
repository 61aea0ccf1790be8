//! Policies by name, and one replay of a scenario under a policy on the deployment the
//! policy asks for: what `replay`, `bench`, `sweep` and `compare` share.
//!
//! A policy is named three ways:
//! - `NAME` (a shipped one): its Wasm build `target/plugins/NAME.wasm` (or under
//!   `$SLICESCHED_PLUGIN_DIR`) when it has been built, else its native build;
//! - `native:NAME`: the native build of a shipped policy (the same source);
//! - `PATH.wasm`: any policy plugin.

use anyhow::{bail, Context, Result};
use slicesched_cost::CostModel;
use slicesched_plugin_host::PluginOptions;
use slicesched_policy::Policy;
use slicesched_sim::{replay, Progress, ReplayOptions, ReplayResult, Scenario};
use std::path::PathBuf;
use std::time::Instant;

/// Where the shipped policies' Wasm builds are looked for.
pub fn plugin_dir() -> PathBuf {
    std::env::var_os("SLICESCHED_PLUGIN_DIR").map_or_else(|| PathBuf::from("target/plugins"), PathBuf::from)
}

/// A policy by name (see the module docs), or an error listing the shipped ones.
pub fn by_name(name: &str) -> Result<Box<dyn Policy>> {
    if let Some(native) = name.strip_prefix("native:") {
        return slicesched_policy::builtin(native).with_context(|| unknown(native));
    }
    if name.ends_with(".wasm") {
        return load_wasm(&PathBuf::from(name));
    }
    if !shipped(name) {
        bail!("{}", unknown(name));
    }
    let wasm = wasm_build(name);
    if wasm.exists() {
        return load_wasm(&wasm);
    }
    warn_native_once(name, &wasm);
    Ok(slicesched_policy::builtin(name).expect("a shipped name"))
}

fn shipped(name: &str) -> bool {
    slicesched_policy::BUILTIN.contains(&name) || slicesched_policy::EXAMPLES.contains(&name)
}

/// Where a shipped policy's Wasm build is looked for.
fn wasm_build(name: &str) -> PathBuf {
    plugin_dir().join(format!("{name}.wasm"))
}

/// Whether [`by_name`] runs `name`'s Wasm build (a shipped name whose plugin is built).
pub fn runs_wasm(name: &str) -> bool {
    shipped(name) && wasm_build(name).exists()
}

/// Says so when a bare shipped name runs its Wasm build, which is slower (op by op
/// through the sandbox, never on the fast path): timings of `dedicated` once
/// `target/plugins/dedicated.wasm` exists are not those of its native build.
pub fn note_wasm(name: &str) {
    if runs_wasm(name) {
        eprintln!(
            "note: `{name}` runs its Wasm build {}, op by op and off the fast path; `native:{name}` gives the same results faster",
            wasm_build(name).display()
        );
    }
}

fn unknown(name: &str) -> String {
    format!(
        "unknown policy `{name}` (shipped: {}; example: {}; `native:NAME` for a native build, or a path to a .wasm plugin)",
        slicesched_policy::BUILTIN.join(", "),
        slicesched_policy::EXAMPLES.join(", ")
    )
}

fn load_wasm(path: &PathBuf) -> Result<Box<dyn Policy>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading plugin {}", path.display()))?;
    slicesched_plugin_host::load(&bytes, &PluginOptions::default())
        .with_context(|| format!("loading plugin {}", path.display()))
}

/// Says once per policy that its Wasm build is missing (the results are the same).
fn warn_native_once(name: &str, wasm: &std::path::Path) {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !warned.iter().any(|w| w == name) {
        warned.push(name.to_string());
        eprintln!("note: {} not built (slicesched plugin build plugins/{name}); running native:{name}", wasm.display());
    }
}

/// The policies a command runs: every shipped one when none is named, each name once,
/// all of them known.
pub fn resolve(named: &[String]) -> Result<Vec<String>> {
    let named: Vec<String> = if named.is_empty() {
        slicesched_policy::BUILTIN.iter().map(|s| s.to_string()).collect()
    } else {
        named.to_vec()
    };
    let mut out: Vec<String> = Vec::with_capacity(named.len());
    for p in named {
        by_name(&p)?;
        // A name given twice would only repeat its rows.
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Plans the policy's replicas into `scenario`, replays it and fills the wall-clock
/// `timing` figures (measured around the replay alone).
pub fn replay_policy(
    scenario: &Scenario,
    name: &str,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ReplayResult> {
    if let Some(path) = wasm_file(name) {
        // Kept as a `WasmPolicy`, so a quarantine during the replay is reported with its
        // cause rather than surfacing later as fallback results nobody explained.
        let bytes = std::fs::read(&path).with_context(|| format!("reading plugin {}", path.display()))?;
        let mut w = slicesched_plugin_host::WasmPolicy::new(&bytes, &PluginOptions::default())
            .with_context(|| format!("loading plugin {}", path.display()))?;
        let r = replay_named(scenario, name, &mut w, opts, progress)?;
        if let Some(cause) = quarantine_cause(w.stats()) {
            eprintln!(
                "WARNING: plugin `{name}` was quarantined during this replay (its decisions from then on are the \
                 safe fallback's): {cause}"
            );
        }
        return Ok(r);
    }
    let mut pol = by_name(name)?;
    replay_named(scenario, name, pol.as_mut(), opts, progress)
}

/// Replays `pol` (the policy `name` names) on the plan the planner's what-if chose among
/// its candidates, where it has a choice (`slicesched_sim::choose_plan`), each candidate
/// replayed under a fresh instance made from the name; the what-if's wall time goes to
/// `timing.plan_whatif_s`.
fn replay_named(
    scenario: &Scenario,
    name: &str,
    pol: &mut dyn Policy,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ReplayResult> {
    let mut make = || by_name(name).map_err(|e| format!("{e:#}"));
    let started = Instant::now();
    let (planned, choice) =
        slicesched_sim::choose_plan(scenario, pol.replicas(), CostModel::default_a100(), &opts, &mut make)
            .with_context(|| format!("planning replicas for `{name}`"))?;
    let whatif_s = started.elapsed().as_secs_f64();
    let mut r = replay_planned(&planned, pol, opts, progress).with_context(|| format!("policy `{name}`"))?;
    (r.summary.plan, r.summary.timing.plan_whatif_s) = (choice, whatif_s);
    Ok(r)
}

/// The Wasm component a policy name runs, when it runs one (see the module docs).
fn wasm_file(name: &str) -> Option<PathBuf> {
    if name.starts_with("native:") {
        return None;
    }
    if name.ends_with(".wasm") {
        return Some(PathBuf::from(name));
    }
    let shipped = slicesched_policy::BUILTIN.contains(&name) || slicesched_policy::EXAMPLES.contains(&name);
    let wasm = plugin_dir().join(format!("{name}.wasm"));
    (shipped && wasm.exists()).then_some(wasm)
}

/// Why the host quarantined a plugin: the last failure before it (None when it was not).
pub fn quarantine_cause(s: &slicesched_plugin_host::PluginStats) -> Option<String> {
    use slicesched_plugin_host::Cause;
    s.quarantined.then(|| {
        s.errors
            .iter()
            .rev()
            .find(|e| !matches!(e.cause, Cause::Quarantined { .. }))
            .map_or_else(|| format!("{} failures", s.failures), |e| e.to_string())
    })
}

/// [`replay_policy`] with a policy already made, on the planner's first candidate plan
/// (the what-if needs fresh instances of the policy, which only a name can make).
pub fn replay_with(
    scenario: &Scenario,
    pol: &mut dyn Policy,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ReplayResult> {
    let planned = slicesched_sim::plan(scenario, pol.replicas()).context("planning replicas")?;
    replay_planned(&planned, pol, opts, progress)
}

/// Replays a scenario that already holds its plan's replicas and fills the wall-clock
/// `timing` figures (measured around the replay alone).
fn replay_planned(
    planned: &Scenario,
    pol: &mut dyn Policy,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ReplayResult> {
    let started = Instant::now();
    let mut r = replay(planned, pol, CostModel::default_a100(), opts, progress);
    let wall = started.elapsed().as_secs_f64();
    r.summary.timing.sim_wall_s = wall;
    r.summary.timing.op_events_per_s = r.summary.op_events as f64 / wall.max(1e-9);
    Ok(r)
}
