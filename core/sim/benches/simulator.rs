//! Simulator throughput in op events per second (criterion). The whole-replay wall
//! time of the shipped scenarios is `slicesched bench`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use slicesched_sim::{replay, ReplayOptions, Scenario};
use std::path::Path;

fn bench(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/smoke.toml");
    let scn = Scenario::from_file(&path).expect("smoke scenario");
    let cost = slicesched_cost::CostModel::default_a100();
    let run = |fast_path: bool| {
        let mut p = slicesched_policy::builtin("dedicated").unwrap();
        replay(&scn, p.as_mut(), cost, ReplayOptions { fast_path, ..ReplayOptions::default() }, &mut |_| {})
    };
    let events = run(false).summary.op_events;
    let mut g = c.benchmark_group("simulator");
    g.throughput(Throughput::Elements(events));
    g.sample_size(10);
    // Both paths simulate the same op events; the ratio of their times is the fast
    // path's speed-up (`slicesched bench` shows it per scenario).
    g.bench_function("smoke replay per-op (op events)", |b| b.iter(|| run(false)));
    g.bench_function("smoke replay fast path (op events)", |b| b.iter(|| run(true)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
