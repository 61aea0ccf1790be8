//! The iteration DAG of the architectures beyond the Llama layout.

use slicesched_model::{preset_names, DecodeItem, IterationBatch, ModelConfig, OpKind, OpShape, PrefillItem, Segment};

fn mixed() -> IterationBatch {
    IterationBatch {
        prefills: vec![PrefillItem { chunk: 512, prior_kv: 8000, samples: true }],
        decodes: vec![DecodeItem { kv_len: 10_000 }, DecodeItem { kv_len: 100 }],
    }
}

fn attention(m: &ModelConfig, b: &IterationBatch) -> slicesched_model::OpSpec {
    m.iteration_dag(b, 1).layer.iter().find(|o| o.kind == OpKind::Attention).unwrap().clone()
}

/// Every preset, at TP 1 and 2: edges forward, every op fed, and the weights its ops
/// read (with every expert reached) are the weights one GPU holds.
#[test]
fn dags_are_whole_and_read_the_resident_weights() {
    let big =
        IterationBatch { prefills: vec![PrefillItem { chunk: 2048, prior_kv: 0, samples: true }], decodes: vec![] };
    for name in preset_names() {
        let m = ModelConfig::preset(name).unwrap();
        for tp in [1u32, 2] {
            if m.check_tp(tp).is_err() {
                continue;
            }
            let d = m.iteration_dag(&big, tp);
            for (p, c, _) in d.edges() {
                assert!(p < c, "{name} tp{tp}: edge {p}->{c} goes backwards");
            }
            for i in 1..d.len() {
                assert!(!d.preds(i).is_empty(), "{name} tp{tp}: op {i} has no input");
            }
            let read: u64 = d.ops().map(|o| o.spec.weight_bytes).sum();
            let tied = if m.tie_embeddings { m.vocab_size.div_ceil(tp as u64) * m.hidden_size * 2 } else { 0 };
            assert_eq!(read, m.weight_bytes_per_gpu(tp) + tied, "{name} tp{tp}");
        }
    }
}

#[test]
fn parallel_block_has_one_norm_and_one_add() {
    let m = ModelConfig::preset("phi-2").unwrap();
    let d = m.iteration_dag(&mixed(), 1);
    let kinds: Vec<_> = d.layer.iter().map(|o| o.kind).collect();
    use OpKind::*;
    assert_eq!(kinds, [InputNorm, QkvProj, Rope, Attention, OProj, GateUpProj, Activation, DownProj, ResidualAdd]);
    // The add joins attention, MLP and the previous layer's stream; the MLP reads the norm.
    let l1_add = 1 + 9 + 8;
    assert_eq!(d.preds(l1_add).as_slice(), &[1 + 8, 1 + 9 + 4, 1 + 9 + 7]);
    assert_eq!(d.preds(1 + 5).as_slice(), &[1]);
    assert_eq!(m.iteration_dag(&mixed(), 2).ops_per_layer(), 11, "two all-reduces");
    // Partial rotary: 32 of 80 dimensions of each head.
    let rope = &d.layer[2];
    assert_eq!(rope.shape, OpShape::Elementwise { tokens: 514, width: 64 * 32 });
    // Biases: the QKV GEMM reads its bias and adds it.
    let qkv = &d.layer[1];
    assert_eq!(qkv.weight_bytes, (2560 * 7680 + 7680) * 2);
    assert_eq!(qkv.flops, 2 * 514 * 7680 * 2560 + 514 * 7680);
}

#[test]
fn layernorm_and_gelu_cost_more_than_rmsnorm_and_silu() {
    let l = ModelConfig::preset("llama-2-7b").unwrap();
    let mut g = l.clone();
    g.norm = slicesched_model::Norm::Layer;
    g.activation = slicesched_model::Act::GeluTanh;
    let (dl, dg) = (l.iteration_dag(&mixed(), 1), g.iteration_dag(&mixed(), 1));
    assert!(dg.layer[0].flops > dl.layer[0].flops && dg.layer[0].weight_bytes == 2 * dl.layer[0].weight_bytes);
    let act = |d: &slicesched_model::IterationDag| d.layer.iter().find(|o| o.kind == OpKind::Activation).unwrap().flops;
    assert!(act(&dg) > act(&dl));
}

#[test]
fn sliding_window_caps_attention() {
    let w = ModelConfig::preset("mistral-7b-v0.1").unwrap();
    let full = ModelConfig::preset("mistral-7b").unwrap();
    let (aw, af) = (attention(&w, &mixed()), attention(&full, &mixed()));
    let (OpShape::Attention(sw), OpShape::Attention(sf)) = (&aw.shape, &af.shape) else { unreachable!() };
    assert_eq!(sf.decode_kv_sum, 10_100);
    assert_eq!(sw.decode_kv_sum, 4096 + 100);
    // Every query of the chunk sees the whole window: 512 x 4096 pairs, given to the
    // cost model as a causal chunk after a shorter prior.
    let pairs = 512 * 4096;
    assert_eq!(sw.prefill[0], (512, ((pairs - 512 * 513 / 2) / 512) as u32));
    assert_eq!(aw.flops, 4 * 128 * 32 * (pairs + 4196));
    assert!(aw.bytes < af.bytes);
    // Short contexts are untouched.
    let short =
        IterationBatch { prefills: vec![PrefillItem { chunk: 100, prior_kv: 50, samples: true }], decodes: vec![] };
    assert_eq!(attention(&w, &short), attention(&full, &short));
}

#[test]
fn alternating_window_is_the_mean_of_its_layers() {
    let g = ModelConfig::preset("gemma-2-9b").unwrap();
    let b = IterationBatch { prefills: vec![], decodes: vec![DecodeItem { kv_len: 10_000 }] };
    let OpShape::Attention(a) = attention(&g, &b).shape else { unreachable!() };
    assert_eq!(a.decode_kv_sum, (10_000 + 4096) / 2);
    // Four norms a layer.
    let norms = g.iteration_dag(&b, 1).layer.iter().filter(|o| o.kind == OpKind::PostAttnNorm).count();
    assert_eq!(norms, 3);
}

#[test]
fn alibi_has_no_rope() {
    let mut m = ModelConfig::preset("llama-2-7b").unwrap();
    let rope = attention(&m, &mixed());
    m.alibi = true;
    let d = m.iteration_dag(&mixed(), 1);
    assert!(d.layer.iter().all(|o| o.kind != OpKind::Rope));
    assert_eq!(d.preds(1 + 2).as_slice(), &[1 + 1], "attention reads the QKV GEMM only");
    assert!(d.layer[2].flops > rope.flops, "the bias adds a flop a score");
}

#[test]
fn qwen3_norms_q_and_k_in_the_rope_pass() {
    let q = ModelConfig::preset("qwen3-8b").unwrap();
    let mut plain = q.clone();
    plain.qk_norm = false;
    let (a, b) = (q.iteration_dag(&mixed(), 1), plain.iteration_dag(&mixed(), 1));
    assert_eq!(a.ops_per_layer(), b.ops_per_layer());
    assert!(a.layer[2].bytes > b.layer[2].bytes && a.layer[2].weight_bytes == 2 * 128 * 2);
}

#[test]
fn tied_embeddings_are_held_once() {
    let mut m = ModelConfig::preset("llama-2-7b").unwrap();
    let untied = m.weight_bytes_per_gpu(1);
    m.tie_embeddings = true;
    assert_eq!(untied - m.weight_bytes_per_gpu(1), 32000 * 4096 * 2);
    // The LM head still reads them.
    assert_eq!(m.iteration_dag(&mixed(), 1).tail[1].weight_bytes, 32000 * 4096 * 2);
}

#[test]
fn moe_routes_tokens_to_expert_units() {
    let m = ModelConfig::preset("mixtral-8x7b").unwrap();
    let one = IterationBatch { prefills: vec![], decodes: vec![DecodeItem { kv_len: 10 }] };
    let d = m.iteration_dag(&one, 1);
    let ups: Vec<_> = d.layer.iter().filter(|o| o.kind == OpKind::ExpertUp).collect();
    assert_eq!(ups.len(), 2, "one token reaches its top-2 experts");
    assert!(ups.iter().all(|o| o.shape == OpShape::Gemm { m: 1, n: 2 * 14336, k: 4096 }));
    let router = d.layer.iter().find(|o| o.kind == OpKind::Router).unwrap();
    assert_eq!(router.shape, OpShape::Gemm { m: 1, n: 8, k: 4096 });
    // 100 tokens: 200 assignments, 25 per expert, all eight units.
    let b = IterationBatch { prefills: vec![PrefillItem { chunk: 100, prior_kv: 0, samples: true }], decodes: vec![] };
    let d = m.iteration_dag(&b, 1);
    let ups: Vec<_> = d.layer.iter().filter(|o| o.kind == OpKind::ExpertUp).collect();
    assert_eq!(ups.len(), 8);
    assert!(ups.iter().all(|o| o.tokens() == 25));
    // Expert GEMMs are weight GEMMs the policy places; the all-to-all follows.
    assert!(OpKind::ExpertUp.is_gemm() && !OpKind::ExpertUp.follows_producer() && !OpKind::Router.follows_producer());
    assert!(OpKind::AllToAll.follows_producer());
    // The layer's residual add reads each token's two expert outputs.
    let add2 = d.layer.last().unwrap();
    assert_eq!(add2.kind, OpKind::ResidualAdd);
    assert_eq!(d.preds(1 + d.ops_per_layer() - 1).len(), 9, "eight units and the first add");
    // Qwen3: 128 experts in 16 units; a decode token reaches 8 units.
    let q = ModelConfig::preset("qwen3-30b-a3b").unwrap();
    let d = q.iteration_dag(&one, 1);
    assert_eq!(d.layer.iter().filter(|o| o.kind == OpKind::ExpertUp).count(), 8);
    let d = q.iteration_dag(&b, 1);
    let ups: Vec<_> = d.layer.iter().filter(|o| o.kind == OpKind::ExpertUp).collect();
    assert_eq!(ups.len(), 16);
    assert_eq!(ups.iter().map(|o| o.tokens()).sum::<u64>(), 800);
    assert!(d.ops().all(|o| matches!(o.segment, Segment::Head | Segment::Tail | Segment::Layer(0..=47))));
}

#[test]
fn expert_parallel_moves_tokens_by_all_to_all() {
    let mut m = ModelConfig::preset("mixtral-8x7b").unwrap();
    m.moe.as_mut().unwrap().expert_parallel = true;
    let b = IterationBatch { prefills: vec![PrefillItem { chunk: 100, prior_kv: 0, samples: true }], decodes: vec![] };
    let d = m.iteration_dag(&b, 2);
    let a2a: Vec<_> = d.layer.iter().filter(|o| o.kind == OpKind::AllToAll).collect();
    assert_eq!(a2a.len(), 2, "dispatch and combine");
    assert!(a2a.iter().all(|o| o.shape == OpShape::Collective { bytes: 100 * 2 / 2 * 4096 * 2, ranks: 2 }));
    let ups: Vec<_> = d.layer.iter().filter(|o| o.kind == OpKind::ExpertUp).collect();
    assert_eq!(ups.len(), 4, "four whole experts a GPU");
    assert!(ups.iter().all(|o| o.shape == OpShape::Gemm { m: 25, n: 2 * 14336, k: 4096 }));
    assert_eq!(OpKind::AllToAll.cost_class(), OpKind::AllGather);
}
