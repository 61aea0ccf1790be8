//! Prints a scenario's deployment plan for each replica mode: every tenant's load as the
//! planner meters it, its KV reservation, and where its copies went.
//!
//! `cargo run --release -p slicesched-sim --example plan -- SCENARIO [RATE_SCALE]`

use slicesched_sim::{plan, tenant_loads, ReplicaMode, Scenario};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: plan SCENARIO [RATE_SCALE]")?;
    let scale: f64 = args.next().map_or(Ok(1.0), |s| s.parse())?;
    let scn = Scenario::from_file(std::path::Path::new(&path))?.with_rate_scale(scale);
    println!("{} at rate scale {scale}", scn.spec.name);
    println!("tenant              rho mean  rho peak  peak req/s  KV need (tokens)  home KV (tokens)");
    for (t, l) in scn.tenants.iter().zip(tenant_loads(&scn)) {
        println!(
            "{:<18} {:>9.2} {:>9.2} {:>11.2} {:>17} {:>17}",
            t.name,
            l.rho_mean,
            l.rho_peak,
            l.profile.peak.requests,
            l.kv_tokens,
            t.kv_blocks as u64 * t.engine.block_size as u64
        );
    }
    for mode in [ReplicaMode::Serving, ReplicaMode::Both] {
        let p = plan(&scn, mode)?;
        println!("\n{mode:?}:");
        for (i, t) in p.tenants.iter().enumerate() {
            let copies: Vec<String> = p
                .deployment
                .replicas(slicesched_gmg::TenantId(i as u32))
                .map(|h| {
                    let gpus = &p.deployment.group(h.group).gpus;
                    let kind = if h.serves { "serving" } else { "weights" };
                    format!(
                        "{kind} {:?} layers {}-{}",
                        gpus.iter().map(|g| g.0).collect::<Vec<_>>(),
                        h.layers.0,
                        h.layers.1
                    )
                })
                .collect();
            println!(
                "  {:<18} keeps {:>7} tokens, home KV {:>7} tokens; copies: {}",
                t.name,
                t.keep_kv_tokens,
                t.kv_blocks as u64 * t.engine.block_size as u64,
                if copies.is_empty() { "none".into() } else { copies.join(", ") }
            );
        }
    }
    Ok(())
}
