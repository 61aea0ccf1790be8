//! End-to-end replays: determinism, hand-computable latencies, accounting.

mod common;
use common::*;
use slicesched_cost::{CostModel, CpuOverhead, DeviceCtx};
use slicesched_model::{IterationBatch, ModelConfig, PrefillItem};
use slicesched_sim::ReplayOptions;

#[test]
fn same_inputs_same_result_bit_for_bit() {
    let scn = scenario(TWO_TENANTS);
    let a = run(&scn, ReplayOptions::default());
    let b = run(&scn, ReplayOptions::default());
    assert_eq!(without_timing(&a.summary), without_timing(&b.summary));
    assert_eq!(serde_json::to_string(&a.records).unwrap(), serde_json::to_string(&b.records).unwrap());
    assert_eq!(serde_json::to_string(&a.series).unwrap(), serde_json::to_string(&b.series).unwrap());
    assert!(a.summary.op_events > 10_000, "the scenario should do real work");
}

#[test]
fn a_different_seed_changes_the_arrivals() {
    let a = scenario(TWO_TENANTS);
    let b = scenario(&TWO_TENANTS.replace("seed = 11", "seed = 12"));
    assert_ne!(a.requests, b.requests);
}

fn one_request(prompt: u32, output: u32, tp_gpus: &str) -> String {
    // A one-row Azure-layout trace: exactly one arrival at t = 0.
    let dir = std::env::temp_dir().join(format!("slicesched-one-{}-{prompt}-{output}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("one.csv");
    std::fs::write(
        &csv,
        format!("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:00:00.0000000,{prompt},{output}"),
    )
    .unwrap();
    format!(
        r#"
name = "one"
seed = 1
[cluster]
[[cluster.nodes]]
gpu = "H100-80GB"
gpus = 2
[[tenants]]
name = "solo"
model = "llama-3-8b"
gpus = {tp_gpus}
sla = {{ ttft_ms = 1000, tpot_ms = 100 }}
trace = {{ kind = "azure", path = "{}" }}
"#,
        csv.display()
    )
}

/// Sum of the predicted op times of one prefill iteration of `prompt` tokens.
fn prefill_ns(prompt: u32, scn: &slicesched_sim::Scenario) -> u64 {
    let t = &scn.tenants[0];
    let model = ModelConfig::preset("llama-3-8b").unwrap();
    let batch =
        IterationBatch { prefills: vec![PrefillItem { chunk: prompt, prior_kv: 0, samples: true }], decodes: vec![] };
    let tp = t.gpus.len() as u32;
    let dag = model.iteration_dag(&batch, tp);
    let ctx = DeviceCtx { sku: scn.cluster.gpu(t.gpus[0]).sku.clone(), group_link: scn.cluster.group_link(&t.gpus) };
    dag.ops().map(|o| CostModel::default_a100().op_ns(&ctx, o.spec).max(1)).sum()
}

#[test]
fn ttft_of_a_lone_request_is_its_prefill_iteration() {
    for gpus in ["[0]", "[0, 1]"] {
        let scn = scenario(&one_request(1000, 1, gpus));
        assert_eq!(scn.requests.len(), 1, "the window holds exactly one arrival");
        let no_cpu = ReplayOptions { cpu_overhead: CpuOverhead::ZERO, ..checked() };
        let r = run(&scn, no_cpu);
        let rec = &r.records[0];
        assert_eq!(rec.ttft_ns(), Some(prefill_ns(1000, &scn)), "TP group {gpus}");
        assert_eq!(rec.finish_ns, rec.first_token_ns, "one output token: done at the first token");

        // The engine's CPU time before the iteration adds to TTFT, nothing else does.
        let with_cpu = run(&scn, checked());
        let oh = CpuOverhead::default_a100().iteration_ns(1);
        assert_eq!(with_cpu.records[0].ttft_ns(), Some(prefill_ns(1000, &scn) + oh));
    }
}

#[test]
fn decode_steps_follow_the_prefill() {
    let scn = scenario(&one_request(200, 5, "[0]"));
    let r = run(&scn, ReplayOptions { cpu_overhead: CpuOverhead::ZERO, ..checked() });
    let rec = &r.records[0];
    assert_eq!(r.summary.iterations, 5, "one prefill iteration, then four decodes");
    assert!(rec.tpot_ns().unwrap() > 0);
    assert!(rec.tpot_ns().unwrap() < rec.ttft_ns().unwrap(), "a decode step is cheaper than a 200-token prefill");
    assert_eq!(r.dependency_violations, 0);
}

#[test]
fn accounting_adds_up() {
    let scn = scenario(TWO_TENANTS);
    let r = run(&scn, checked());
    let s = &r.summary;
    assert_eq!(r.dependency_violations, 0);
    assert_eq!(s.oom_events, 0);
    assert_eq!(s.requests, s.completed + s.dropped);
    assert_eq!(s.tenants.iter().map(|t| t.requests).sum::<u64>(), s.requests);
    for rec in &r.records {
        assert!(rec.finish_ns.is_some() || rec.dropped.is_some(), "request {} neither finished nor dropped", rec.id);
    }
    // The timeline's busy time equals the per-GPU busy figures.
    for g in &s.gpus {
        let series: u64 = r.series.gpu_busy_ns[g.gpu as usize].iter().sum();
        assert!((series as f64 / 1e9 - g.busy_s).abs() < 1e-6);
        assert!(g.peak_memory_gb <= g.capacity_gb);
    }
    // GPU 2 is in tenant b's TP group with GPU 1: they are busy together.
    assert_eq!(s.gpus[1].busy_s, s.gpus[2].busy_s);
}

#[test]
fn overload_is_reported_not_lost() {
    // A 14B model on one L40S with little room for KV and prompts as long as its
    // context window: requests that can never fit are dropped with a reason; the rest
    // finish.
    let scn = scenario(
        r#"
name = "tight"
seed = 3
duration_s = 30
drain_s = 5
[cluster]
[[cluster.nodes]]
gpu = "L40S"
gpus = 1
[[tenants]]
name = "big"
model = "qwen2.5-14b"
gpus = [0]
sla = { ttft_ms = 500, tpot_ms = 50 }
trace = { kind = "poisson", rate = 4.0, prompt = { dist = "uniform", min = 1000, max = 120000 }, output = { dist = "fixed", value = 50 } }
"#,
    );
    let r = run(&scn, checked());
    let s = &r.summary;
    assert_eq!(s.oom_events, 0);
    assert!(s.dropped > 0, "some prompts exceed the KV cache");
    assert!(s.dropped_by_reason.iter().any(|(why, _)| why.contains("KV cache")), "{:?}", s.dropped_by_reason);
    assert_eq!(s.requests, s.completed + s.dropped);
    assert!(r.records.iter().all(|x| x.finish_ns.is_some() != x.dropped.is_some()));
}

/// Tenant `t` of a one-A100 scenario, serving `model` (with `extra` lines) under a
/// load whose prompts run from 1k to 8k tokens and outputs are 600 tokens.
fn long_prompts(model: &str, extra: &str) -> String {
    format!(
        r#"
name = "long"
seed = 5
duration_s = 60
drain_s = 30
[cluster]
[[cluster.nodes]]
gpu = "A100-80GB"
gpus = 1
[[tenants]]
name = "t"
model = "{model}"
gpus = [0]
{extra}
sla = {{ ttft_ms = 500, tpot_ms = 50 }}
trace = {{ kind = "poisson", rate = 1.0, prompt = {{ dist = "uniform", min = 1000, max = 8000 }}, output = {{ dist = "fixed", value = 600 }} }}
"#
    )
}

#[test]
fn a_request_longer_than_the_context_window_is_dropped_at_arrival_and_counted() {
    // Llama-2-7B serves 4,096 positions: a longer prompt, or one whose output would
    // run past them, is refused as a server refuses it, never scheduled.
    let scn = scenario(&long_prompts("llama-2-7b", ""));
    assert_eq!(scn.tenants[0].max_model_len, Some(4096));
    let r = run(&scn, checked());
    let count = |f: &dyn Fn(u64, u64) -> bool| {
        scn.requests.iter().filter(|(_, q)| f(q.prompt_tokens as u64, q.output_tokens as u64)).count() as u64
    };
    let over_prompt = count(&|p, _| p > 4096);
    let over_total = count(&|p, o| p <= 4096 && p + o > 4096);
    assert!(over_prompt > 0 && over_total > 0, "{over_prompt} {over_total}");
    let by = |why: &str| r.summary.dropped_by_reason.iter().find(|(w, _)| w.starts_with(why)).map(|x| x.1);
    assert_eq!(by("prompt over the model's context window"), Some(over_prompt), "{:?}", r.summary.dropped_by_reason);
    assert_eq!(by("prompt + output over the model's context window"), Some(over_total));
    for x in r.records.iter().filter(|x| x.prompt_tokens as u64 + x.output_tokens as u64 > 4096) {
        assert!(x.first_token_ns.is_none() && x.dropped.is_some() && x.violates(), "{x:?}");
    }
    // The rest are served: with a 32k window (Mistral-7B) nothing is refused for length.
    let wide = run(&scenario(&long_prompts("mistral-7b", "")), checked());
    assert!(wide.summary.dropped_by_reason.iter().all(|(w, _)| !w.contains("context window")));
    assert!(r.summary.completed > 0);
}

#[test]
fn a_tenants_max_model_len_lowers_the_window_and_cannot_raise_it() {
    let scn = scenario(&long_prompts("mistral-7b", "max_model_len = 2048"));
    assert_eq!(scn.tenants[0].max_model_len, Some(2048));
    let r = run(&scn, checked());
    let refused: u64 =
        r.summary.dropped_by_reason.iter().filter(|(w, _)| w.contains("context window")).map(|x| x.1).sum();
    let longer = scn.requests.iter().filter(|(_, q)| q.prompt_tokens + q.output_tokens > 2048).count() as u64;
    assert_eq!(refused, longer);
    let e = scenario_err(&long_prompts("llama-2-7b", "max_model_len = 8192"));
    assert!(e.contains("tenants[0] (t).max_model_len") && e.contains("8192") && e.contains("4096"), "{e}");
    let e = scenario_err(&long_prompts("llama-2-7b", "max_model_len = 0"));
    assert!(e.contains("max_model_len") && e.contains("positive"), "{e}");
}
