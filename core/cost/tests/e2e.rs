//! End to end: Splitwise's measured Llama-2-70B prompt and token times on A100 against
//! kernels + engine costs, and the breakdown `cost predict` prints.

use slicesched_cost::{embedded_rows, validate_e2e, CostModel, CpuOverhead, DeviceCtx, EngineFit};
use slicesched_model::{DecodeItem, IterationBatch, ModelConfig};

#[test]
fn engine_costs_fitted_on_e2e_hold() {
    let rows = embedded_rows();
    assert!(rows.len() >= 50 && rows.iter().all(|r| r.reps >= 5), "{}", rows.len());
    let r = validate_e2e(CostModel::e2e_a100(), &rows).unwrap();
    eprintln!("{}", r.table());
    // Regression guards at today's figures (the target: 10% / 20%).
    assert!(r.prompt.median <= 0.10 && r.prompt.p90 <= 0.30, "prompt {:?}", r.prompt);
    assert!(r.token.median <= 0.12 && r.token.p90 <= 0.20, "token {:?}", r.token);
    // Kernels alone are too fast everywhere: the engine terms are what closes the gap.
    let bare = validate_e2e(&CostModel::kernels_a100().with_engine(EngineFit::NONE), &rows).unwrap();
    assert!(bare.token.median > 2.0 * r.token.median, "{:?} vs {:?}", bare.token, r.token);
    assert!(bare.points.iter().all(|p| p.pred_token_secs < p.row.token_secs));
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
    assert_eq!(c.total_ns(), ops + cpu.iteration_ns(16));
    assert!(c.launch_ns > 0 && c.collectives_ns > 0 && c.prefill_seq_ns == 0, "{c:?}");
    let kernels: u64 = dag.ops().map(|o| m.kernel_ns(&dev, o.spec)).sum();
    assert_eq!(c.kernels_ns + c.collectives_ns, kernels);
    // What replay charges by default: the kernels back to back, no launch floor.
    let r = CostModel::default_a100().iteration_cost(&dev, &dag, 16, &cpu);
    assert_eq!((r.launch_ns, r.total_ns()), (0, kernels + cpu.iteration_ns(16)));
}
