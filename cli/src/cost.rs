//! `slicesched cost ...`.

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Fit the cost model on profiles and report its relative error on held-out or
    /// other profiles (points under 10 µs excluded).
    Validate {
        /// Profiles to fit on (Vidur layout: model folders with mlp.csv, model_config.yml,
        /// optional attention.csv).
        #[arg(long)]
        fit: PathBuf,
        /// Profiles to test on; when it is the fit folder, 20% of the token counts per
        /// (model, TP, op) are held out with a fixed seed.
        #[arg(long)]
        test: PathBuf,
        /// Catalog GPU the test profiles were measured on (default A100-80GB).
        #[arg(long)]
        test_sku: Option<String>,
        /// Write the report as JSON to stdout (the table goes to stderr).
        #[arg(long)]
        json: bool,
        /// Also fit on all models but one and test on the one left out, for each model.
        #[arg(long)]
        leave_one_model_out: bool,
    },
    /// Predicted per-op latency of one iteration of a model on a catalog GPU.
    Predict {
        /// Preset name or config file.
        #[arg(long)]
        model: String,
        /// Catalog GPU (A100-80GB, H100-80GB, H200-141GB, L40S, A40).
        #[arg(long, default_value = "A100-80GB")]
        sku: String,
        /// Tensor-parallel degree (GPUs of one node with NVLink).
        #[arg(long, default_value_t = 1, value_parser = crate::args::at_least_one::<u32>)]
        tp: u32,
        /// Prompt tokens prefilled in the iteration (one chunk).
        #[arg(long, default_value_t = 0)]
        prefill: u32,
        /// Requests decoding in the iteration.
        #[arg(long, default_value_t = 0)]
        decode: u32,
        /// KV length of each decoding request.
        #[arg(long, default_value_t = 1024)]
        kv: u32,
    },
}

fn predict(model: &str, sku: &str, tp: u32, prefill: u32, decode: u32, kv: u32) -> Result<()> {
    use slicesched_model::{DecodeItem, IterationBatch, ModelConfig, PrefillItem};
    let m = ModelConfig::resolve(model, std::path::Path::new("."))?;
    m.check_tp(tp).map_err(anyhow::Error::msg)?;
    let cluster = slicesched_hw::Cluster::uniform(sku, tp)?;
    let gpus: Vec<_> = cluster.gpus.iter().map(|g| g.id).collect();
    let ctx = slicesched_cost::DeviceCtx { sku: cluster.gpus[0].sku.clone(), group_link: cluster.group_link(&gpus) };
    let mut batch = IterationBatch::default();
    if prefill > 0 {
        batch.prefills.push(PrefillItem { chunk: prefill, prior_kv: 0, samples: true });
    }
    batch.decodes.extend((0..decode).map(|_| DecodeItem { kv_len: kv }));
    anyhow::ensure!(!batch.is_empty(), "give --prefill N and/or --decode N");
    let dag = m.iteration_dag(&batch, tp);
    let cost = slicesched_cost::CostModel::default_a100();
    println!("{} on {}x {} ({} tokens): one layer, then the whole iteration", m.name, tp, ctx.sku.name, batch.tokens());
    println!("{:<16} {:>12} {:>12} {:>10}", "op", "GFLOP", "MB moved", "µs");
    for op in &dag.layer {
        println!(
            "{:<16} {:>12.3} {:>12.3} {:>10.1}",
            op.kind.name(),
            op.flops as f64 / 1e9,
            op.bytes as f64 / 1e6,
            cost.op_ns(&ctx, op) as f64 / 1e3
        );
    }
    let total: u64 = dag.ops().map(|o| cost.op_ns(&ctx, o.spec)).sum();
    println!("iteration: {} ops, {:.3} ms", dag.len(), total as f64 / 1e6);
    Ok(())
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Predict { model, sku, tp, prefill, decode, kv } => predict(&model, &sku, tp, prefill, decode, kv),
        Command::Validate { fit, test, test_sku, json, leave_one_model_out } => {
            let report = slicesched_cost::validate(&fit, &test, test_sku.as_deref()).with_context(|| {
                format!("validating the cost model fitted on {} against {}", fit.display(), test.display())
            })?;
            if json {
                eprint!("{}", report.table());
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.table());
            }
            if leave_one_model_out {
                for m in slicesched_cost::validate_leave_one_model_out(&fit)? {
                    eprintln!("\nleft out: {} (fitted on the others)", m.model);
                    eprint!("{}", m.report.table());
                }
            }
            Ok(())
        }
    }
}
