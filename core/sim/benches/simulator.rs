//! Simulator throughput in op events per second (criterion). The whole-replay wall
//! time of the shipped scenarios is `slicesched bench`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use slicesched_sim::{replay, ReplayOptions, Scenario};
use std::path::Path;

fn bench(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/smoke.toml");
    let scn = Scenario::from_file(&path).expect("smoke scenario");
    let cost = slicesched_cost::CostModel::default_a100();
    let run = || {
        let mut p = slicesched_policy::builtin("dedicated").unwrap();
        replay(&scn, p.as_mut(), cost, ReplayOptions::default(), &mut |_| {})
    };
    let events = run().summary.op_events;
    let mut g = c.benchmark_group("simulator");
    g.throughput(Throughput::Elements(events));
    g.sample_size(10);
    g.bench_function("smoke replay (op events)", |b| b.iter(run));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
