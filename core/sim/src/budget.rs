//! The token budget of an iteration that carries decode steps, derived from the tenant's
//! TPOT target (Sarathi-Serve's stall-free batching).
//!
//! Without it a decode step that shares its iteration with a full prefill chunk (4k
//! tokens: 60–100 ms for a 7B model on an H100) waits as long as the chunk takes; a
//! request with a short output (code completions: ~14 tokens) sees its mean TPOT broken
//! by two such iterations. The budget is the largest chunk whose iteration, decodes
//! included, the cost model prices within a share of the TPOT target on the GPUs the
//! engine runs on. A larger budget than the target allows is only kept where no chunk
//! could help (a decode step alone already misses the target).

use slicesched_cost::{CostModel, CpuOverhead, DeviceCtx};
use slicesched_engine::{EngineConfig, Sla};
use slicesched_model::{DecodeItem, IterationBatch, ModelConfig, PrefillItem};

/// Share of the TPOT target one iteration with decodes may take: the rest is for what
/// the price leaves out (other tenants' ops beside it, attention over long contexts).
pub const TPOT_SHARE: f64 = 0.8;
/// Smallest derived budget: below it a prompt pays a full weight read every few hundred
/// tokens and prefill throughput collapses.
pub const MIN_BUDGET: u32 = 512;
/// Decode steps priced beside the chunk, each over this much context.
const DECODES: usize = 8;
const DECODE_KV: u32 = 1024;

/// The engine's decode token budget on `dev`: its own setting when it has one, else the
/// largest chunk (at least [`MIN_BUDGET`], at most `max_batched_tokens`) whose iteration
/// with decodes costs at most [`TPOT_SHARE`] of the TPOT target.
pub fn decode_token_budget(
    cost: &CostModel,
    cpu: &CpuOverhead,
    dev: &DeviceCtx,
    model: &ModelConfig,
    tp: u32,
    engine: &EngineConfig,
    sla: &Sla,
) -> u32 {
    let max = engine.max_batched_tokens;
    if engine.decode_token_budget > 0 {
        return engine.decode_token_budget;
    }
    let target = sla.tpot_target_ns() as f64 * TPOT_SHARE;
    let price = |chunk: u32| iteration_ns(cost, cpu, dev, model, tp, chunk);
    if max <= MIN_BUDGET || price(max) <= target || price(0) > target {
        return max;
    }
    // Largest chunk within the target, by bisection (the price grows with the chunk).
    let (mut lo, mut hi) = (MIN_BUDGET, max);
    if price(lo) > target {
        return MIN_BUDGET;
    }
    while hi - lo > engine.block_size.max(1) {
        let mid = lo + (hi - lo) / 2;
        if price(mid) <= target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// What the cost model prices an iteration of a `chunk`-token prefill chunk (none for
/// 0) beside [`DECODES`] decode steps at, CPU time included, ns.
fn iteration_ns(cost: &CostModel, cpu: &CpuOverhead, dev: &DeviceCtx, model: &ModelConfig, tp: u32, chunk: u32) -> f64 {
    let b = IterationBatch {
        prefills: if chunk > 0 { vec![PrefillItem { chunk, prior_kv: 0, samples: true }] } else { vec![] },
        decodes: vec![DecodeItem { kv_len: DECODE_KV }; DECODES],
    };
    let requests = b.prefills.len() + b.decodes.len();
    cost.iteration_cost(dev, &model.iteration_dag(&b, tp), requests, cpu).total_ns() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str) -> DeviceCtx {
        let sku = slicesched_hw::catalog().into_iter().find(|s| s.name == name).unwrap();
        let group_link =
            slicesched_hw::Link { kind: slicesched_hw::LinkKind::SameDevice, bandwidth: f64::INFINITY, latency_ns: 0 };
        DeviceCtx { sku, group_link }
    }

    fn budget(tpot_ms: f64, sku: &str, engine: EngineConfig) -> u32 {
        let cost = CostModel::default_a100();
        let model = ModelConfig::preset("mistral-7b").unwrap();
        let sla = Sla { ttft_ms: 300.0, ttft_ms_per_1k: 150.0, tpot_ms };
        decode_token_budget(cost, &cost.engine().cpu, &dev(sku), &model, 1, &engine, &sla)
    }

    #[test]
    fn a_tight_tpot_target_caps_the_chunk_and_its_iteration_fits_the_target() {
        let e = EngineConfig::default();
        let b = budget(40.0, "H100-80GB", e);
        assert!(b >= MIN_BUDGET && b < e.max_batched_tokens, "{b}");
        // The cap is the largest chunk within the target, to a block.
        let cost = CostModel::default_a100();
        let model = ModelConfig::preset("mistral-7b").unwrap();
        let price = |chunk| iteration_ns(cost, &cost.engine().cpu, &dev("H100-80GB"), &model, 1, chunk);
        assert!(price(b) <= 40e6 * TPOT_SHARE);
        assert!(price(b + 2 * e.block_size) > 40e6 * TPOT_SHARE);
    }

    #[test]
    fn a_loose_target_or_a_faster_gpu_keeps_more() {
        let e = EngineConfig::default();
        assert_eq!(budget(1000.0, "H100-80GB", e), e.max_batched_tokens);
        assert!(budget(40.0, "H100-80GB", e) > budget(40.0, "A100-80GB", e));
    }

    #[test]
    fn an_unreachable_target_keeps_the_full_budget_and_a_setting_wins() {
        let e = EngineConfig::default();
        // A decode step alone misses 1 ms: capping the chunk would only slow prefill.
        assert_eq!(budget(1.0, "H100-80GB", e), e.max_batched_tokens);
        let set = EngineConfig { decode_token_budget: 999, ..e };
        assert_eq!(budget(40.0, "H100-80GB", set), 999);
    }
}
