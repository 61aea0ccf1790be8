//! `slicesched bench`: simulator throughput and whole-replay wall time, op by op and on
//! the fast path side by side; `slicesched bench exec`: the executor's kernels,
//! overheads and tokens/s; `slicesched bench live`: what serving live adds.

mod exec;
mod live;

use anyhow::{bail, Context, Result};
use slicesched_sim::{ReplayOptions, Scenario, Summary};
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    what: Option<What>,
    /// Scenarios to replay (default: the shipped azure-code-4t).
    #[arg(long, default_value = "scenarios/azure-code-4t.toml")]
    scenario: Vec<PathBuf>,
    /// Policy to replay under.
    #[arg(long, default_value = "dedicated")]
    policy: String,
    /// Replays per scenario and path; the table reports the best and the median.
    #[arg(long, default_value_t = 3, value_parser = crate::args::at_least_one::<usize>)]
    repeat: usize,
    /// Arrival-rate scale (1 replays the traces as they are).
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::positive)]
    rate_scale: f64,
    /// Replay only op by op (skip the fast path's rows).
    #[arg(long)]
    per_op_only: bool,
}

/// What the replays of one scenario on one path measured.
struct Row {
    summary: Summary,
    fast_iterations: u64,
    best: f64,
    median: f64,
}

fn measure(scn: &Scenario, policy: &str, fast_path: bool, repeat: usize) -> Result<Row> {
    let mut walls = Vec::new();
    let mut last = None;
    for _ in 0..repeat.max(1) {
        let opts = ReplayOptions { time_decisions: true, fast_path, ..ReplayOptions::default() };
        let r = crate::policies::replay_policy(scn, policy, opts, &mut |_| {})?;
        walls.push(r.summary.timing.sim_wall_s);
        last = Some((r.summary, r.fast_iterations));
    }
    let (summary, fast_iterations) = last.expect("at least one replay");
    walls.sort_by(f64::total_cmp);
    Ok(Row { summary, fast_iterations, best: walls[0], median: walls[walls.len() / 2] })
}

#[derive(clap::Subcommand)]
enum What {
    /// The executor (CPU backend): GEMM GFLOP/s against `matrixmultiply` bare and the
    /// measured peak, overhead per op, tokens/s of tiny models.
    Exec(exec::Args),
    /// Live serving against a running `slicesched serve`: per-token cost of the live path
    /// over the executor alone, requests/s sustained, `load` measured against predicted.
    Live(live::Args),
}

pub fn run(a: Args) -> Result<()> {
    match a.what {
        Some(What::Exec(e)) => return exec::run(e),
        Some(What::Live(l)) => return live::run(l),
        None => {}
    }
    crate::policies::note_wasm(&a.policy);
    println!(
        "{:<16} {:>10} {:>7} {:>12} {:>11} {:>8} {:>9} {:>11} {:>12} {:>13} {:>12} {:>11} {:>8}",
        "scenario",
        "policy",
        "path",
        "op events",
        "fast iters",
        "best s",
        "median s",
        "best Mev/s",
        "median Mev/s",
        "decisions/s",
        "decision p99",
        "cluster ops/s",
        "speedup"
    );
    for path in &a.scenario {
        let mut scn = Scenario::from_file(path).with_context(|| format!("loading {}", path.display()))?;
        if a.rate_scale != 1.0 {
            scn = scn.with_rate_scale(a.rate_scale);
        }
        let per_op = measure(&scn, &a.policy, false, a.repeat)?;
        let mut rows = vec![("per-op", per_op)];
        if !a.per_op_only {
            let fast = measure(&scn, &a.policy, true, a.repeat)?;
            // The fast path must not change a figure; say so loudly if it did.
            if strip_timing(&fast.summary)? != strip_timing(&rows[0].1.summary)? {
                bail!("{}: the fast path's summary differs from the per-op path's", scn.spec.name);
            }
            rows.push(("fast", fast));
        }
        let base = rows[0].1.median;
        for (name, r) in &rows {
            let s = &r.summary;
            let events = s.op_events;
            // Op events per wall second (on the fast path, ops simulated per second),
            // against the rate at which the replayed cluster produces operators (ops
            // per simulated second): the headroom a live scheduler has.
            println!(
                "{:<16} {:>10} {:>7} {:>12} {:>11} {:>8.2} {:>9.2} {:>11.2} {:>12.2} {:>13.0} {:>10.2}µs {:>11.0} {:>7.2}×",
                scn.spec.name,
                a.policy,
                name,
                events,
                r.fast_iterations,
                r.best,
                r.median,
                events as f64 / r.best / 1e6,
                events as f64 / r.median / 1e6,
                s.timing.decisions_per_s,
                s.timing.decision_p99_us,
                events as f64 / s.duration_s.max(1e-9),
                base / r.median.max(1e-9)
            );
        }
    }
    Ok(())
}

fn strip_timing(s: &Summary) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(s)?;
    if let Some(o) = v.as_object_mut() {
        o.remove("timing");
    }
    Ok(v)
}
