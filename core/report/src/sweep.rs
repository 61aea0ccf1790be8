//! Goodput sweep reports: `sweep.json` and the violation-rate-against-load plot.

use crate::plots::PALETTE;
use crate::{write_atomic, ReportError};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The highest rate scale one policy sustains under one violation target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepResult {
    pub policy: String,
    pub target: f64,
    /// 0 when even the smallest scale tried violates the target.
    pub rate_scale: f64,
    /// Figures of the replay at `rate_scale` (zero throughput when `rate_scale` is 0).
    pub prompt_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub violation_rate: f64,
    pub oom_events: u64,
    /// `found`, `violates_at_min_scale` or `capped_at_max_scale`.
    pub status: String,
}

/// `rate_scale` relative to `dedicated` at the same target; None where that is undefined.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepRatio {
    pub policy: String,
    pub target: f64,
    pub goodput_vs_dedicated: Option<f64>,
}

/// Whether a policy name is the container-level baseline: `dedicated`, in its Wasm
/// build or natively (`native:dedicated`, the same policy, far faster to replay).
pub fn is_dedicated(policy: &str) -> bool {
    policy == "dedicated" || policy == "native:dedicated"
}

/// Each result's goodput relative to `dedicated` at the same target (what the CLI's and
/// the control plane's sweeps both report).
pub fn goodput_ratios(results: &[SweepResult]) -> Vec<SweepRatio> {
    results
        .iter()
        .map(|r| {
            let base = results.iter().find(|d| is_dedicated(&d.policy) && d.target == r.target).map(|d| d.rate_scale);
            let goodput_vs_dedicated = base.filter(|b| *b > 0.0).map(|b| r.rate_scale / b);
            SweepRatio { policy: r.policy.clone(), target: r.target, goodput_vs_dedicated }
        })
        .collect()
}

/// One replay of the sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepPoint {
    pub policy: String,
    pub rate_scale: f64,
    pub violation_rate: f64,
    pub prompt_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub oom_events: u64,
    pub wall_s: f64,
    /// The replay stopped once more requests had violated than the largest target
    /// allows (`violation_rate` is then the share known to violate by that time, a lower
    /// bound, and the token rates cover that part only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped_early: bool,
}

/// What one draw of a scenario measured at one rate scale (`sweep --seeds`, a control
/// plane sweep's `seeds`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DrawFigures {
    pub requests: u64,
    pub violation_rate: f64,
    /// The share known to violate when the replay stopped early (a lower bound).
    pub violation_at_stop: Option<f64>,
    pub prompt_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub oom_events: u64,
    pub wall_s: f64,
}

/// What a sweep measured at one point (one rate scale of one policy), its draws pooled:
/// a [`SweepPoint`] without its name.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointFigures {
    pub violation_rate: f64,
    pub prompt_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub oom_events: u64,
    pub wall_s: f64,
    pub stopped_early: bool,
}

impl SweepPoint {
    pub fn new(policy: &str, rate_scale: f64, f: PointFigures) -> Self {
        SweepPoint {
            policy: policy.to_string(),
            rate_scale,
            violation_rate: f.violation_rate,
            prompt_tokens_per_s: f.prompt_tokens_per_s,
            output_tokens_per_s: f.output_tokens_per_s,
            oom_events: f.oom_events,
            wall_s: f.wall_s,
            stopped_early: f.stopped_early,
        }
    }
}

/// A point from its draws, in draw order (so the figures do not depend on which replay
/// ended first): the violation rate of all their requests together (a draw with more
/// requests weighs more, as one long replay would), the mean throughput, every OOM.
pub fn pool_draws(draws: &[DrawFigures]) -> PointFigures {
    let n = draws.len().max(1) as f64;
    let requests: u64 = draws.iter().map(|d| d.requests).sum();
    let violating: f64 = draws.iter().map(|d| d.violation_rate * d.requests as f64).sum();
    let stopped_at = draws.iter().find_map(|d| d.violation_at_stop);
    PointFigures {
        stopped_early: stopped_at.is_some(),
        violation_rate: stopped_at.unwrap_or(if requests > 0 { violating / requests as f64 } else { 0.0 }),
        prompt_tokens_per_s: draws.iter().map(|d| d.prompt_tokens_per_s).sum::<f64>() / n,
        output_tokens_per_s: draws.iter().map(|d| d.output_tokens_per_s).sum::<f64>() / n,
        oom_events: draws.iter().map(|d| d.oom_events).sum(),
        wall_s: draws.iter().map(|d| d.wall_s).sum(),
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SweepTiming {
    pub wall_s: f64,
    /// Sum of the replays' wall times: over `wall_s`, how well the jobs overlapped.
    pub replay_wall_s: f64,
    pub jobs: usize,
}

/// `sweep.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepReport {
    pub scenario: String,
    pub precision: f64,
    pub min_scale: f64,
    pub max_scale: f64,
    /// Share of the scenario's requests refused at arrival for their length (longer
    /// than their model's context window): they violate under every policy at every
    /// scale, so a target below it has no goodput.
    pub refused_share: f64,
    /// When requests' KV could move between a tenant's instances (`off`, `memory`,
    /// `load`: `ReplayOptions::kv_migration`).
    pub kv_migration: String,
    /// Whether the planned copies stayed for the whole run (`static`) or came and went
    /// with the load (`online`: `ReplayOptions::replan`).
    pub replan: String,
    /// Which plan an operator-level policy ran on (`--plan`: `whatif`, or one order of
    /// the planner's); `tier-first`, the only plan there was, in files written before.
    #[serde(default = "tier_first")]
    pub plan: String,
    /// SHA-256 (hex) of the scenario file swept and the seconds of it replayed (None: the
    /// whole trace): what `sweep --family --resume` checks before it takes a scenario's
    /// sweep from an earlier run. Absent from files written before they were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// The seeds of the draws every point replayed (`sweep --seeds K`, K > 1), its
    /// violation rate over all their requests; empty: one draw, the file's own seed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seeds: Vec<u64>,
    pub results: Vec<SweepResult>,
    pub ratios: Vec<SweepRatio>,
    pub points: Vec<SweepPoint>,
    pub timing: SweepTiming,
}

fn tier_first() -> String {
    slicesched_sim::PlanPick::BEFORE_WHATIF.name().into()
}

/// Writes `sweep.json` and `violation_vs_rate.svg` into `dir`; returns the paths.
pub fn write_sweep(dir: &Path, report: &SweepReport) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|err| ReportError::Io { path: dir.display().to_string(), err })?;
    let json_path = dir.join("sweep.json");
    let json = serde_json::to_vec_pretty(report)
        .map_err(|e| ReportError::Write { path: json_path.display().to_string(), msg: e.to_string() })?;
    write_atomic(&json_path, &json)?;
    let mut targets: Vec<f64> = report.results.iter().map(|r| r.target).collect();
    targets.sort_by(f64::total_cmp);
    targets.dedup();
    let svg = write_sweep_plot(dir, &report.scenario, &report.points, &targets)
        .map_err(|e| ReportError::Write { path: dir.display().to_string(), msg: e.to_string() })?;
    Ok(vec![json_path, svg])
}

/// Plots violation rate against rate scale (log x), one line per policy in order of first
/// appearance, with a dashed line at each target; writes `dir/violation_vs_rate.svg`.
pub fn write_sweep_plot(
    dir: &Path,
    scenario: &str,
    points: &[SweepPoint],
    targets: &[f64],
) -> Result<PathBuf, crate::PlotError> {
    let path = dir.join("violation_vs_rate.svg");
    let e = crate::plots::perr(&path);
    let mut policies: Vec<&str> = Vec::new();
    for p in points {
        if !policies.contains(&p.policy.as_str()) {
            policies.push(&p.policy);
        }
    }
    let scales = points.iter().map(|p| p.rate_scale).filter(|s| *s > 0.0);
    let x_min = scales.clone().fold(f64::INFINITY, f64::min);
    let x_max = scales.fold(0.0, f64::max);
    let (x_min, x_max) = if x_min.is_finite() { (x_min / 1.2, x_max * 1.2) } else { (0.5, 2.0) };
    let y_max = points.iter().map(|p| p.violation_rate).chain(targets.iter().copied()).fold(0.0, f64::max);
    let y_max = (100.0 * y_max * 1.1).clamp(1.0, 100.0);

    let root = SVGBackend::new(&path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let mut c = ChartBuilder::on(&root)
        .caption(format!("{scenario}: SLA violations against offered load"), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x_min..x_max).log_scale().base(2.0), 0f64..y_max)
        .map_err(&e)?;
    c.configure_mesh()
        .x_desc("arrival-rate scale (× the trace's rate, log)")
        .y_desc("requests violating their SLA (%)")
        .x_label_formatter(&|x| format!("{x:.4}").trim_end_matches('0').trim_end_matches('.').to_string())
        .draw()
        .map_err(&e)?;
    for (i, policy) in policies.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut pts: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.policy == *policy && p.rate_scale > 0.0)
            .map(|p| (p.rate_scale, 100.0 * p.violation_rate))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        c.draw_series(LineSeries::new(pts, color.stroke_width(2)).point_size(3))
            .map_err(&e)?
            .label(*policy)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    for t in targets {
        let y = 100.0 * t;
        c.draw_series(DashedLineSeries::new([(x_min, y), (x_max, y)], 6, 4, BLACK.mix(0.6).stroke_width(1)))
            .map_err(&e)?
            .label(format!("target {:.0}%", 100.0 * t))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.6)));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(&e)?;
    root.present().map_err(&e)?;
    Ok(path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_native_build_of_dedicated_is_the_baseline_too() {
        let r = |policy: &str, rate_scale: f64| SweepResult {
            policy: policy.into(),
            target: 0.09,
            rate_scale,
            prompt_tokens_per_s: 0.0,
            output_tokens_per_s: 0.0,
            violation_rate: 0.0,
            oom_events: 0,
            status: "found".into(),
        };
        let ratios = goodput_ratios(&[r("native:dedicated", 0.5), r("native:slice", 0.75)]);
        assert_eq!(ratios[1].goodput_vs_dedicated, Some(1.5));
        assert_eq!(ratios[0].goodput_vs_dedicated, Some(1.0));
    }

    fn point(policy: &str, rate_scale: f64, violation_rate: f64) -> SweepPoint {
        SweepPoint {
            policy: policy.into(),
            rate_scale,
            violation_rate,
            prompt_tokens_per_s: 1.0,
            output_tokens_per_s: 1.0,
            oom_events: 0,
            wall_s: 0.1,
            stopped_early: false,
        }
    }

    #[test]
    fn writes_json_and_a_plot_with_every_policy() {
        let dir = std::env::temp_dir().join(format!("slicesched-report-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let report = SweepReport {
            scenario: "s".into(),
            precision: 0.03,
            min_scale: 0.05,
            max_scale: 64.0,
            refused_share: 0.0,
            kv_migration: "off".into(),
            replan: "static".into(),
            plan: "whatif".into(),
            scenario_sha256: None,
            duration_s: None,
            seeds: Vec::new(),
            results: vec![SweepResult {
                policy: "dedicated".into(),
                target: 0.09,
                rate_scale: 0.5,
                prompt_tokens_per_s: 1.0,
                output_tokens_per_s: 1.0,
                violation_rate: 0.05,
                oom_events: 0,
                status: "found".into(),
            }],
            ratios: vec![SweepRatio { policy: "dedicated".into(), target: 0.09, goodput_vs_dedicated: Some(1.0) }],
            points: vec![point("dedicated", 1.0, 0.3), point("dedicated", 0.5, 0.05), point("slice", 1.0, 0.01)],
            timing: SweepTiming::default(),
        };
        let files = write_sweep(&dir, &report).unwrap();
        assert_eq!(files.len(), 2);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
        assert_eq!(v["results"][0]["rate_scale"], 0.5);
        let svg = std::fs::read_to_string(&files[1]).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("dedicated") && svg.contains("slice") && svg.contains("target 9%")
        );
    }

    #[test]
    fn an_empty_sweep_still_plots() {
        let dir = std::env::temp_dir().join(format!("slicesched-report-sweep-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_sweep_plot(&dir, "s", &[], &[0.01]).unwrap();
    }
}
