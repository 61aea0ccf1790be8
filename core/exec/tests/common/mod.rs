//! Helpers the executor's integration tests share: small models, weights and placements.

#![allow(dead_code)]

use half::bf16;
use rand::{Rng, SeedableRng};
use slicesched_exec::model::{ExecModel, HostWeights};
use slicesched_exec::runner::{ExecBatch, OpPlace, Runner, SeqWork};
use slicesched_exec::{CpuBackend, CpuDeviceSpec, DeviceId};
use slicesched_model::{Act, Biases, ModelConfig, Moe, Norm, OpKind, Segment};

pub const GIB: u64 = 1 << 30;

pub fn backend(n: usize) -> CpuBackend {
    CpuBackend::new(&vec![CpuDeviceSpec { memory_bytes: GIB, cores: 1 }; n])
}

pub fn tiny() -> ExecModel {
    ExecModel::new(ModelConfig::preset("tiny-2l").unwrap())
}

/// A smaller model still: fast enough for the f64 reference in every test.
pub fn micro() -> ExecModel {
    let mut c = ModelConfig::preset("tiny-2l").unwrap();
    c.name = "micro".into();
    c.hidden_size = 64;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.intermediate_size = 128;
    c.vocab_size = 96;
    let mut m = ExecModel::new(c);
    m.numerics.max_positions = 256;
    m
}

/// `micro()`'s sizes with one family's departures from Llama.
pub fn arch(family: &str) -> ExecModel {
    let mut c = micro().config;
    c.name = format!("micro-{family}");
    match family {
        // phi-2: LayerNorm, tanh GELU, a plain MLP, biases everywhere, one norm per
        // layer feeding attention and MLP side by side, a quarter of each head rotated.
        "phi" => {
            c.norm = Norm::Layer;
            c.activation = Act::GeluTanh;
            c.gated_mlp = false;
            c.biases = Biases { qkv: true, o: true, mlp: true, lm_head: true };
            c.parallel_block = true;
            c.rotary_dim = Some(4);
        }
        // Qwen2: q/k/v biases; a small one ties its embeddings.
        "qwen2" => {
            c.biases.qkv = true;
            c.tie_embeddings = true;
        }
        "qwen3" => c.qk_norm = true,
        // A window shorter than the prompts below, so it masks.
        "window" => c.sliding_window = Some(8),
        // Exact GELU in a plain MLP with biases, RMSNorm, sequential blocks.
        "gelu" => {
            c.activation = Act::Gelu;
            c.gated_mlp = false;
            c.biases = Biases { qkv: true, o: true, mlp: true, lm_head: false };
        }
        // Mixtral: 6 experts (each its own unit), 2 a token, renormalised.
        "moe" => c.moe = Some(Moe { experts: 6, top_k: 2, expert_intermediate: 48, expert_parallel: false }),
        // Qwen3-MoE: query/key norms, experts named under `mlp`.
        "qwen3moe" => {
            c.qk_norm = true;
            c.moe = Some(Moe { experts: 8, top_k: 3, expert_intermediate: 32, expert_parallel: false });
        }
        // The two mixtures with their experts split across the group whole (expert
        // parallelism: dispatch and combine all-to-all, the residual all-gathered).
        "moe-ep" | "qwen3moe-ep" => {
            let mut m = arch(family.trim_end_matches("-ep"));
            m.config.name = format!("micro-{family}");
            m.config.moe.as_mut().expect("a mixture").expert_parallel = true;
            return m;
        }
        // ALiBi in place of RoPE (bloom's, MPT's, Baichuan's position encoding).
        "alibi" => c.alibi = true,
        // Gemma-2: sandwich norms, tanh-GELU gated MLP, tied embeddings, a window on layer
        // 0 only; its numerics (`Numerics::for_model`) with caps low enough to bite and a
        // query scale other than the head dim's, so that each shows in the logits.
        "gemma2" => {
            c.sandwich_norms = true;
            c.activation = Act::GeluTanh;
            c.tie_embeddings = true;
            c.sliding_window = Some(8);
            c.window_layers = Some(1);
        }
        // Qwen2 windowing its last layer only (`max_window_layers`).
        "qwenwin" => {
            c.biases.qkv = true;
            c.sliding_window = Some(8);
            c.window_layers = Some(1);
        }
        other => panic!("no family {other}"),
    }
    let mut m = ExecModel::new(c);
    m.numerics.max_positions = 256;
    if family == "gemma2" {
        m.numerics.query_pre_attn_scalar = Some(2.0);
        m.numerics.attn_logit_softcap = Some(1.0);
        m.numerics.final_logit_softcap = Some(3.0);
    }
    m
}

pub fn random_bf16(n: usize, seed: u64, scale: f32) -> Vec<bf16> {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| bf16::from_f32(r.random_range(-scale..scale))).collect()
}

pub fn weights(m: &ExecModel) -> HostWeights {
    HostWeights::random(m, 7)
}

pub fn prompt(len: usize, vocab: usize, seed: u64) -> Vec<i32> {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| r.random_range(0..vocab as i32)).collect()
}

pub fn home(_: u32, _: OpKind, _: Segment) -> OpPlace {
    OpPlace { group: 0, priority: 0 }
}

/// Generates `steps` tokens greedily: the whole prompt as one chunk, then decodes.
pub fn generate(
    r: &mut Runner,
    tenant: usize,
    seq: u64,
    prompt: &[i32],
    steps: usize,
    place: &dyn Fn(u32, OpKind, Segment) -> OpPlace,
) -> (Vec<i32>, Vec<Vec<f32>>) {
    let mut toks = Vec::new();
    let mut logits = Vec::new();
    let mut batch =
        ExecBatch { seqs: vec![SeqWork { seq, tokens: prompt.to_vec(), start_pos: 0, prefill: true, samples: true }] };
    for pos in prompt.len()..prompt.len() + steps {
        let out = r.run(tenant, &batch, place, true).unwrap();
        let t = out.tokens[0].1;
        toks.push(t);
        logits.push(out.logits.unwrap().remove(0));
        batch =
            ExecBatch { seqs: vec![SeqWork { seq, tokens: vec![t], start_pos: pos, prefill: false, samples: true }] };
    }
    r.release(tenant, seq);
    (toks, logits)
}

pub fn rel_err(a: &[f32], r: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(r).map(|(a, r)| (*a as f64 - r).powi(2)).sum();
    let den: f64 = r.iter().map(|r| r * r).sum();
    (num / den.max(1e-30)).sqrt()
}

pub fn devices(ids: &[u32]) -> Vec<DeviceId> {
    ids.iter().map(|&i| DeviceId(i)).collect()
}
