//! Replays SCENARIO (its first DURATION_S seconds, or `-` for all) under a built-in POLICY
//! with the fast path on (`fast`) or off (`perop`), and prints the summary (without
//! timing), every request record and the series as JSON lines: two runs' outputs diffed
//! show where the fast path departs from the per-op path, which it must never do.
//! `cargo run --release -p slicesched-sim --example paths -- scenarios/mix-6t.toml 100 slice fast`
use slicesched_sim::{plan, replay, ReplayOptions, Scenario};
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, dur, policy, fast] = args.as_slice() else {
        return Err("usage: SCENARIO DURATION|- POLICY fast|perop".into());
    };
    let d = if dur == "-" { None } else { Some(dur.parse::<f64>()?) };
    let scn = Scenario::from_file_for(std::path::Path::new(path), d)?;
    let mut p = slicesched_policy::builtin(policy).ok_or("no policy")?;
    let planned = plan(&scn, p.replicas())?;
    let opts = ReplayOptions { fast_path: fast == "fast", ..ReplayOptions::default() };
    let t = std::time::Instant::now();
    let r = replay(&planned, p.as_mut(), slicesched_cost::CostModel::default_a100(), opts, &mut |_| {});
    let wall = t.elapsed().as_secs_f64();
    let mut v = serde_json::to_value(&r.summary)?;
    v.as_object_mut().unwrap().remove("timing");
    println!("{}", v);
    for rec in &r.records {
        println!("{}", serde_json::to_string(rec)?);
    }
    println!("{}", serde_json::to_string(&r.series)?);
    eprintln!(
        "{} op events {:.2}s {:.2} Mev/s fast_iters {}",
        r.summary.op_events,
        wall,
        r.summary.op_events as f64 / wall / 1e6,
        r.fast_iterations
    );
    Ok(())
}
