//! `slicesched replay`.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use slicesched_sim::{ReplayOptions, ReplayResult, Scenario};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario TOML file.
    #[arg(long)]
    scenario: PathBuf,
    /// Policy: a shipped name (its Wasm build when built), `native:NAME`, or a .wasm plugin.
    #[arg(long, default_value = "dedicated")]
    policy: String,
    /// Output directory for summary.json, requests.csv and plots.
    #[arg(long)]
    out: PathBuf,
    /// Arrival-rate scale (1 replays the traces as they are).
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::positive)]
    rate_scale: f64,
    /// Replay this many seconds of the scenario instead of its `duration_s` (as `sweep
    /// --duration-s` does, so a sweep's point can be replayed alone).
    #[arg(long, value_parser = crate::args::positive)]
    duration_s: Option<f64>,
    /// Replay another draw of the scenario: its `seed` replaced by this one (synthetic
    /// loads are drawn again; traces read from files keep their requests, and `split`s
    /// their own seeds). `sweep --seeds K` replays the draws `slicesched_sim::draw_seed` names.
    #[arg(long, conflicts_with = "draw")]
    seed: Option<u64>,
    /// Replay draw K of the scenario: the one `sweep --seeds` replays as its (K+1)-th
    /// (`slicesched_sim::draw_seed` of the file's seed; 0 is the file's own), so one draw
    /// of a sweep's point can be looked at alone.
    #[arg(long)]
    draw: Option<u32>,
    /// When a running request's KV may move to another instance of its tenant: `off`,
    /// `memory` (when a queue waits for KV blocks), `load` (also to shed the load of an
    /// instance that is behind).
    #[arg(long, default_value = "off")]
    kv_migration: slicesched_sim::KvMigration,
    /// Whether the planner's copies stay for the whole run (`static`) or are loaded,
    /// drained and dropped as the metered load shifts (`online`).
    #[arg(long, default_value = "static")]
    replan: slicesched_sim::Replan,
    /// Which plan an operator-level policy runs on: `whatif` (each of the planner's
    /// candidate plans replayed on the busiest stretch of the load, up to
    /// two minutes, the one with the fewest violations kept; `summary.json`'s `plan`
    /// says which and why), or one candidate fixed: `tier-first`, `serving-first`,
    /// `serving-only` (the request-level plan, `pooled`'s).
    #[arg(long, default_value = "whatif")]
    plan: slicesched_sim::PlanPick,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Replays and times a scenario under a policy, with a progress bar on stderr.
pub fn replay_with_progress(
    scenario: &Scenario,
    policy: &str,
    quiet: bool,
    kv_migration: slicesched_sim::KvMigration,
    replan: slicesched_sim::Replan,
    plan: slicesched_sim::PlanPick,
) -> Result<ReplayResult> {
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(1000) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} sim {msg}").expect("static template"),
    );
    let opts = ReplayOptions { time_decisions: true, kv_migration, replan, plan, ..ReplayOptions::default() };
    // The planner's what-if replays its candidate plans first (seconds to a minute).
    bar.set_message("planning: replaying the candidate plans on the busiest two minutes of the load");
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let result = crate::policies::replay_policy(scenario, policy, opts, &mut |p| {
        bar.set_position(1000 * p.sim_ns.min(p.horizon_ns) / p.horizon_ns.max(1));
        bar.set_message(format!(
            "{:.0} s, {:.1} M op events, {}/{} requests done",
            p.sim_ns as f64 / 1e9,
            p.op_events as f64 / 1e6,
            p.completed,
            p.requests
        ));
    });
    bar.finish_and_clear();
    result
}

pub fn run(a: Args) -> Result<()> {
    // `--rate-scale` and `--duration-s` are finite and positive: clap checks them (`args::positive`).
    let seed = match a.draw {
        Some(k) => {
            let spec = slicesched_sim::Scenario::read_spec(&a.scenario)
                .with_context(|| format!("loading scenario {}", a.scenario.display()))?;
            Some(slicesched_sim::draw_seed(spec.seed, k))
        }
        None => a.seed,
    };
    let mut scenario = crate::sweep::load_drawn(&a.scenario, a.duration_s, seed)?;
    if a.rate_scale != 1.0 {
        scenario = scenario.with_rate_scale(a.rate_scale);
    }
    let result = replay_with_progress(&scenario, &a.policy, a.quiet, a.kv_migration, a.replan, a.plan)?;
    let names: Vec<String> = scenario.tenants.iter().map(|t| t.name.clone()).collect();
    let files = slicesched_report::write_replay(&a.out, &result, &names).context("writing the report")?;
    let mut out = std::io::stdout().lock();
    write!(out, "{}", slicesched_report::summary_table(&result.summary))?;
    writeln!(
        out,
        "simulated {} op events in {:.2} s wall ({:.2} M op events/s)",
        result.summary.op_events,
        result.summary.timing.sim_wall_s,
        result.summary.timing.op_events_per_s / 1e6
    )?;
    for f in files {
        writeln!(out, "wrote {}", f.display())?;
    }
    if result.summary.oom_events > 0 {
        bail!("{} OOM events: the memory-safety invariant was broken", result.summary.oom_events);
    }
    Ok(())
}
