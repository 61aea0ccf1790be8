//! `slicesched profile`: measure every op of a model on this machine's devices and write
//! Vidur's layout, so `slicesched cost validate --fit DIR --test DIR` fits the cost model
//! to the user's own hardware.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use slicesched_exec::model::ExecModel;
use slicesched_exec::profile::{self, ProfileOptions};
use slicesched_exec::{CpuBackend, CpuDeviceSpec, DeviceId};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Device to profile: `cpu` or `cpu:N` (with --tp K, devices N..N+K).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Model: a preset name (e.g. tiny-2l), a config.json / model_config.yml, or a
    /// checkpoint folder with config.json.
    #[arg(long)]
    model: String,
    /// Tensor-parallel degree (one CPU device per rank).
    #[arg(long, default_value_t = 1)]
    tp: u32,
    /// Output folder (Vidur layout: <model>/mlp.csv, attention.csv, model_config.yml,
    /// and device_config.yml).
    #[arg(long)]
    out: PathBuf,
    /// Memory of each CPU device in GiB (what its ledger allows).
    #[arg(long, default_value_t = 8.0)]
    memory_gb: f64,
    /// Timed repetitions per point.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Fewer points (token counts to 256, short KV), for a first look.
    #[arg(long)]
    quick: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// A preset, a config file, or a checkpoint folder's config.json.
pub fn resolve_model(spec: &str) -> Result<ExecModel> {
    let p = Path::new(spec);
    if p.is_dir() {
        let cfg = p.join("config.json");
        let text = std::fs::read_to_string(&cfg).with_context(|| format!("reading {}", cfg.display()))?;
        let name = p.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
        let config = slicesched_model::ModelConfig::from_hf_json(&text, &cfg.display().to_string(), &name)?;
        let numerics = slicesched_exec::model::Numerics::from_hf_json(&config, &text)?;
        return Ok(ExecModel { config, numerics });
    }
    let config = slicesched_model::ModelConfig::resolve(spec, Path::new("."))?;
    let mut m = ExecModel::new(config);
    m.numerics.max_positions = m.numerics.max_positions.min(4096);
    Ok(m)
}

pub fn run(a: Args) -> Result<()> {
    let first = slicesched_exec::parse_device(&a.device)?;
    let tp = a.tp as usize;
    if tp == 0 {
        bail!("--tp must be at least 1");
    }
    if !(a.memory_gb.is_finite() && a.memory_gb > 0.0) {
        bail!("--memory-gb must be a positive number, got {}", a.memory_gb);
    }
    let model = resolve_model(&a.model)?;
    model.config.check_tp(a.tp).map_err(|e| anyhow::anyhow!("--tp {}: {e}", a.tp))?;
    let memory = (a.memory_gb * (1u64 << 30) as f64) as u64;
    let need = model.config.weight_bytes_per_gpu(a.tp);
    if need > memory {
        bail!(
            "{} needs {:.2} GiB of weights per device at --tp {}, more than a device's {:.2} GiB (--memory-gb)",
            model.config.name,
            need as f64 / (1u64 << 30) as f64,
            a.tp,
            a.memory_gb
        );
    }
    let n = first as usize + tp;
    let backend = CpuBackend::new(&vec![CpuDeviceSpec { memory_bytes: memory, cores: 1 }; n]);
    let devices: Vec<DeviceId> = (first..first + a.tp).map(DeviceId).collect();
    let mut opts = ProfileOptions { reps: a.reps.max(1), ..ProfileOptions::default() };
    if a.quick {
        opts.tokens.retain(|&t| t <= 256);
        opts.prefills.retain(|&(c, kv)| c <= 128 && kv <= 128);
        opts.decodes.retain(|&(b, kv)| b <= 8 && kv <= 256);
    }
    let bar = if a.quiet { ProgressBar::hidden() } else { ProgressBar::new(1) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .expect("static template"),
    );
    let p = profile::profile(&backend, &devices, &model, &opts, &mut |done, total, what| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(what.to_string());
    })
    .with_context(|| format!("profiling {} on {}", model.config.name, a.device))?;
    bar.finish_and_clear();
    profile::write(&a.out, &model, &p, memory, tp).with_context(|| format!("writing {}", a.out.display()))?;
    println!(
        "profiled {} on {} (tp {}): {} token counts, {} attention points; peak GEMM {:.1} GFLOP/s",
        model.config.name,
        a.device,
        tp,
        p.mlp.len(),
        p.attention.len(),
        p.peak_gflops
    );
    println!("wrote {}", a.out.join(&model.config.name).display());
    println!("next: slicesched cost validate --fit {0} --test {0}", a.out.display());
    Ok(())
}
