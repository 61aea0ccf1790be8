//! `slicesched profile`: measure every op of a model on this machine's devices and write
//! Vidur's layout, so `slicesched cost validate --fit DIR --test DIR` fits the cost model
//! to the user's own hardware.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use slicesched_exec::cuda::CudaBackend;
use slicesched_exec::model::ExecModel;
use slicesched_exec::profile::{self, GpuFacts, ProfileOptions};
use slicesched_exec::{Backend, CpuBackend, CpuDeviceSpec, DeviceId};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Device to profile: `cpu`, `cpu:N`, `cuda` or `cuda:N` (the GPU of ordinal N;
    /// with --tp K, devices N..N+K).
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
    /// Memory of each CPU device in GiB (what its ledger allows; a GPU's is its own).
    #[arg(long, default_value_t = 8.0)]
    memory_gb: f64,
    /// Token counts of the MLP ops, comma-separated (default 1,2,4,...,1024).
    #[arg(long, value_delimiter = ',')]
    tokens: Option<Vec<u32>>,
    /// Timed repetitions per point.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Untimed runs of a decode-sized point (at most 64 tokens) just before each timed
    /// one, so it is timed with the model's weights as a serving loop leaves them.
    #[arg(long, default_value_t = 3)]
    warm_runs: u32,
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

/// The backend profiled, its first device, a device's memory and (on a GPU) its facts.
struct Opened {
    backend: Box<dyn Backend>,
    first: u32,
    memory: u64,
    gpu: Option<GpuFacts>,
}

/// The devices profiled: CPU devices of `memory` bytes, or GPUs `first..first+tp`.
fn open_backend(a: &Args, tp: usize) -> Result<Opened> {
    if a.device == "cuda" || a.device.starts_with("cuda:") {
        let first = slicesched_exec::cuda::parse_device(&a.device)?;
        // Without a driver or its libraries this is one line naming what is missing.
        slicesched_exec::cuda::require_libraries().map_err(|e| anyhow::anyhow!("--device {}: {e}", a.device))?;
        let ordinals: Vec<usize> = (first..first + tp).collect();
        let b = CudaBackend::try_new(&ordinals).map_err(|e| anyhow::anyhow!("--device {}: {e}", a.device))?;
        let memory = b.devices().iter().map(|d| d.memory_bytes).min().unwrap_or(0);
        let d = b.describe(DeviceId(0))?;
        let gpu = GpuFacts {
            name: d["name"].as_str().unwrap_or("unknown GPU").to_string(),
            memory_bytes: b.devices()[0].memory_bytes,
            sms: b.devices()[0].compute_units,
        };
        // The backend's devices are the ordinals listed, numbered from 0.
        return Ok(Opened { backend: Box::new(b), first: 0, memory, gpu: Some(gpu) });
    }
    if !(a.memory_gb.is_finite() && a.memory_gb > 0.0) {
        bail!("--memory-gb must be a positive number, got {}", a.memory_gb);
    }
    let first = slicesched_exec::parse_device(&a.device)?;
    let memory = (a.memory_gb * (1u64 << 30) as f64) as u64;
    let n = first as usize + tp;
    let backend = Box::new(CpuBackend::new(&vec![CpuDeviceSpec { memory_bytes: memory, cores: 1 }; n]));
    Ok(Opened { backend, first, memory, gpu: None })
}

pub fn run(a: Args) -> Result<()> {
    let tp = a.tp as usize;
    if tp == 0 {
        bail!("--tp must be at least 1");
    }
    let model = resolve_model(&a.model)?;
    model.config.check_tp(a.tp).map_err(|e| anyhow::anyhow!("--tp {}: {e}", a.tp))?;
    let Opened { backend, first, memory, gpu } = open_backend(&a, tp)?;
    let need = model.config.weight_bytes_per_gpu(a.tp);
    if need > memory {
        bail!(
            "{} needs {:.2} GiB of weights per device at --tp {}, more than a device's {:.2} GiB{}",
            model.config.name,
            need as f64 / (1u64 << 30) as f64,
            a.tp,
            memory as f64 / (1u64 << 30) as f64,
            if gpu.is_some() { "" } else { " (--memory-gb)" }
        );
    }
    let devices: Vec<DeviceId> = (first..first + a.tp).map(DeviceId).collect();
    let mut opts = ProfileOptions { reps: a.reps.max(1), warm_runs: a.warm_runs, ..ProfileOptions::default() };

    if a.quick {
        opts.tokens.retain(|&t| t <= 256);
        opts.prefills.retain(|&(c, kv)| c <= 128 && kv <= 128);
        opts.decodes.retain(|&(b, kv)| b <= 8 && kv <= 256);
    }
    // Given token counts replace the default list, --quick or not.
    if let Some(t) = &a.tokens {
        if t.is_empty() || t.contains(&0) {
            bail!("--tokens needs positive token counts");
        }
        opts.tokens = t.clone();
    }
    let bar = if a.quiet { ProgressBar::hidden() } else { ProgressBar::new(1) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .expect("static template"),
    );
    let mut p = profile::profile(backend.as_ref(), &devices, &model, &opts, &mut |done, total, what| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(what.to_string());
    })
    .with_context(|| format!("profiling {} on {}", model.config.name, a.device))?;
    bar.finish_and_clear();
    p.gpu = gpu;
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
