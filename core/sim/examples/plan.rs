//! Prints a scenario's deployment plan for each replica mode: every tenant's load as the
//! planner meters it, its KV reservation, and where its copies went.
//!
//! `cargo run --release -p slicesched-sim --example plan -- SCENARIO [RATE_SCALE [PROFILE_DIR]]`
//! (PROFILE_DIR: a `slicesched profile` folder whose fitted cost model prices the loads).
//! `PLAN_DURATION_S=300` plans the first 300 s, as `replay --duration-s 300` and
//! `sweep --duration-s 300` do: the loads, and so the plan, are those of that stretch.

use slicesched_cost::CostModel;
use slicesched_sim::{plan_with, tenant_loads_with, ReplicaMode, Scenario};
use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A reader that stops early (`| head`) is not an error.
    match print_plans() {
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            Ok(())
        }
        r => r,
    }
}

fn print_plans() -> Result<(), Box<dyn std::error::Error>> {
    let mut out = std::io::stdout().lock();
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: plan SCENARIO [RATE_SCALE]")?;
    let scale: f64 = args.next().map_or(Ok(1.0), |s| s.parse())?;
    let duration_s = std::env::var("PLAN_DURATION_S").ok().map(|d| d.parse::<f64>()).transpose()?;
    let scn = Scenario::from_file_for(std::path::Path::new(&path), duration_s)?.with_rate_scale(scale);
    let fitted = match args.next() {
        Some(dir) => Some(CostModel::fit_dir(std::path::Path::new(&dir), &scn.cluster.gpus[0].sku)?),
        None => None,
    };
    let cost = fitted.as_ref().unwrap_or(CostModel::default_a100());
    writeln!(out, "{} at rate scale {scale}", scn.spec.name)?;
    writeln!(out, "tenant              rho mean  rho peak  gpu peak  backlog s  ttft s  peak req/s  KV need (tokens)  home KV (tokens)")?;
    for (t, l) in scn.tenants.iter().zip(tenant_loads_with(&scn, cost)) {
        writeln!(
            out,
            "{:<18} {:>9.2} {:>9.2} {:>9.2} {:>10.1} {:>7.2} {:>11.2} {:>17} {:>17}",
            t.name,
            l.rho_mean,
            l.rho_peak,
            l.gpu_peak,
            l.backlog_s,
            l.ttft_s,
            l.profile.peak.requests,
            l.kv_tokens,
            t.kv_blocks as u64 * t.engine.block_size as u64
        )?;
    }
    for mode in [ReplicaMode::Serving, ReplicaMode::Both] {
        let p = plan_with(&scn, mode, cost)?;
        writeln!(out, "\n{mode:?}:")?;
        for (i, t) in p.tenants.iter().enumerate() {
            let copies: Vec<String> = p
                .deployment
                .replicas(slicesched_gmg::TenantId(i as u32))
                .map(|h| {
                    let gpus = &p.deployment.group(h.group).gpus;
                    let kind = if h.serves { "serving" } else { "weights" };
                    format!(
                        "{kind} {:?} layers {}-{} KV {}",
                        gpus.iter().map(|g| g.0).collect::<Vec<_>>(),
                        h.layers.0,
                        h.layers.1,
                        h.kv_blocks as u64 * t.engine.block_size as u64
                    )
                })
                .collect();
            writeln!(
                out,
                "  {:<18} keeps {:>7} tokens, home KV {:>7} tokens; copies: {}",
                t.name,
                t.keep_kv_tokens,
                t.kv_blocks as u64 * t.engine.block_size as u64,
                if copies.is_empty() { "none".into() } else { copies.join(", ") }
            )?;
        }
    }
    Ok(())
}
