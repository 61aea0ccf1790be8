//! What preparing the what-if's candidate plans costs before any replay, two ways side
//! by side in one run: metering the trace once per candidate and cloning each planned
//! scenario for its window, against metering once (`plan_for_loads`) and filtering the
//! window's requests once.
//!
//! `cargo run --release -p slicesched-sim --example plan_startup -- SCENARIO [RATE_SCALE [ROUNDS]]`

use slicesched_cost::CostModel;
use slicesched_sim::{
    plan_for_loads, plan_ordered, tenant_loads_with, whatif_window, PhaseOrder, ReplicaMode, Scenario, WHATIF_WINDOW_S,
};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: plan_startup SCENARIO [RATE_SCALE [ROUNDS]]")?;
    let scale: f64 = args.next().map_or(Ok(1.0), |s| s.parse())?;
    let rounds: u32 = args.next().map_or(Ok(5), |s| s.parse())?;
    let scn = Scenario::from_file(std::path::Path::new(&path))?.with_rate_scale(scale);
    let cost = CostModel::default_a100();
    // Timed too: it meters the trace's 10-s windows a second time (see the README's
    // "Plans chosen by replaying them").
    let t = Instant::now();
    let window = whatif_window(&scn, cost, (WHATIF_WINDOW_S * 1e9) as u64);
    let window_ms = 1e3 * t.elapsed().as_secs_f64();
    let in_window = |r: &slicesched_trace::Request| (window.0..window.1).contains(&r.arrival_ns);
    let (mut per_candidate, mut once) = (0f64, 0f64);
    for _ in 0..rounds {
        // Interleaved, so that both ways see the same machine noise.
        let t = Instant::now();
        for order in PhaseOrder::ALL {
            let mut p = plan_ordered(&scn, ReplicaMode::Both, cost, order)?.clone();
            p.requests.retain(|(_, r)| in_window(r));
            std::hint::black_box(&p);
        }
        per_candidate += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let loads = tenant_loads_with(&scn, cost);
        let window_requests: Vec<_> = scn.requests.iter().filter(|(_, r)| in_window(r)).cloned().collect();
        for order in PhaseOrder::ALL {
            std::hint::black_box(plan_for_loads(&scn, ReplicaMode::Both, &loads, order)?);
        }
        std::hint::black_box(window_requests);
        once += t.elapsed().as_secs_f64();
    }
    let n = rounds as f64;
    println!(
        "{} ({} requests) at rate scale {scale}: candidates prepared in {:.1} ms metering per candidate, \
         {:.1} ms metering once: {:.2}x; the window chosen in {:.2} ms",
        scn.spec.name,
        scn.requests.len(),
        1e3 * per_candidate / n,
        1e3 * once / n,
        per_candidate / once,
        window_ms
    );
    Ok(())
}
