//! SVG plots of a replay: throughput over time, latency CDFs, per-GPU busy timeline.

use plotters::prelude::*;
use slicesched_sim::ReplayResult;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("plot {file}: {msg}")]
pub struct PlotError {
    file: String,
    msg: String,
}

pub(crate) fn perr<E: std::fmt::Display>(file: &Path) -> impl Fn(E) -> PlotError + '_ {
    move |e| PlotError { file: file.display().to_string(), msg: e.to_string() }
}

/// Distinguishable colours for up to 10 series (Tableau 10), then cycling.
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Averages `v` over windows of `w` buckets (plots of per-second counters are noise).
fn smooth(v: &[u64], w: usize) -> Vec<(f64, f64)> {
    v.chunks(w.max(1))
        .enumerate()
        .map(|(i, c)| ((i * w) as f64, c.iter().sum::<u64>() as f64 / c.len() as f64))
        .collect()
}

pub fn write_plots(dir: &Path, r: &ReplayResult, _tenants: &[String]) -> Result<Vec<PathBuf>, PlotError> {
    Ok(vec![throughput(dir, r)?, latency_cdfs(dir, r)?, gpu_timeline(dir, r)?])
}

fn throughput(dir: &Path, r: &ReplayResult) -> Result<PathBuf, PlotError> {
    let path = dir.join("throughput.svg");
    let e = perr(&path);
    let s = &r.series;
    let w = (s.prompt_tokens.len() / 300).max(1);
    let prompt = smooth(&s.prompt_tokens, w);
    let output = smooth(&s.output_tokens, w);
    let x_max = (s.prompt_tokens.len() as f64).max(1.0);
    let y_max = prompt.iter().chain(&output).map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let root = SVGBackend::new(&path, (900, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            format!("{} · {}: token throughput ({w} s average)", r.summary.scenario, r.summary.policy),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(&e)?;
    c.configure_mesh().x_desc("time (s)").y_desc("tokens/s").draw().map_err(&e)?;
    c.draw_series(LineSeries::new(prompt, PALETTE[0].stroke_width(2)))
        .map_err(&e)?
        .label("prompt tokens/s")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PALETTE[0]));
    c.draw_series(LineSeries::new(output, PALETTE[1].stroke_width(2)))
        .map_err(&e)?
        .label("output tokens/s")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PALETTE[1]));
    c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(&e)?;
    root.present().map_err(&e)?;
    Ok(path.clone())
}

fn cdf(mut v: Vec<f64>) -> Vec<(f64, f64)> {
    v.sort_by(f64::total_cmp);
    let n = v.len().max(1) as f64;
    let step = (v.len() / 500).max(1);
    v.iter()
        .enumerate()
        .step_by(step)
        .map(|(i, x)| (*x, (i + 1) as f64 / n))
        .chain(v.last().map(|x| (*x, 1.0)))
        .collect()
}

fn latency_cdfs(dir: &Path, r: &ReplayResult) -> Result<PathBuf, PlotError> {
    let path = dir.join("latency_cdf.svg");
    let e = perr(&path);
    let root = SVGBackend::new(&path, (1000, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let halves = root.split_evenly((1, 2));
    let ttft: Vec<f64> = r.records.iter().filter_map(|x| x.ttft_ns()).map(|x| x as f64 / 1e6).collect();
    let tpot: Vec<f64> =
        r.records.iter().filter(|x| x.output_tokens > 1).filter_map(|x| x.tpot_ns()).map(|x| x as f64 / 1e6).collect();
    for (area, (name, data)) in halves.iter().zip([("TTFT (ms)", ttft), ("TPOT (ms)", tpot)]) {
        let pts = cdf(data);
        let x_max = pts.last().map_or(1.0, |p| p.0).max(1e-3) * 1.05;
        let mut c = ChartBuilder::on(area)
            .caption(format!("{name} CDF · {}", r.summary.policy), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d(0f64..x_max, 0f64..1.0)
            .map_err(&e)?;
        c.configure_mesh().x_desc(name).y_desc("fraction of requests").draw().map_err(&e)?;
        c.draw_series(LineSeries::new(pts, PALETTE[0].stroke_width(2))).map_err(&e)?;
    }
    root.present().map_err(&e)?;
    Ok(path.clone())
}

fn gpu_timeline(dir: &Path, r: &ReplayResult) -> Result<PathBuf, PlotError> {
    let path = dir.join("gpu_timeline.svg");
    let e = perr(&path);
    let s = &r.series;
    let n_gpu = s.gpu_busy_ns.len().max(1);
    let buckets = s.gpu_busy_ns.first().map_or(1, |v| v.len()).max(1);
    let w = buckets.div_ceil(400);
    let cols = buckets.div_ceil(w);
    let root = SVGBackend::new(&path, (1000, 60 + 28 * n_gpu as u32 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            format!("busy fraction per GPU over time ({} · {})", r.summary.scenario, r.summary.policy),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..(cols * w) as f64, 0f64..n_gpu as f64)
        .map_err(&e)?;
    c.configure_mesh()
        .disable_mesh()
        .x_desc("time (s); white = idle, dark = busy")
        .y_labels(n_gpu)
        .y_label_formatter(&|y| format!("gpu{}", y.floor() as i64))
        .draw()
        .map_err(&e)?;
    let mut rects = Vec::with_capacity(cols * n_gpu);
    for (g, v) in s.gpu_busy_ns.iter().enumerate() {
        for (i, chunk) in v.chunks(w).enumerate() {
            let frac = chunk.iter().sum::<u64>() as f64 / (chunk.len() as f64 * s.bucket_s * 1e9);
            let shade = (255.0 * (1.0 - frac.clamp(0.0, 1.0))) as u8;
            let color = RGBColor(shade, shade, 255u8.saturating_sub(((255 - shade as u16) / 3) as u8));
            let (x0, x1) = ((i * w) as f64, ((i + 1) * w) as f64);
            rects.push(Rectangle::new([(x0, g as f64 + 0.1), (x1, g as f64 + 0.9)], color.filled()));
        }
    }
    c.draw_series(rects).map_err(&e)?;
    root.present().map_err(&e)?;
    Ok(path.clone())
}
