//! Replays a scenario at one rate scale under native built-in policies and prints each
//! one's violations, OOM events and per-tenant violations: a quick check of a planner
//! change without building the CLI (the same `plan` + `replay` as `slicesched compare`
//! with `native:` policies).
//!
//! `cargo run --release -p slicesched-sim --example point -- SCENARIO RATE_SCALE POLICY...`

use slicesched_sim::{plan, replay, ReplayOptions, Scenario};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, scale, policies @ ..] = args.as_slice() else {
        return Err("usage: point SCENARIO RATE_SCALE POLICY...".into());
    };
    let scn = Scenario::from_file(std::path::Path::new(path))?.with_rate_scale(scale.parse()?);
    for name in policies {
        let mut p = slicesched_policy::builtin(name).ok_or(format!("no built-in policy {name}"))?;
        let planned = plan(&scn, p.replicas())?;
        let started = std::time::Instant::now();
        let r = replay(
            &planned,
            p.as_mut(),
            slicesched_cost::CostModel::default_a100(),
            ReplayOptions::default(),
            &mut |_| {},
        );
        let s = &r.summary;
        println!(
            "{name} at {scale}: {:.2}% violations, {} OOM, {} completed, {:.0} s wall",
            100.0 * s.violation_rate,
            s.oom_events,
            s.completed,
            started.elapsed().as_secs_f64()
        );
        for t in &s.tenants {
            println!("  {:<18} {:>6.2}%", t.name, 100.0 * t.violation_rate);
        }
    }
    Ok(())
}
