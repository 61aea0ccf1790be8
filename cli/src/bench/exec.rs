//! `slicesched bench exec`: prints the executor's benchmark (see
//! `slicesched_exec::bench`) as ratio tables, and optionally its JSON.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use slicesched_exec::bench::{self, BenchOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Fewer repetitions, one model: a first look in a few seconds.
    #[arg(long)]
    quick: bool,
    /// Also write every figure as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub fn run(a: Args) -> Result<()> {
    let bar = if a.quiet { ProgressBar::hidden() } else { ProgressBar::new(1) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .expect("static template"),
    );
    let r = bench::run(&BenchOptions::new(a.quick), &mut |done, total, what| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(what.to_string());
    })
    .context("benchmarking the CPU executor")?;
    bar.finish_and_clear();
    let peak = r.peak_gflops;
    println!(
        "machine (one core): peak {:.1} GFLOP/s (the better of a {} loop, {:.1}, and the best bare matrixmultiply, {:.1}); {:.1} GB/s memory read",
        peak, r.fma_peak_kind, r.fma_peak_gflops, r.bare_best_gflops, r.read_gbs
    );
    println!("GEMM y[m×n] = x[m×k]·wᵀ, bf16 in/out (GFLOP/s; the backend's kernel is batch-invariant, bare matrixmultiply is not):");
    println!(
        "{:>5} {:>6} {:>6} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9}",
        "m", "n", "k", "backend", "kernel", "bare", "back/bare", "back/peak", "w GB/s", "w/read"
    );
    for g in &r.gemm {
        println!(
            "{:>5} {:>6} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>10.2} {:>10.3} {:>9.1} {:>9.2}",
            g.m,
            g.n,
            g.k,
            g.backend,
            g.kernel,
            g.bare,
            g.backend / g.bare,
            g.backend / peak,
            g.backend_weight_gbs,
            g.backend_weight_gbs / r.read_gbs
        );
    }
    let o = &r.overhead;
    println!(
        "executor overhead per op beyond its kernel (µs): launch→completion seen p50 {:.1} / p90 {:.1}; pipelined {:.1}; `run`'s op step p50 {:.1} / p90 {:.1} (target ≤ 20)",
        o.launch_to_seen_us_p50, o.launch_to_seen_us_p90, o.pipelined_us, o.runner_step_us_p50, o.runner_step_us_p90
    );
    println!("tokens/s end to end (one device, one core):");
    println!(
        "{:<12} {:>6} {:>7} {:>6} {:>12} {:>11} {:>10}",
        "model", "batch", "prompt", "steps", "prefill t/s", "decode t/s", "ms/step"
    );
    for t in &r.tokens {
        println!(
            "{:<12} {:>6} {:>7} {:>6} {:>12.0} {:>11.1} {:>10.2}",
            t.model, t.batch, t.prompt, t.steps, t.prefill_tok_s, t.decode_tok_s, t.decode_step_ms
        );
    }
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_vec_pretty(&r)?).with_context(|| format!("writing {}", p.display()))?;
        println!("wrote {}", p.display());
    }
    Ok(())
}
