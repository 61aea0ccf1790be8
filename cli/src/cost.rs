//! `slicesched cost ...`.

use anyhow::{Context, Result};
use slicesched_hw::GpuSku;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Fit the cost model on profiles and report its relative error on held-out or
    /// other profiles (points under 10 µs excluded).
    Validate {
        /// Profiles to fit on, one or more folders (Vidur layout: model folders with
        /// mlp.csv, model_config.yml, optional attention.csv; network_* folders; a
        /// device_config.yml naming the GPU, A100-80GB without one).
        #[arg(long, required = true, num_args = 1..)]
        fit: Vec<PathBuf>,
        /// Profiles to test on; when it is a fit folder, 20% of its token counts per
        /// (model, TP, op) are held out with a fixed seed.
        #[arg(long)]
        test: PathBuf,
        /// GPU the test profiles were measured on (default: the test folder's
        /// device_config.yml, else A100-80GB).
        #[arg(long)]
        test_sku: Option<String>,
        /// TOML file of `[[gpu]]` entries for GPUs missing from the catalog.
        #[arg(long)]
        gpus: Option<PathBuf>,
        /// Write the report as JSON to stdout (the table goes to stderr).
        #[arg(long)]
        json: bool,
        /// Also, for each model of the test folder: fit on the fit folders without it
        /// and predict it.
        #[arg(long)]
        leave_one_model_out: bool,
    },
    /// Predicted prompt and per-token times of whole models against measured ones
    /// (Splitwise's perf_model.csv layout; default: the shipped A100 Llama-2-70B table).
    ValidateE2e {
        /// Measured table (default: data/e2e/splitwise_llama2-70b_a100.csv, compiled in).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Fit the engine costs on the other TP degrees and predict each one left out.
        #[arg(long)]
        holdout_tp: bool,
        /// Write the report as JSON to stdout (the table goes to stderr).
        #[arg(long)]
        json: bool,
    },
    /// What one iteration of a model costs the engine on a GPU: per-op kernel and
    /// engine time of one layer, then the iteration split into kernels, collectives,
    /// launch waits, per-prompt work and CPU time (the figures replay charges).
    Predict {
        /// Preset name or config file.
        #[arg(long)]
        model: String,
        /// GPU (catalog: A100-80GB, H100-80GB, H200-141GB, L40S, A40; or one of --gpus).
        #[arg(long, default_value = "A100-80GB")]
        sku: String,
        /// TOML file of `[[gpu]]` entries for GPUs missing from the catalog.
        #[arg(long)]
        gpus: Option<PathBuf>,
        /// Tensor-parallel degree (GPUs of one node with NVLink).
        #[arg(long, default_value_t = 1, value_parser = crate::args::at_least_one::<u32>)]
        tp: u32,
        /// Prompt tokens of each prefilled prompt (one chunk each).
        #[arg(long, default_value_t = 0)]
        prefill: u32,
        /// Prompts prefilled in the iteration, each of --prefill tokens.
        #[arg(long, default_value_t = 1, value_parser = crate::args::at_least_one::<u32>)]
        prompts: u32,
        /// Requests decoding in the iteration.
        #[arg(long, default_value_t = 0)]
        decode: u32,
        /// KV length of each decoding request.
        #[arg(long, default_value_t = 1024)]
        kv: u32,
    },
}

fn extra_gpus(path: Option<&Path>) -> Result<Vec<GpuSku>> {
    let Some(p) = path else { return Ok(Vec::new()) };
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    Ok(slicesched_hw::skus_from_toml(&text, &p.display().to_string())?)
}

#[allow(clippy::too_many_arguments)]
fn predict(
    model: &str,
    sku: &str,
    gpus: Option<&Path>,
    tp: u32,
    prefill: u32,
    prompts: u32,
    decode: u32,
    kv: u32,
) -> Result<()> {
    use slicesched_model::{DecodeItem, IterationBatch, ModelConfig, PrefillItem};
    let m = ModelConfig::resolve(model, Path::new("."))?;
    m.check_tp(tp).map_err(anyhow::Error::msg)?;
    let sku = slicesched_hw::sku_in(sku, &extra_gpus(gpus)?)?;
    let link = slicesched_cost::DeviceCtx::single_node(sku.clone()).group_link;
    let ctx = slicesched_cost::DeviceCtx { sku, group_link: if tp > 1 { link } else { same_device() } };
    let mut batch = IterationBatch::default();
    if prefill > 0 {
        batch.prefills.extend((0..prompts).map(|_| PrefillItem { chunk: prefill, prior_kv: 0, samples: true }));
    }
    batch.decodes.extend((0..decode).map(|_| DecodeItem { kv_len: kv }));
    anyhow::ensure!(!batch.is_empty(), "give --prefill N and/or --decode N");
    let dag = m.iteration_dag(&batch, tp);
    let cost = slicesched_cost::CostModel::e2e_a100();
    let replayed = slicesched_cost::CostModel::default_a100();
    let fitted: Vec<&str> = cost.fitted_skus().map(|s| s.name.as_str()).collect();
    let how = if fitted.contains(&ctx.sku.name.as_str()) { "profiled" } else { "carried from the A100 by datasheet" };
    println!(
        "{} on {}x {} ({how}), {} tokens in {} requests: one layer, then the whole iteration",
        m.name,
        tp,
        ctx.sku.name,
        batch.tokens(),
        batch.prefills.len() + batch.decodes.len()
    );
    println!("{:<16} {:>12} {:>12} {:>11} {:>11}", "op", "GFLOP", "MB moved", "kernel µs", "engine µs");
    for op in &dag.layer {
        println!(
            "{:<16} {:>12.3} {:>12.3} {:>11.1} {:>11.1}",
            op.kind.name(),
            op.flops as f64 / 1e9,
            op.bytes as f64 / 1e6,
            cost.kernel_ns(&ctx, op) as f64 / 1e3,
            cost.op_ns(&ctx, op) as f64 / 1e3
        );
    }
    let requests = batch.prefills.len() + batch.decodes.len();
    let cpu = slicesched_cost::CpuOverhead::default_a100();
    let c = cost.iteration_cost(&ctx, &dag, requests, &cpu);
    let ms = |ns: u64| ns as f64 / 1e6;
    println!("iteration: {} ops", dag.len());
    println!("  GPU kernels (GEMMs, attention, norms, ...)  {:>10.3} ms", ms(c.kernels_ns));
    println!("  collectives at TP {tp} (NCCL latency + bytes)  {:>10.3} ms", ms(c.collectives_ns));
    let e = cost.engine();
    println!(
        "  launch waits (one launch per {:.0} µs, ahead of the GPU) {:>4.3} ms",
        e.launch_secs * 1e6,
        ms(c.launch_ns)
    );
    println!(
        "  prefill per-prompt work ({:.0} µs/layer)      {:>10.3} ms",
        e.prefill_seq_secs * 1e6,
        ms(c.prefill_seq_ns)
    );
    println!("  CPU per iteration                          {:>10.3} ms", ms(c.cpu_iteration_ns));
    println!("  CPU per request (x{requests})                   {:>10.3} ms", ms(c.cpu_requests_ns));
    println!("  CPU starting prompts (per prefill, per prompt) {:>7.3} ms", ms(c.cpu_prefill_ns));
    println!("  total with the e2e-fitted engine costs     {:>10.3} ms", ms(c.total_ns()));
    let r = replayed.iteration_cost(&ctx, &dag, requests, &cpu);
    println!(
        "  total replay charges (kernels + collectives + CPU; kernels launched back to back) {:>10.3} ms",
        ms(r.total_ns())
    );
    Ok(())
}

fn same_device() -> slicesched_hw::Link {
    slicesched_hw::Link { kind: slicesched_hw::LinkKind::SameDevice, bandwidth: f64::INFINITY, latency_ns: 0 }
}

fn validate_e2e(data: Option<&Path>, holdout_tp: bool, json: bool) -> Result<()> {
    use slicesched_cost::{validate_e2e, CostModel, EngineFit};
    let rows = match data {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            slicesched_cost::parse_e2e(&text, &p.display().to_string())?
        }
        None => slicesched_cost::embedded_rows(),
    };
    let kernels = CostModel::kernels_a100();
    let model = kernels.with_engine(EngineFit::fit(kernels, &rows)?);
    let report = validate_e2e(&model, &rows)?;
    let mut text = format!("engine costs fitted on every row:\n{}", report.table());
    let mut held = Vec::new();
    if holdout_tp {
        for (tp, r) in slicesched_cost::validate_e2e_holdout_tp(kernels, &rows)? {
            text += &format!(
                "\nTP {tp} held out (engine fitted on the other TP degrees): prompt median {:.1}% p90 {:.1}%, token median {:.1}% p90 {:.1}%\n",
                r.prompt.median * 100.0,
                r.prompt.p90 * 100.0,
                r.token.median * 100.0,
                r.token.p90 * 100.0
            );
            held.push(serde_json::json!({"tp": tp, "prompt": r.prompt, "token": r.token}));
        }
    }
    if json {
        eprint!("{text}");
        let mut v = serde_json::to_value(&report)?;
        v["holdout_tp"] = serde_json::Value::Array(held);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{text}");
    }
    Ok(())
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Predict { model, sku, gpus, tp, prefill, prompts, decode, kv } => {
            predict(&model, &sku, gpus.as_deref(), tp, prefill, prompts, decode, kv)
        }
        Command::ValidateE2e { data, holdout_tp, json } => validate_e2e(data.as_deref(), holdout_tp, json),
        Command::Validate { fit, test, test_sku, gpus, json, leave_one_model_out } => {
            let extra = extra_gpus(gpus.as_deref())?;
            let dirs: Vec<&Path> = fit.iter().map(|p| p.as_path()).collect();
            let names = fit.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
            for d in &dirs {
                let (set, sku) = slicesched_cost::read_dir_with_sku(d, &extra)
                    .with_context(|| format!("reading the fit folder {}", d.display()))?;
                eprintln!("fit: {} on {} ({} models)", d.display(), sku.name, set.models.len());
                for n in &set.notes {
                    eprintln!("  note: {n}");
                }
            }
            let report = slicesched_cost::validate_dirs(&dirs, &test, test_sku.as_deref(), &extra)
                .with_context(|| format!("validating the cost model fitted on {names} against {}", test.display()))?;
            if json {
                eprint!("{}", report.table());
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.table());
            }
            if leave_one_model_out {
                let lomo =
                    slicesched_cost::validate_dirs_leave_one_model_out(&dirs, &test, test_sku.as_deref(), &extra)?;
                for m in lomo {
                    eprintln!("\nleft out: {} (fitted on the other models of {names})", m.model);
                    eprint!("{}", m.report.table());
                }
            }
            Ok(())
        }
    }
}
