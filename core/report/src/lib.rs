//! Replay reports: `summary.json`, `requests.csv`, SVG plots and terminal tables; sweep
//! and family-sweep reports.

mod family;
mod plots;
pub mod search;
mod sweep;
mod table;

pub use family::{
    family_table, ratio_spread, write_family, write_family_plot, FamilyEntry, FamilyReport, NotMonotone, RatioSpread,
};
pub use plots::{write_plots, PlotError};
pub use sweep::{
    goodput_ratios, is_dedicated, pool_draws, write_sweep, write_sweep_plot, DrawFigures, PointFigures, SweepPoint,
    SweepRatio, SweepReport, SweepResult, SweepTiming,
};
pub use table::{higher_within, summary_table, sweep_table};

use slicesched_sim::ReplayResult;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    // The io error is in the message, not `source()`: shown once where a caller prints the chain.
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{path}: {msg}")]
    Write { path: String, msg: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |err| ReportError::Io { path: path.display().to_string(), err }
}

/// Writes a file atomically: readers never see half of it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Writes `summary.json`, `requests.csv` and the plots into `dir`; returns the paths.
pub fn write_replay(dir: &Path, result: &ReplayResult, tenant_names: &[String]) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut written = Vec::new();
    let summary = dir.join("summary.json");
    let json = serde_json::to_vec_pretty(&result.summary)
        .map_err(|e| ReportError::Write { path: summary.display().to_string(), msg: e.to_string() })?;
    write_atomic(&summary, &json)?;
    written.push(summary);

    let csv_path = dir.join("requests.csv");
    let mut w = csv::Writer::from_writer(Vec::new());
    let csv_err = |e: csv::Error| ReportError::Write { path: csv_path.display().to_string(), msg: e.to_string() };
    w.write_record([
        "id",
        "tenant",
        "arrival_s",
        "prompt_tokens",
        "output_tokens",
        "ttft_ms",
        "tpot_ms",
        "e2e_ms",
        "ttft_target_ms",
        "tpot_target_ms",
        "violated",
        "preemptions",
        "dropped",
    ])
    .map_err(csv_err)?;
    let ms = |v: Option<u64>| v.map(|x| format!("{:.3}", x as f64 / 1e6)).unwrap_or_default();
    for r in &result.records {
        w.write_record([
            r.id.to_string(),
            tenant_names.get(r.tenant as usize).cloned().unwrap_or_else(|| r.tenant.to_string()),
            format!("{:.6}", r.arrival_ns as f64 / 1e9),
            r.prompt_tokens.to_string(),
            r.output_tokens.to_string(),
            ms(r.ttft_ns()),
            ms(r.tpot_ns()),
            ms(r.e2e_ns()),
            format!("{:.3}", r.ttft_target_ns as f64 / 1e6),
            format!("{:.3}", r.tpot_target_ns as f64 / 1e6),
            (r.violates() as u8).to_string(),
            r.preemptions.to_string(),
            r.dropped.unwrap_or("").to_string(),
        ])
        .map_err(|e| ReportError::Write { path: csv_path.display().to_string(), msg: e.to_string() })?;
    }
    let bytes =
        w.into_inner().map_err(|e| ReportError::Write { path: csv_path.display().to_string(), msg: e.to_string() })?;
    write_atomic(&csv_path, &bytes)?;
    written.push(csv_path);

    let plots = write_plots(dir, result, tenant_names)
        .map_err(|e| ReportError::Write { path: dir.display().to_string(), msg: e.to_string() })?;
    written.extend(plots);
    Ok(written)
}
