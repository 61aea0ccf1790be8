//! The benchmark's plumbing (not its speed): every figure is measured and finite, and
//! the backend's GEMMs agree with the paths it is set against.

use slicesched_exec::bench::{self, BenchOptions};

#[test]
fn every_figure_of_the_bench_is_measured() {
    let opts = BenchOptions {
        gemms: vec![(1, 96, 64), (3, 40, 33), (20, 64, 64)],
        reps: 1,
        launches: 20,
        models: vec!["tiny-2l".into()],
        generate: (2, 16, 2),
        bandwidth_mib: 4,
    };
    let mut seen = Vec::new();
    let r = bench::run(&opts, &mut |done, total, what| seen.push((done, total, what.to_string()))).unwrap();
    assert_eq!(seen.last().map(|s| (s.0, s.1)), Some((seen[0].1, seen[0].1)), "{seen:?}");
    let pos = |v: f64| v.is_finite() && v > 0.0;
    assert!(pos(r.fma_peak_gflops) && pos(r.read_gbs) && pos(r.bare_best_gflops));
    assert_eq!(r.gemm.len(), 3);
    for g in &r.gemm {
        assert!([g.backend, g.kernel, g.bare, g.backend_weight_gbs].into_iter().all(pos), "{g:?}");
    }
    let o = &r.overhead;
    assert!([o.launch_to_seen_us_p50, o.launch_to_seen_us_p90, o.runner_step_us_p50].iter().all(|v| v.is_finite()));
    let t = &r.tokens[0];
    assert_eq!((t.model.as_str(), t.batch, t.steps), ("tiny-2l", 2, 2));
    assert!(pos(t.prefill_tok_s) && pos(t.decode_tok_s));
}
