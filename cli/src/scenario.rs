//! `slicesched scenario generate`: writes a drawn mix (`scenario_gen`) and checks that
//! it loads with the parser every replay uses.

use crate::scenario_gen::{generate, relative, render, GenOptions};
use anyhow::{Context, Result};
use slicesched_sim::Scenario;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Draw a plausible multi-tenant mix from a seed and write it as a scenario TOML.
    Generate(GenerateArgs),
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// Seed of the draw: the same seed always writes the same scenario (it is also the
    /// scenario's seed, a TOML integer: at most 2^63 - 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(..=i64::MAX as u64))]
    seed: u64,
    /// GPUs of the cluster (NVSwitch nodes of eight, the last one holding the rest).
    #[arg(long, default_value_t = 8, value_parser = crate::args::at_least_one::<u32>)]
    gpus: u32,
    /// GPU model, from the catalog (A100-80GB, H100-80GB, H200-141GB, L40S, A40).
    #[arg(long, default_value = "H100-80GB")]
    sku: String,
    /// Scenario file to write.
    #[arg(long)]
    out: PathBuf,
    /// Folder holding the shipped traces (the scenario refers to them relative to itself).
    #[arg(long, default_value = "data/traces")]
    traces: PathBuf,
}

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Generate(a) => generate_one(a),
    }
}

fn generate_one(a: GenerateArgs) -> Result<()> {
    let opts = GenOptions { seed: a.seed, gpus: a.gpus, sku: a.sku.clone(), traces: a.traces.clone() };
    let mix = generate(&opts)?;
    let dir = a.out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let text = render(&mix, &relative(dir, &a.traces));
    std::fs::write(&a.out, &text).with_context(|| format!("writing {}", a.out.display()))?;
    let s = Scenario::from_file(&a.out)
        .with_context(|| format!("the generated {} does not load (a generator bug)", a.out.display()))?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "wrote {}: {} tenants on {} {}, {} requests over {} s",
        a.out.display(),
        s.tenants.len(),
        s.cluster.len(),
        mix.sku.name,
        s.requests.len(),
        mix.duration_s
    )?;
    for t in &mix.tenants {
        writeln!(out, "  {:<26} {:<18} gpus {:?}", t.name, t.model, t.gpus)?;
    }
    Ok(())
}
