//! End to end: Splitwise's measured Llama-2-70B prompt and token times on A100 against
//! kernels + engine costs, and the breakdown `cost predict` prints.

use slicesched_cost::{
    embedded_rows, validate_e2e, validate_e2e_holdout_tp, CostModel, CpuOverhead, DeviceCtx, EngineFit,
};
use slicesched_model::{DecodeItem, IterationBatch, ModelConfig};

#[test]
fn engine_costs_fitted_on_e2e_hold() {
    let rows = embedded_rows();
    assert!(rows.len() >= 50 && rows.iter().all(|r| r.reps >= 5), "{}", rows.len());
    let r = validate_e2e(CostModel::e2e_a100(), &rows).unwrap();
    eprintln!("{}", r.table());
    // The target is 10% / 20% on both; prompt p90 (25%) is not met: batched prefill at
    // TP 4/8 is 30-45% slower than its kernels and nothing here explains it yet.
    assert!(r.prompt.median <= 0.08 && r.prompt.p90 <= 0.26, "prompt {:?}", r.prompt);
    assert!(r.token.median <= 0.03 && r.token.p90 <= 0.09, "token {:?}", r.token);
    // Kernels alone are too fast everywhere: the engine terms are what closes the gap.
    let bare = validate_e2e(&CostModel::kernels_a100().with_engine(EngineFit::NONE), &rows).unwrap();
    assert!(bare.token.median > 2.0 * r.token.median, "{:?} vs {:?}", bare.token, r.token);
    assert!(bare.points.iter().all(|p| p.pred_token_secs < p.row.token_secs));
}

#[test]
fn engine_fitted_without_a_tp_degree_predicts_it() {
    let rows = embedded_rows();
    let kernels = CostModel::kernels_a100();
    let held = validate_e2e_holdout_tp(kernels, &rows).unwrap();
    assert_eq!(held.iter().map(|h| h.0).collect::<Vec<_>>(), [2, 4, 8]);
    for (tp, r) in held {
        eprintln!("TP {tp} held out: prompt {:?} token {:?}", r.prompt, r.token);
        assert!(r.token.median <= 0.07 && r.token.p90 <= 0.13, "TP {tp}: token {:?}", r.token);
        assert!(r.prompt.median <= 0.11 && r.prompt.p90 <= 0.30, "TP {tp}: prompt {:?}", r.prompt);
    }
}

#[test]
fn decode_is_launch_bound_from_tp_4() {
    // Splitwise measured 55 / 45 / 45 ms at TP 2 / 4 / 8: past TP 4 the kernels shrink
    // but the CPU launching them does not.
    let m = CostModel::e2e_a100();
    let cfg = ModelConfig::preset("llama-2-70b").unwrap();
    let dev = DeviceCtx::single_node(slicesched_hw::sku("A100").unwrap());
    let b = IterationBatch { prefills: vec![], decodes: vec![DecodeItem { kv_len: 576 }] };
    let ms = |tp| m.iteration_cost(&dev, &cfg.iteration_dag(&b, tp), 1, &m.engine().cpu).total_ns() as f64 / 1e6;
    let (t2, t4, t8) = (ms(2), ms(4), ms(8));
    assert!((t8 / t4 - 1.0).abs() < 0.03 && t2 > 1.1 * t4, "{t2} {t4} {t8}");
    // Kernels alone keep shrinking with TP.
    let k = |tp| {
        let c = CostModel::kernels_a100().iteration_cost(&dev, &cfg.iteration_dag(&b, tp), 1, &CpuOverhead::ZERO);
        c.total_ns() as f64 / 1e6
    };
    assert!(k(8) < 0.8 * k(4), "{} {}", k(4), k(8));
}

#[test]
fn iteration_cost_parts_sum_to_what_replay_charges() {
    let m = CostModel::e2e_a100();
    let cfg = ModelConfig::preset("llama-2-70b").unwrap();
    let dev = DeviceCtx::single_node(slicesched_hw::sku("A100").unwrap());
    let b = IterationBatch { prefills: vec![], decodes: vec![DecodeItem { kv_len: 700 }; 16] };
    let dag = cfg.iteration_dag(&b, 8);
    let cpu = CpuOverhead::default_a100();
    let c = m.iteration_cost(&dev, &dag, 16, &cpu);
    let ops: u64 = dag.ops().map(|o| m.op_ns(&dev, o.spec)).sum();
    // Launch waits depend on the ops' order, so they are the iteration's, not an op's.
    assert_eq!(c.total_ns(), ops + c.launch_ns + cpu.iteration_ns(16));
    assert!(c.launch_ns > 0 && c.collectives_ns > 0 && c.prefill_seq_ns == 0 && c.cpu_prefill_ns == 0, "{c:?}");
    let kernels: u64 = dag.ops().map(|o| m.kernel_ns(&dev, o.spec)).sum();
    assert_eq!(c.kernels_ns + c.collectives_ns, kernels);
    // What replay charges by default: the kernels back to back, no launch floor.
    let r = CostModel::default_a100().iteration_cost(&dev, &dag, 16, &cpu);
    assert_eq!((r.launch_ns, r.total_ns()), (0, kernels + cpu.iteration_ns(16)));
}
