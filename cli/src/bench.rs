//! `slicesched bench`: simulator throughput and whole-replay wall time.

use anyhow::{Context, Result};
use slicesched_sim::Scenario;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Scenarios to replay (default: the shipped azure-code-4t).
    #[arg(long, default_value = "scenarios/azure-code-4t.toml")]
    scenario: Vec<PathBuf>,
    /// Policy to replay under.
    #[arg(long, default_value = "dedicated")]
    policy: String,
    /// Replays per scenario; the table reports the best and the median.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
}

pub fn run(a: Args) -> Result<()> {
    println!(
        "{:<16} {:>12} {:>10} {:>10} {:>14} {:>14}",
        "scenario", "op events", "best s", "median s", "best Mev/s", "median Mev/s"
    );
    for path in &a.scenario {
        let scn = Scenario::from_file(path).with_context(|| format!("loading {}", path.display()))?;
        let mut walls = Vec::new();
        let mut events = 0;
        for _ in 0..a.repeat.max(1) {
            let r = crate::replay::replay_with_progress(&scn, &a.policy, true)?;
            events = r.summary.op_events;
            walls.push(r.summary.timing.sim_wall_s);
        }
        walls.sort_by(f64::total_cmp);
        let (best, med) = (walls[0], walls[walls.len() / 2]);
        println!(
            "{:<16} {:>12} {:>10.2} {:>10.2} {:>14.2} {:>14.2}",
            scn.spec.name,
            events,
            best,
            med,
            events as f64 / best / 1e6,
            events as f64 / med / 1e6
        );
    }
    Ok(())
}
