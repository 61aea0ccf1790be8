//! `slicesched sweep --family DIR`: the goodput sweep of every scenario in a folder,
//! and the distribution of each policy's goodput ratio over `dedicated`.
//!
//! Every scenario's searches run at once on `--jobs` threads (`chains.rs`); each one's
//! `sweep.json` and plot go to `OUT/<file stem>/` as soon as it is done, the family's to
//! `OUT/`. With `--resume`, a scenario whose folder holds a sweep of the same file and
//! settings is taken from it (`earlier`).

use super::chains::{sweep_all, Job};
use super::{load_draws, Log, Sweeper};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use slicesched_report::{FamilyEntry, FamilyReport, SweepReport, SweepTiming};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The scenario files of `dir` (`*.toml`), by file name.
fn scenario_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("--family {}: cannot read the folder", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("--family {}: no scenario (*.toml) in the folder", dir.display());
    }
    Ok(files)
}

/// The sweep in `path`, if it was swept from the file whose SHA-256 is `digest`, for
/// `duration_s`, with `sw`'s search and settings, and holds every policy and target `sw`
/// asks; Ok(None) where there is no file, Err(why not) where it does not fit.
fn earlier(path: &Path, digest: &str, duration_s: Option<f64>, sw: &Sweeper) -> Result<Option<SweepReport>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let r: SweepReport =
        serde_json::from_slice(&bytes).map_err(|e| format!("{} is not a sweep report: {e}", path.display()))?;
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
    let missing = sw
        .policies
        .iter()
        .flat_map(|p| sw.targets.iter().map(move |t| (p, *t)))
        .find(|(p, t)| !r.results.iter().any(|x| &x.policy == *p && same(x.target, *t)));
    let why = if r.scenario_sha256.as_deref() != Some(digest) {
        "it was swept from another version of the scenario file (or records none)".to_string()
    } else if r.duration_s != duration_s {
        format!("it replayed {:?} s, this run {:?} s", r.duration_s, duration_s)
    } else if !same(r.precision, sw.opts.precision)
        || !same(r.min_scale, sw.opts.min_scale)
        || !same(r.max_scale, sw.opts.max_scale)
    {
        format!(
            "its search (precision {}, scales {} to {}) is not this run's ({}, {} to {})",
            r.precision, r.min_scale, r.max_scale, sw.opts.precision, sw.opts.min_scale, sw.opts.max_scale
        )
    } else if r.seeds.len().max(1) != sw.seeds as usize {
        format!("it replayed {} draw(s) of each point, this run {}", r.seeds.len().max(1), sw.seeds)
    } else if r.kv_migration != sw.kv_migration.name() || r.replan != sw.replan.name() || r.plan != sw.plan.name() {
        format!("it ran with --kv-migration {} --replan {} --plan {}", r.kv_migration, r.replan, r.plan)
    } else if let Some((p, t)) = missing {
        format!("it has no answer for {p} at {}% violations", 100.0 * t)
    } else {
        return Ok(Some(r));
    };
    Err(why)
}

/// What the family report keeps of one scenario's sweep.
fn entry(name: String, file: &Path, report: SweepReport) -> FamilyEntry {
    FamilyEntry {
        scenario: name,
        file: file.display().to_string(),
        not_monotone: slicesched_report::NotMonotone::of(&report),
        results: report.results,
        ratios: report.ratios,
    }
}

pub(super) fn run(
    dir: &Path,
    duration_s: Option<f64>,
    out_dir: &Path,
    resume: bool,
    sw: &Sweeper,
    log: &Log,
    started: Instant,
) -> Result<()> {
    if !sw.policies.iter().any(|p| slicesched_report::is_dedicated(p)) {
        bail!("--family reports ratios over `dedicated`: include it in --policies");
    }
    let files = scenario_files(dir)?;
    // Every scenario loads before the first replay: a typo in the tenth file should not
    // cost the first nine sweeps.
    let draws = files.iter().map(|f| load_draws(f, duration_s, sw.seeds)).collect::<Result<Vec<_>>>()?;
    let scenarios: Vec<&slicesched_sim::Scenario> = draws.iter().map(|d| &d[0]).collect();
    let digests = files.iter().map(|f| super::file_sha256(f)).collect::<Result<Vec<_>>>()?;
    let stem = |i: usize| {
        files[i].file_stem().map_or_else(|| scenarios[i].spec.name.clone(), |s| s.to_string_lossy().into_owned())
    };
    let bar = log.mp.add(ProgressBar::new(files.len() as u64));
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} scenarios done {msg}")
            .expect("static template"),
    );
    let mut entries: Vec<Option<FamilyEntry>> = files.iter().map(|_| None).collect();
    let mut timing = SweepTiming { jobs: sw.jobs, ..SweepTiming::default() };
    let mut ooms = 0;
    let mut todo = Vec::new();
    for (i, file) in files.iter().enumerate() {
        if resume {
            let path = out_dir.join(stem(i)).join("sweep.json");
            match earlier(&path, &digests[i], scenarios[i].spec.duration_s, sw) {
                Ok(Some(report)) => {
                    log.note(format!("{}: taken from {} ({})", file.display(), path.display(), ratios_line(&report)));
                    ooms += report.points.iter().map(|p| p.oom_events).sum::<u64>();
                    entries[i] = Some(entry(scenarios[i].spec.name.clone(), file, report));
                    bar.inc(1);
                    continue;
                }
                Ok(None) => {}
                Err(why) => {
                    log.warn(format!("{}: sweeping again, not taken from {}: {why}", file.display(), path.display()))
                }
            }
        }
        todo.push(i);
    }
    let jobs: Vec<Job<'_>> =
        todo.iter().map(|&i| Job { draws: &draws[i], label: Some(scenarios[i].spec.name.clone()) }).collect();
    // Each scenario's sweep.json is written as soon as its last search ends.
    sweep_all(&jobs, sw, log, started, |k, mut report| {
        let i = todo[k];
        let (file, name) = (&files[i], scenarios[i].spec.name.clone());
        report.scenario_sha256 = Some(digests[i].clone());
        slicesched_report::write_sweep(&out_dir.join(stem(i)), &report)
            .with_context(|| format!("writing the sweep of {}", file.display()))?;
        log.note(format!("{}: {}", file.display(), ratios_line(&report)));
        timing.replay_wall_s += report.timing.replay_wall_s;
        ooms += report.points.iter().map(|p| p.oom_events).sum::<u64>();
        entries[i] = Some(entry(name.clone(), file, report));
        bar.set_message(name);
        bar.inc(1);
        Ok(())
    })?;
    bar.finish_and_clear();
    let entries: Vec<FamilyEntry> = entries.into_iter().map(|e| e.expect("every scenario reported")).collect();
    timing.wall_s = started.elapsed().as_secs_f64();
    let spread = slicesched_report::ratio_spread(&entries, &sw.policies, &sw.targets);
    let report = FamilyReport {
        family: dir.display().to_string(),
        policies: sw.policies.clone(),
        targets: sw.targets.clone(),
        spread,
        scenarios: entries,
        timing,
    };
    let mut out = std::io::stdout().lock();
    write!(out, "{}", slicesched_report::family_table(&report))?;
    writeln!(
        out,
        "{} scenarios in {:.1} s wall ({:.1} s of replay on {} jobs)",
        report.scenarios.len(),
        report.timing.wall_s,
        report.timing.replay_wall_s,
        sw.jobs
    )?;
    let files = slicesched_report::write_family(out_dir, &report).context("writing the family report")?;
    for f in files {
        writeln!(out, "wrote {}", f.display())?;
    }
    if ooms > 0 {
        eprintln!("WARNING: {ooms} OOM events across the family's replays (must be 0); see each sweep.json");
    }
    Ok(())
}

/// One scenario's ratios in a line, for the log.
fn ratios_line(r: &slicesched_report::SweepReport) -> String {
    r.ratios
        .iter()
        .filter(|q| q.policy != "dedicated")
        .map(|q| match q.goodput_vs_dedicated {
            Some(v) => format!("{} {v:.2}x @ {}%", q.policy, 100.0 * q.target),
            None => format!("{} n/a @ {}%", q.policy, 100.0 * q.target),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
