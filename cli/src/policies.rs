//! Policies by name, and one replay of a scenario under a policy on the deployment the
//! policy asks for: what `replay`, `bench`, `sweep` and `compare` share.

use anyhow::{bail, Context, Result};
use slicesched_cost::CostModel;
use slicesched_policy::Policy;
use slicesched_sim::{replay, Progress, ReplayOptions, ReplayResult, Scenario};
use std::time::Instant;

/// A built-in policy, or an error listing them.
pub fn by_name(name: &str) -> Result<Box<dyn Policy>> {
    match slicesched_policy::builtin(name) {
        Some(p) => Ok(p),
        None => bail!("unknown policy `{name}` (built-in: {})", slicesched_policy::BUILTIN.join(", ")),
    }
}

/// The policies a command runs: every built-in when none is named, each name once, all
/// of them known.
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
    let mut pol = by_name(name)?;
    let planned =
        slicesched_sim::plan(scenario, pol.replicas()).with_context(|| format!("planning replicas for `{name}`"))?;
    let started = Instant::now();
    let mut r = replay(&planned, pol.as_mut(), CostModel::default_a100(), opts, progress);
    let wall = started.elapsed().as_secs_f64();
    r.summary.timing.sim_wall_s = wall;
    r.summary.timing.op_events_per_s = r.summary.op_events as f64 / wall.max(1e-9);
    Ok(r)
}
