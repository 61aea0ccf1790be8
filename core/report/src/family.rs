//! Family sweeps: each policy's goodput ratio over `dedicated` across a folder of
//! scenarios, as a distribution (min, median, max) per violation target —
//! `family.json`, `family_goodput.svg` and a terminal table.

use crate::plots::PALETTE;
use crate::{write_atomic, ReportError, SweepRatio, SweepResult, SweepTiming};
use plotters::prelude::*;
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// One scenario's sweep, as the family keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyEntry {
    pub scenario: String,
    /// The scenario file, as given.
    pub file: String,
    pub results: Vec<SweepResult>,
    pub ratios: Vec<SweepRatio>,
    /// Answers with a replayed scale above them within the same target
    /// ([`crate::higher_within`]): the goodput sits under a spike of the curve.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_monotone: Vec<NotMonotone>,
}

/// A (policy, target) of one scenario whose goodput has a calmer stretch above it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotMonotone {
    pub policy: String,
    pub target: f64,
    /// The highest scale replayed above the goodput within the target, and its rate.
    pub rate_scale: f64,
    pub violation_rate: f64,
}

impl NotMonotone {
    /// Every answer of `report` with a replayed scale above it within its target.
    pub fn of(report: &crate::SweepReport) -> Vec<NotMonotone> {
        report
            .results
            .iter()
            .filter(|r| r.status == "found")
            .filter_map(|r| {
                crate::higher_within(report, r).map(|p| NotMonotone {
                    policy: r.policy.clone(),
                    target: r.target,
                    rate_scale: p.rate_scale,
                    violation_rate: p.violation_rate,
                })
            })
            .collect()
    }
}

/// The distribution of one policy's goodput ratio over `dedicated` at one target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RatioSpread {
    pub policy: String,
    pub target: f64,
    /// Scenarios with a ratio (`dedicated` served some load there).
    pub scenarios: usize,
    /// Scenarios where `dedicated` violated the target even at the smallest scale: no ratio.
    pub undefined: usize,
    pub min: Option<f64>,
    pub median: Option<f64>,
    pub max: Option<f64>,
}

/// `family.json`.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyReport {
    /// The folder swept.
    pub family: String,
    pub policies: Vec<String>,
    pub targets: Vec<f64>,
    pub spread: Vec<RatioSpread>,
    pub scenarios: Vec<FamilyEntry>,
    pub timing: SweepTiming,
}

fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// Each (policy, target)'s ratios across `entries`, in the order of `policies` then `targets`.
pub fn ratio_spread(entries: &[FamilyEntry], policies: &[String], targets: &[f64]) -> Vec<RatioSpread> {
    let mut out = Vec::new();
    for policy in policies {
        for &target in targets {
            let mut defined = Vec::new();
            let mut undefined = 0;
            for e in entries {
                match e.ratios.iter().find(|r| &r.policy == policy && r.target == target) {
                    Some(SweepRatio { goodput_vs_dedicated: Some(v), .. }) => defined.push(*v),
                    Some(_) => undefined += 1,
                    None => {}
                }
            }
            defined.sort_by(f64::total_cmp);
            out.push(RatioSpread {
                policy: policy.clone(),
                target,
                scenarios: defined.len(),
                undefined,
                min: defined.first().copied(),
                median: median(&defined),
                max: defined.last().copied(),
            });
        }
    }
    out
}

/// The spread as a terminal table: one row per (policy, target).
pub fn family_table(r: &FamilyReport) -> String {
    let f = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}x"));
    let mut s = format!(
        "goodput over dedicated across {} scenarios of {}\n{:<14} {:>7} {:>8} {:>8} {:>8} {:>10}\n",
        r.scenarios.len(),
        r.family,
        "policy",
        "target",
        "min",
        "median",
        "max",
        "scenarios"
    );
    for sp in &r.spread {
        let n = if sp.undefined > 0 {
            format!("{} (+{} n/a)", sp.scenarios, sp.undefined)
        } else {
            sp.scenarios.to_string()
        };
        let spikes = r
            .scenarios
            .iter()
            .filter(|e| e.not_monotone.iter().any(|m| m.policy == sp.policy && m.target == sp.target))
            .count();
        let n = if spikes > 0 { format!("{n}, {spikes} not monotone") } else { n };
        writeln!(
            s,
            "{:<14} {:>6.1}% {:>8} {:>8} {:>8} {:>10}",
            sp.policy,
            100.0 * sp.target,
            f(sp.min),
            f(sp.median),
            f(sp.max),
            n
        )
        .expect("writing to a String");
    }
    s
}

/// Writes `family.json` and `family_goodput.svg` into `dir`; returns the paths.
pub fn write_family(dir: &Path, report: &FamilyReport) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|err| ReportError::Io { path: dir.display().to_string(), err })?;
    let json_path = dir.join("family.json");
    let json = serde_json::to_vec_pretty(report)
        .map_err(|e| ReportError::Write { path: json_path.display().to_string(), msg: e.to_string() })?;
    write_atomic(&json_path, &json)?;
    let svg = write_family_plot(dir, report)
        .map_err(|e| ReportError::Write { path: dir.display().to_string(), msg: e.to_string() })?;
    Ok(vec![json_path, svg])
}

/// One group per target, one column per policy: each scenario's ratio as a dot, the
/// min-max range as a bar and the median as a wide tick; a dashed line at 1 (`dedicated`).
pub fn write_family_plot(dir: &Path, r: &FamilyReport) -> Result<PathBuf, crate::PlotError> {
    let path = dir.join("family_goodput.svg");
    let e = crate::plots::perr(&path);
    let np = r.policies.len().max(1);
    let x_of = |ti: usize, pi: usize| (ti * (np + 1) + pi + 1) as f64;
    let x_max = x_of(r.targets.len().max(1) - 1, np - 1) + 1.0;
    let all = r.scenarios.iter().flat_map(|s| s.ratios.iter().filter_map(|x| x.goodput_vs_dedicated));
    let y_max = (all.fold(1.0f64, f64::max) * 1.15).max(1.5);

    let root = SVGBackend::new(&path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            format!("{}: goodput over dedicated across {} scenarios", r.family, r.scenarios.len()),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(20)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(&e)?;
    c.configure_mesh()
        .disable_x_mesh()
        .disable_x_axis()
        .y_desc("goodput ÷ dedicated's (highest rate scale within the target)")
        .draw()
        .map_err(&e)?;
    c.draw_series(DashedLineSeries::new([(0.0, 1.0), (x_max, 1.0)], 6, 4, BLACK.mix(0.6).stroke_width(1)))
        .map_err(&e)?;
    for (ti, target) in r.targets.iter().enumerate() {
        let label = format!("violations <= {}%", 100.0 * target);
        c.draw_series([Text::new(label, (x_of(ti, 0) - 0.4, y_max * 0.97), ("sans-serif", 14))]).map_err(&e)?;
    }
    for (pi, policy) in r.policies.iter().enumerate() {
        let color = PALETTE[pi % PALETTE.len()];
        for (ti, &target) in r.targets.iter().enumerate() {
            let x = x_of(ti, pi);
            let vals: Vec<f64> = r
                .scenarios
                .iter()
                .filter_map(|s| s.ratios.iter().find(|q| &q.policy == policy && q.target == target))
                .filter_map(|q| q.goodput_vs_dedicated)
                .collect();
            let n = vals.len().max(1) as f64;
            // Dots spread across the column so equal ratios stay visible.
            c.draw_series(
                vals.iter()
                    .enumerate()
                    .map(|(i, v)| Circle::new((x - 0.25 + 0.5 * i as f64 / n, *v), 3, color.mix(0.5).filled())),
            )
            .map_err(&e)?;
            if let Some(sp) = r.spread.iter().find(|s| &s.policy == policy && s.target == target) {
                if let (Some(lo), Some(mid), Some(hi)) = (sp.min, sp.median, sp.max) {
                    c.draw_series(LineSeries::new([(x, lo), (x, hi)], color.stroke_width(2))).map_err(&e)?;
                    c.draw_series(LineSeries::new([(x - 0.35, mid), (x + 0.35, mid)], color.stroke_width(4)))
                        .map_err(&e)?;
                }
            }
        }
        // Legend entry only.
        c.draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(&e)?
            .label(policy.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
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

    fn entry(name: &str, ratios: &[(&str, f64, Option<f64>)]) -> FamilyEntry {
        FamilyEntry {
            scenario: name.into(),
            file: format!("{name}.toml"),
            results: vec![],
            not_monotone: vec![],
            ratios: ratios
                .iter()
                .map(|(p, t, v)| SweepRatio { policy: (*p).into(), target: *t, goodput_vs_dedicated: *v })
                .collect(),
        }
    }

    #[test]
    fn spread_is_min_median_max_of_the_defined_ratios() {
        let es = [
            entry("a", &[("dedicated", 0.09, Some(1.0)), ("slice", 0.09, Some(3.0))]),
            entry("b", &[("dedicated", 0.09, Some(1.0)), ("slice", 0.09, Some(1.0))]),
            entry("c", &[("dedicated", 0.09, None), ("slice", 0.09, None)]),
            entry("d", &[("dedicated", 0.09, Some(1.0)), ("slice", 0.09, Some(2.0))]),
            entry("e", &[("dedicated", 0.09, Some(1.0)), ("slice", 0.09, Some(1.5))]),
        ];
        let sp = ratio_spread(&es, &["dedicated".into(), "slice".into()], &[0.09]);
        assert_eq!(sp[0].median, Some(1.0));
        let s = &sp[1];
        assert_eq!((s.scenarios, s.undefined), (4, 1));
        assert_eq!((s.min, s.median, s.max), (Some(1.0), Some(1.75), Some(3.0)));
    }

    #[test]
    fn writes_json_table_and_plot() {
        let dir = std::env::temp_dir().join(format!("slicesched-report-family-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut es = vec![entry("a", &[("dedicated", 0.01, Some(1.0)), ("slice", 0.01, Some(2.5))])];
        es[0].not_monotone =
            vec![NotMonotone { policy: "slice".into(), target: 0.01, rate_scale: 3.0, violation_rate: 0.008 }];
        let policies = vec!["dedicated".to_string(), "slice".to_string()];
        let spread = ratio_spread(&es, &policies, &[0.01]);
        let r = FamilyReport {
            family: "fam".into(),
            policies,
            targets: vec![0.01],
            spread,
            scenarios: es,
            timing: SweepTiming::default(),
        };
        let files = write_family(&dir, &r).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
        assert_eq!(v["spread"][1]["median"], 2.5);
        let svg = std::fs::read_to_string(&files[1]).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("slice") && svg.contains("violations"));
        let t = family_table(&r);
        assert!(t.contains("2.50x") && t.contains("slice"), "{t}");
        assert!(t.lines().any(|l| l.starts_with("slice") && l.ends_with("1, 1 not monotone")), "{t}");
        assert!(!t.lines().any(|l| l.starts_with("dedicated") && l.contains("monotone")), "{t}");
        assert_eq!(v["scenarios"][0]["not_monotone"][0]["rate_scale"], 3.0);
    }
}
