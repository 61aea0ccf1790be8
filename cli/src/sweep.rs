//! `slicesched sweep`: the goodput of each policy, as the highest arrival-rate scale it
//! serves within a violation target.
//!
//! Each policy's searches (one per target) advance in rounds of their own: a round
//! gathers the scales they want next, replays the new ones, and feeds the results back
//! to every search of that policy, so targets share points; the rounds of different
//! policies (and, with `--family`, scenarios) overlap on `--jobs` threads (`chains.rs`).
//!
//! `--family DIR` sweeps every scenario of a folder at once this way and reports the
//! distribution of each policy's goodput ratio over `dedicated` (`family.rs`).

mod chains;
mod family;

use anyhow::{ensure, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget};
use slicesched_report::search::{next_step, Outcome, Points, SearchOpts, Step};
use slicesched_report::{SweepPoint, SweepReport, SweepResult, SweepTiming};
use slicesched_sim::{ReplayOptions, Scenario};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario TOML file.
    #[arg(long, required_unless_present = "family", conflicts_with = "family")]
    scenario: Option<PathBuf>,
    /// A folder of scenario TOML files: sweep each and report the distribution of each
    /// policy's goodput ratio over `dedicated` (family.json, family_goodput.svg).
    #[arg(long)]
    family: Option<PathBuf>,
    /// Replay this many seconds of each scenario instead of its `duration_s`.
    #[arg(long, value_parser = crate::args::positive)]
    duration_s: Option<f64>,
    /// Comma-separated policies (default: every built-in).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Comma-separated fractions of requests allowed to violate their SLA.
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.09", value_parser = crate::args::fraction)]
    violation_targets: Vec<f64>,
    /// Output directory for sweep.json and violation_vs_rate.svg (with --family: those of
    /// each scenario in a folder named after its file, and family.json, family_goodput.svg).
    #[arg(long)]
    out: PathBuf,
    /// Relative precision of each rate scale found.
    #[arg(long, default_value_t = 0.03, value_parser = crate::args::positive)]
    precision: f64,
    /// Smallest rate scale tried; a policy violating there gets rate scale 0.
    #[arg(long, default_value_t = 0.05, value_parser = crate::args::positive)]
    min_scale: f64,
    /// Largest rate scale tried.
    #[arg(long, default_value_t = 64.0, value_parser = crate::args::positive)]
    max_scale: f64,
    /// Replays run at once (default: available parallelism).
    #[arg(long, value_parser = crate::args::at_least_one::<usize>)]
    jobs: Option<usize>,
    /// When a running request's KV may move between its tenant's instances: `off`,
    /// `memory`, `load` (as `replay --kv-migration`).
    #[arg(long, default_value = "off")]
    kv_migration: slicesched_sim::KvMigration,
    /// Whether the planner's copies stay for the whole run or come and go with the load:
    /// `static`, `online` (as `replay --replan`).
    #[arg(long, default_value = "static")]
    replan: slicesched_sim::Replan,
    /// Which plan an operator-level policy runs on: `whatif` (each of the planner's
    /// candidates replayed on the busiest stretch of the load, the best kept), or one
    /// candidate fixed: `tier-first`, `serving-first`, `serving-only` (as `replay --plan`).
    #[arg(long, default_value = "whatif")]
    plan: slicesched_sim::PlanPick,
    /// With --family: take a scenario's sweep from `OUT/<file stem>/sweep.json` where an
    /// earlier run (of `--family` or of `--scenario` into that folder) left one swept from
    /// the same file, for as long, with the same search and settings, for every policy
    /// and target asked; sweep the others. An interrupted family sweep goes on where it
    /// stopped.
    #[arg(long)]
    resume: bool,
    /// Draws of each scenario replayed at every scale: the file's seed and K − 1 more
    /// (`draw_seed`); a point's violation rate is that of all their requests together.
    /// Where a policy's violation curve is noisy (a few bursts decide a 1% target), one
    /// draw's answer moves by several percent between neighbouring scales; K draws cost
    /// K times the replays (and replay each draw whole: no early stop).
    #[arg(long, default_value_t = 1, value_parser = crate::args::at_least_one::<u32>)]
    seeds: u32,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

/// Progress bars on a terminal; one line per replay when stderr is a log file.
pub(crate) struct Log {
    mp: MultiProgress,
    quiet: bool,
    terminal: bool,
}

impl Log {
    fn new(quiet: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let target = if quiet || !terminal { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
        Log { mp: MultiProgress::with_draw_target(target), quiet, terminal }
    }

    fn note(&self, line: String) {
        if !self.quiet {
            self.warn(line);
        }
    }

    /// Printed even with `--quiet`.
    fn warn(&self, line: String) {
        if self.terminal && !self.quiet {
            // Above the bars, so they do not overwrite it.
            let _ = self.mp.println(line);
        } else {
            eprintln!("{line}");
        }
    }
}

/// What was measured at one scale (its draws pooled).
type Measured = slicesched_report::PointFigures;

/// Everything measured for one policy.
#[derive(Default)]
struct PolicyPoints {
    points: Points,
    measured: Vec<(f64, Measured)>,
}

impl PolicyPoints {
    fn at(&self, scale: f64) -> Option<Measured> {
        self.measured.iter().find(|m| (m.0 - scale).abs() <= 1e-9 * scale.abs()).map(|m| m.1)
    }
}

/// What every scenario of a sweep is swept with.
pub(crate) struct Sweeper {
    policies: Vec<String>,
    targets: Vec<f64>,
    opts: SearchOpts,
    jobs: usize,
    kv_migration: slicesched_sim::KvMigration,
    replan: slicesched_sim::Replan,
    plan: slicesched_sim::PlanPick,
    /// Draws replayed per point (`--seeds`).
    seeds: u32,
}

use slicesched_sim::draw_seed;

/// The `seeds` draws of a scenario (`draw_seed`), the file's own first.
pub(crate) fn load_draws(path: &std::path::Path, duration_s: Option<f64>, seeds: u32) -> Result<Vec<Scenario>> {
    let first = load(path, duration_s)?;
    let base = first.spec.seed;
    let mut draws = vec![first];
    for k in 1..seeds {
        draws.push(load_drawn(path, duration_s, Some(draw_seed(base, k)))?);
    }
    Ok(draws)
}

/// SHA-256 (hex) of a scenario file's bytes, recorded in its sweep (`--resume`).
pub(crate) fn file_sha256(path: &std::path::Path) -> Result<String> {
    use sha2::Digest;
    let bytes = std::fs::read(path).with_context(|| format!("reading scenario {}", path.display()))?;
    Ok(sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

/// Loads a scenario, replaying `duration_s` seconds of it when given.
pub(crate) fn load(path: &std::path::Path, duration_s: Option<f64>) -> Result<Scenario> {
    load_drawn(path, duration_s, None)
}

/// [`load`], with the scenario's seed replaced by `seed` where one is given.
pub(crate) fn load_drawn(path: &std::path::Path, duration_s: Option<f64>, seed: Option<u64>) -> Result<Scenario> {
    let what = match seed {
        Some(s) => format!("loading scenario {} with seed {s}", path.display()),
        None => format!("loading scenario {}", path.display()),
    };
    Scenario::from_file_drawn(path, duration_s, seed).with_context(|| what)
}

pub fn run(a: Args) -> Result<()> {
    let started = Instant::now();
    let policies = crate::policies::resolve(&a.policies)?;
    // A sweep's time is mostly its replays, and a Wasm build runs op by op through the
    // sandbox, never on the fast path: 100 s of `mix-6t` under `dedicated` at rate scale
    // 0.84 took 9.2 s so, 0.6 s natively.
    for p in &policies {
        crate::policies::note_wasm(p);
    }
    ensure!(!a.resume || a.family.is_some(), "--resume takes earlier sweeps of a --family folder: give --family");
    ensure!(!a.violation_targets.is_empty(), "--violation-targets is empty");
    for t in &a.violation_targets {
        ensure!((0.0..1.0).contains(t), "violation target {t} is not a fraction in [0, 1)");
    }
    ensure!(a.precision > 0.0, "--precision must be positive");
    ensure!(a.min_scale > 0.0 && a.min_scale < a.max_scale, "need 0 < --min-scale < --max-scale");
    let opts = SearchOpts { precision: a.precision, min_scale: a.min_scale, max_scale: a.max_scale };
    let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let sweeper = Sweeper {
        policies,
        targets: a.violation_targets.clone(),
        opts,
        jobs,
        kv_migration: a.kv_migration,
        replan: a.replan,
        plan: a.plan,
        seeds: a.seeds,
    };
    let log = Log::new(a.quiet);
    if let Some(dir) = &a.family {
        return family::run(dir, a.duration_s, &a.out, a.resume, &sweeper, &log, started);
    }
    let path = a.scenario.as_ref().expect("clap requires --scenario without --family");
    let draws = load_draws(path, a.duration_s, a.seeds)?;
    let digest = file_sha256(path)?;
    let mut report = sweep_scenario(&draws, &sweeper, &log, started)?;
    report.scenario_sha256 = Some(digest);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", slicesched_report::sweep_table(&report))?;
    let replay_s = report.timing.replay_wall_s;
    writeln!(
        out,
        "{} replays in {:.1} s wall ({:.1} s of replay on {jobs} jobs)",
        report.points.len(),
        report.timing.wall_s,
        replay_s
    )?;
    let files = slicesched_report::write_sweep(&a.out, &report).context("writing the sweep report")?;
    for f in files {
        writeln!(out, "wrote {}", f.display())?;
    }
    let ooms: u64 = report.points.iter().map(|p| p.oom_events).sum();
    if ooms > 0 {
        eprintln!("WARNING: {ooms} OOM events across the sweep's replays (must be 0); see `points` in sweep.json");
    }
    Ok(())
}

/// Every policy's goodput search on one scenario (its draws, the file's own first).
pub(crate) fn sweep_scenario(draws: &[Scenario], sw: &Sweeper, log: &Log, started: Instant) -> Result<SweepReport> {
    let mut out = None;
    chains::sweep_all(&[chains::Job { draws, label: None }], sw, log, started, |_, r| {
        out = Some(r);
        Ok(())
    })?;
    Ok(out.expect("the one scenario's report"))
}

/// The scales one chain (a policy's searches on one scenario) replays next, deduplicated
/// across its targets; records the searches that finished. `width` new scales per
/// search at most (more than one turns bracketing into strides, bisection into splits).
fn next_round(
    pts: &PolicyPoints,
    outcomes: &mut [Option<Outcome>],
    targets: &[f64],
    opts: &SearchOpts,
    width: usize,
) -> Vec<f64> {
    let mut work: Vec<f64> = Vec::new();
    for (slot, &target) in outcomes.iter_mut().zip(targets) {
        if slot.is_some() {
            continue;
        }
        match next_step(&pts.points, target, opts, width) {
            Step::Done(o) => *slot = Some(o),
            Step::Measure(scales) => {
                for s in scales {
                    if !work.iter().any(|&x| (x - s).abs() <= 1e-9 * s) {
                        work.push(s);
                    }
                }
            }
        }
    }
    work
}

/// What one draw's replay at one scale measured.
type Draw = slicesched_report::DrawFigures;

/// Replays one draw of a point; `stop_above`: the violation share past which the replay
/// stops (the point then violates every target and nothing more is needed from it).
fn replay_draw(
    scenario: &Scenario,
    policy: &str,
    scale: f64,
    stop_above: Option<f64>,
    sw: &Sweeper,
    bar: &ProgressBar,
) -> Result<Draw> {
    // Each policy replays on the deployment it asks for (its replicas, if any).
    let opts = ReplayOptions {
        stop_above_violation: stop_above,
        kv_migration: sw.kv_migration,
        replan: sw.replan,
        plan: sw.plan,
        ..ReplayOptions::default()
    };
    let r = crate::policies::replay_policy(&scenario.with_rate_scale(scale), policy, opts, &mut |p| {
        bar.set_position(1000 * p.sim_ns.min(p.horizon_ns) / p.horizon_ns.max(1));
        bar.set_message(format!("{}/{} requests done", p.completed, p.requests));
    })?;
    let s = &r.summary;
    Ok(Draw {
        requests: s.requests,
        violation_rate: s.violation_rate,
        violation_at_stop: r.violation_at_stop,
        prompt_tokens_per_s: s.prompt_tokens_per_s,
        output_tokens_per_s: s.output_tokens_per_s,
        oom_events: s.oom_events,
        // The point's cost: the planner's what-if and the replay.
        wall_s: s.timing.sim_wall_s + s.timing.plan_whatif_s,
    })
}

fn build_report(
    draws: &[Scenario],
    sw: &Sweeper,
    per_policy: &[&PolicyPoints],
    outcomes: &[Option<Outcome>],
    started: Instant,
    refused: f64,
) -> SweepReport {
    let (policies, targets, opts, jobs) = (&sw.policies, &sw.targets, &sw.opts, sw.jobs);
    let mut results = Vec::new();
    for (p, policy) in policies.iter().enumerate() {
        for (t, &target) in targets.iter().enumerate() {
            let outcome = outcomes[p * targets.len() + t].expect("every search finished");
            let pts = per_policy[p];
            let (rate_scale, status) = match outcome {
                Outcome::Found(s) => (s, "found"),
                Outcome::CappedAtMax => (opts.max_scale, "capped_at_max_scale"),
                Outcome::ViolatesAtMin => (0.0, "violates_at_min_scale"),
            };
            // Without an answer, the figures are those of the lowest (violating) scale tried.
            let lowest = pts.measured.iter().min_by(|x, y| x.0.total_cmp(&y.0)).map(|x| x.1);
            // A policy whose every target is below the refused share replayed nothing.
            let unmeasured = Measured {
                violation_rate: refused,
                prompt_tokens_per_s: 0.0,
                output_tokens_per_s: 0.0,
                oom_events: 0,
                wall_s: 0.0,
                stopped_early: false,
            };
            let m = if rate_scale > 0.0 { pts.at(rate_scale) } else { lowest.or(Some(unmeasured)) }
                .expect("the answer is a measured point");
            let served = rate_scale > 0.0;
            results.push(SweepResult {
                policy: policy.clone(),
                target,
                rate_scale,
                prompt_tokens_per_s: if served { m.prompt_tokens_per_s } else { 0.0 },
                output_tokens_per_s: if served { m.output_tokens_per_s } else { 0.0 },
                violation_rate: m.violation_rate,
                oom_events: m.oom_events,
                status: status.into(),
            });
        }
    }
    let ratios = slicesched_report::goodput_ratios(&results);
    let points: Vec<SweepPoint> = policies
        .iter()
        .zip(per_policy)
        .flat_map(|(policy, &pts)| {
            let mut measured = pts.measured.clone();
            measured.sort_by(|x, y| x.0.total_cmp(&y.0));
            measured.into_iter().map(move |(scale, m)| SweepPoint::new(policy, scale, m))
        })
        .collect();
    let replay_wall_s = points.iter().map(|p| p.wall_s).sum();
    let scenario = &draws[0];
    SweepReport {
        scenario: scenario.spec.name.clone(),
        precision: opts.precision,
        min_scale: opts.min_scale,
        max_scale: opts.max_scale,
        refused_share: refused,
        kv_migration: sw.kv_migration.name().into(),
        replan: sw.replan.name().into(),
        plan: sw.plan.name().into(),
        scenario_sha256: None,
        duration_s: scenario.spec.duration_s,
        seeds: if draws.len() > 1 { draws.iter().map(|d| d.spec.seed).collect() } else { Vec::new() },
        results,
        ratios,
        points,
        timing: SweepTiming { wall_s: started.elapsed().as_secs_f64(), replay_wall_s, jobs },
    }
}
