//! `slicesched bench`: simulator throughput and whole-replay wall time;
//! `slicesched bench exec`: the executor's kernels, overheads and tokens/s.

mod exec;

use anyhow::{Context, Result};
use slicesched_sim::Scenario;
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
    /// Replays per scenario; the table reports the best and the median.
    #[arg(long, default_value_t = 3, value_parser = crate::args::at_least_one::<usize>)]
    repeat: usize,
}

#[derive(clap::Subcommand)]
enum What {
    /// The executor (CPU backend): GEMM GFLOP/s against `matrixmultiply` bare and the
    /// measured peak, overhead per op, tokens/s of tiny models.
    Exec(exec::Args),
}

pub fn run(a: Args) -> Result<()> {
    if let Some(What::Exec(e)) = a.what {
        return exec::run(e);
    }
    println!(
        "{:<16} {:>10} {:>12} {:>8} {:>9} {:>11} {:>12} {:>13} {:>12} {:>11}",
        "scenario",
        "policy",
        "op events",
        "best s",
        "median s",
        "best Mev/s",
        "median Mev/s",
        "decisions/s",
        "decision p99",
        "cluster ops/s"
    );
    for path in &a.scenario {
        let scn = Scenario::from_file(path).with_context(|| format!("loading {}", path.display()))?;
        let mut walls = Vec::new();
        let mut last = None;
        for _ in 0..a.repeat.max(1) {
            let r = crate::replay::replay_with_progress(&scn, &a.policy, true)?;
            walls.push(r.summary.timing.sim_wall_s);
            last = Some(r.summary);
        }
        let s = last.expect("at least one replay");
        let events = s.op_events;
        walls.sort_by(f64::total_cmp);
        let (best, med) = (walls[0], walls[walls.len() / 2]);
        // Decisions the policy can make per wall second, against the rate at which the
        // replayed cluster produces operators (ops per simulated second): the headroom
        // a live scheduler has.
        println!(
            "{:<16} {:>10} {:>12} {:>8.2} {:>9.2} {:>11.2} {:>12.2} {:>13.0} {:>10.2}µs {:>11.0}",
            scn.spec.name,
            a.policy,
            events,
            best,
            med,
            events as f64 / best / 1e6,
            events as f64 / med / 1e6,
            s.timing.decisions_per_s,
            s.timing.decision_p99_us,
            events as f64 / s.duration_s.max(1e-9)
        );
    }
    Ok(())
}
