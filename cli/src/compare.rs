//! `slicesched compare`: every policy on the same scenario at the same load, side by
//! side, and how much of `dedicated`'s idle GPU time the others filled.

use anyhow::{Context, Result};
use slicesched_sim::{ReplayOptions, Scenario, Summary};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario TOML file.
    #[arg(long)]
    scenario: PathBuf,
    /// Comma-separated policies (default: every built-in).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Arrival-rate scale to replay at.
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::positive)]
    rate_scale: f64,
    /// Output directory: compare.json and one summary per policy.
    #[arg(long)]
    out: PathBuf,
}

/// One GPU under one policy.
#[derive(serde::Serialize)]
struct GpuRow {
    gpu: u32,
    busy_fraction: f64,
    idle_gap_p50_ms: f64,
    idle_gap_p90_ms: f64,
    idle_share_le_10ms: f64,
    guest_busy_s: f64,
    /// Busy time spent on other tenants' ops, as a share of this GPU's idle time
    /// under `dedicated`.
    filled_of_dedicated_idle: Option<f64>,
}

#[derive(serde::Serialize)]
struct PolicyRow {
    policy: String,
    violation_rate: f64,
    prompt_tokens_per_s: f64,
    output_tokens_per_s: f64,
    ttft_p99_ms: f64,
    tpot_p99_ms: f64,
    oom_events: u64,
    gpu_busy_fraction: f64,
    borrowed_ops: u64,
    decisions: u64,
    gpus: Vec<GpuRow>,
}

pub fn run(a: Args) -> Result<()> {
    let scenario = Scenario::from_file(&a.scenario).with_context(|| format!("loading {}", a.scenario.display()))?;
    let policies = crate::policies::resolve(&a.policies)?;
    let scaled = scenario.with_rate_scale(a.rate_scale);
    let results: Mutex<Vec<(usize, Summary)>> = Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()).min(policies.len());
    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for _ in 0..jobs {
            handles.push(s.spawn(|| -> Result<()> {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(name) = policies.get(i) else { return Ok(()) };
                    let r = crate::policies::replay_policy(&scaled, name, ReplayOptions::default(), &mut |_| {})?;
                    eprintln!("{name}: done in {:.1} s", r.summary.timing.sim_wall_s);
                    results.lock().expect("no panics holding it").push((i, r.summary));
                }
            }));
        }
        for h in handles {
            h.join().expect("replay thread")?;
        }
        Ok(())
    })?;
    let mut results = results.into_inner().expect("threads joined");
    results.sort_by_key(|(i, _)| *i);
    let dedicated = results.iter().find(|(_, s)| slicesched_report::is_dedicated(&s.policy)).map(|(_, s)| s);
    let rows: Vec<PolicyRow> = results
        .iter()
        .map(|(_, s)| PolicyRow {
            policy: s.policy.clone(),
            violation_rate: s.violation_rate,
            prompt_tokens_per_s: s.prompt_tokens_per_s,
            output_tokens_per_s: s.output_tokens_per_s,
            ttft_p99_ms: s.ttft_p99_ms,
            tpot_p99_ms: s.tpot_p99_ms,
            oom_events: s.oom_events,
            gpu_busy_fraction: s.gpu_busy_fraction,
            borrowed_ops: s.scheduling.borrowed_ops,
            decisions: s.scheduling.decisions,
            gpus: s
                .gpus
                .iter()
                .map(|g| GpuRow {
                    gpu: g.gpu,
                    busy_fraction: g.busy_fraction,
                    idle_gap_p50_ms: g.idle_gap_p50_ms,
                    idle_gap_p90_ms: g.idle_gap_p90_ms,
                    idle_share_le_10ms: g.idle_share_le_10ms,
                    guest_busy_s: g.guest_busy_s,
                    filled_of_dedicated_idle: dedicated.map(|d| {
                        let idle = (1.0 - d.gpus[g.gpu as usize].busy_fraction) * d.duration_s;
                        g.guest_busy_s / idle.max(1e-9)
                    }),
                })
                .collect(),
        })
        .collect();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let json = serde_json::json!({ "scenario": scenario.spec.name, "rate_scale": a.rate_scale, "policies": rows });
    slicesched_report::write_atomic(&a.out.join("compare.json"), serde_json::to_string_pretty(&json)?.as_bytes())?;
    for (_, s) in &results {
        let path = a.out.join(format!("summary-{}.json", s.policy));
        slicesched_report::write_atomic(&path, serde_json::to_string_pretty(s)?.as_bytes())?;
    }

    let mut out = std::io::stdout().lock();
    writeln!(out, "{} at rate scale {}", scenario.spec.name, a.rate_scale)?;
    writeln!(
        out,
        "{:<10} {:>7} {:>9} {:>8} {:>9} {:>9} {:>6} {:>9} {:>10}",
        "policy", "viol%", "prompt/s", "out/s", "TTFTp99", "TPOTp99", "busy%", "borrowed", "filled%"
    )?;
    for r in &rows {
        let filled: Vec<f64> = r.gpus.iter().filter_map(|g| g.filled_of_dedicated_idle).collect();
        let mean = if filled.is_empty() { 0.0 } else { filled.iter().sum::<f64>() / filled.len() as f64 };
        writeln!(
            out,
            "{:<10} {:>7.2} {:>9.0} {:>8.1} {:>9.1} {:>9.1} {:>6.1} {:>9} {:>10.1}",
            r.policy,
            100.0 * r.violation_rate,
            r.prompt_tokens_per_s,
            r.output_tokens_per_s,
            r.ttft_p99_ms,
            r.tpot_p99_ms,
            100.0 * r.gpu_busy_fraction,
            r.borrowed_ops,
            100.0 * mean
        )?;
    }
    writeln!(
        out,
        "\nper GPU: busy% / idle-gap p50 ms / share of idle time in gaps ≤ 10 ms / filled% of dedicated idle"
    )?;
    for g in 0..rows.first().map_or(0, |r| r.gpus.len()) {
        write!(out, "gpu{g:<3}")?;
        for r in &rows {
            let x = &r.gpus[g];
            write!(
                out,
                "  {}: {:.1}/{:.2}/{:.0}%/{:.1}%",
                r.policy,
                100.0 * x.busy_fraction,
                x.idle_gap_p50_ms,
                100.0 * x.idle_share_le_10ms,
                100.0 * x.filled_of_dedicated_idle.unwrap_or(0.0)
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}
