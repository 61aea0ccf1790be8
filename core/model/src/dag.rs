//! The operator DAG of one serving iteration.
//!
//! Every layer of a decoder does the same work for a given batch, so the DAG is stored
//! as three segments (head, one layer template, tail) and expanded by index: building
//! an iteration costs O(ops per layer), not O(ops), which keeps the simulator's hot
//! path allocation-light.

use crate::{AttnShape, ModelConfig, OpKind, OpShape, OpSpec};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// A prefill chunk of one request in an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefillItem {
    /// Prompt tokens computed in this chunk.
    pub chunk: u32,
    /// Tokens already in the KV cache before the chunk.
    pub prior_kv: u32,
    /// Whether the chunk ends the prompt, so the iteration samples a token for it.
    pub samples: bool,
}

/// A decode step of one request: one new token attending `kv_len` tokens (itself included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodeItem {
    pub kv_len: u32,
}

/// The composition of one iteration's batch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IterationBatch {
    pub prefills: Vec<PrefillItem>,
    pub decodes: Vec<DecodeItem>,
}

impl IterationBatch {
    pub fn tokens(&self) -> u64 {
        self.prefills.iter().map(|p| p.chunk as u64).sum::<u64>() + self.decodes.len() as u64
    }
    /// Sequences that produce a token this iteration (rows of the LM head).
    pub fn sampled(&self) -> u64 {
        self.prefills.iter().filter(|p| p.samples).count() as u64 + self.decodes.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.prefills.is_empty() && self.decodes.is_empty()
    }
}

/// Which part of the forward pass an op belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Segment {
    Head,
    Layer(u32),
    Tail,
}

/// One op of an expanded DAG.
#[derive(Debug, Clone, Copy)]
pub struct OpRef<'a> {
    /// Position in topological order, `0..dag.len()`.
    pub index: u32,
    pub segment: Segment,
    pub spec: &'a OpSpec,
}

/// An iteration's operators and the tensors between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationDag {
    pub head: Vec<OpSpec>,
    pub layer: Vec<OpSpec>,
    pub tail: Vec<OpSpec>,
    pub layers: u32,
    /// Edges inside a layer, as (producer, consumer) local indices.
    layer_edges: Vec<(u16, u16)>,
    /// Local indices in a layer that read the residual stream of the previous layer.
    residual_in: Vec<u16>,
    /// Local index in a layer whose output is the layer's residual stream.
    residual_out: u16,
}

impl IterationDag {
    pub fn len(&self) -> u32 {
        self.head.len() as u32 + self.layer.len() as u32 * self.layers + self.tail.len() as u32
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn ops_per_layer(&self) -> u32 {
        self.layer.len() as u32
    }

    /// The op at topological position `i`.
    pub fn op(&self, i: u32) -> OpRef<'_> {
        let h = self.head.len() as u32;
        let l = self.layer.len() as u32;
        let body = l * self.layers;
        let (segment, spec) = if i < h {
            (Segment::Head, &self.head[i as usize])
        } else if i < h + body {
            let j = i - h;
            (Segment::Layer(j / l), &self.layer[(j % l) as usize])
        } else {
            (Segment::Tail, &self.tail[(i - h - body) as usize])
        };
        OpRef { index: i, segment, spec }
    }

    pub fn ops(&self) -> impl Iterator<Item = OpRef<'_>> + '_ {
        (0..self.len()).map(move |i| self.op(i))
    }

    /// Every tensor edge as (producer, consumer, bytes), producers before consumers.
    pub fn edges(&self) -> Vec<(u32, u32, u64)> {
        let mut out = Vec::new();
        for c in 0..self.len() {
            for p in self.preds(c) {
                out.push((p, c, self.op(p).spec.out_bytes));
            }
        }
        out
    }

    /// Producers of op `i`'s inputs, in topological order.
    pub fn preds(&self, i: u32) -> SmallVec<[u32; 2]> {
        let h = self.head.len() as u32;
        let l = self.layer.len() as u32;
        let body = l * self.layers;
        let mut v = SmallVec::new();
        if i == 0 {
            return v;
        }
        if i < h {
            v.push(i - 1);
        } else if i < h + body {
            let j = i - h;
            let (layer, local) = (j / l, (j % l) as u16);
            let base = h + layer * l;
            for &(a, b) in &self.layer_edges {
                if b == local {
                    v.push(base + a as u32);
                }
            }
            if self.residual_in.contains(&local) {
                // Layer 0 reads the head's last output (the embeddings).
                let prev = if layer == 0 { h - 1 } else { base - l + self.residual_out as u32 };
                v.push(prev);
            }
            v.sort_unstable();
        } else {
            v.push(i - 1);
        }
        v
    }
}

impl ModelConfig {
    /// The operator DAG of one iteration of `batch` on a `tp`-way tensor-parallel group.
    pub fn iteration_dag(&self, batch: &IterationBatch, tp: u32) -> IterationDag {
        let t = tp.max(1) as u64;
        let b = self.dtype.bytes();
        let h = self.hidden_size;
        let tok = batch.tokens();
        let qh = self.num_attention_heads / t;
        let kvh = self.num_key_value_heads.div_ceil(t);
        let hd = self.head_dim;
        let inter = self.intermediate_size / t;
        let up_n = if self.gated_mlp { 2 * inter } else { inter };

        let gemm = |kind, m: u64, n: u64, k: u64| OpSpec {
            kind,
            shape: OpShape::Gemm { m, n, k },
            flops: 2 * m * n * k,
            bytes: (m * k + k * n + m * n) * b,
            weight_bytes: k * n * b,
            out_bytes: m * n * b,
            tp: tp.max(1),
        };
        let norm = |kind, rows: u64| OpSpec {
            kind,
            shape: OpShape::Elementwise { tokens: rows, width: h },
            flops: 4 * rows * h,
            bytes: (2 * rows * h + h) * b,
            weight_bytes: h * b,
            out_bytes: rows * h * b,
            tp: tp.max(1),
        };
        let collective = |kind, msg: u64| OpSpec {
            kind,
            shape: OpShape::Collective { bytes: msg, ranks: tp },
            flops: msg / b * (t - 1) / t,
            bytes: 2 * msg * (t - 1) / t,
            weight_bytes: 0,
            out_bytes: msg,
            tp,
        };

        let head = vec![OpSpec {
            kind: OpKind::Embedding,
            shape: OpShape::Elementwise { tokens: tok, width: h },
            flops: 0,
            bytes: 2 * tok * h * b + 4 * tok,
            weight_bytes: self.vocab_size.div_ceil(t) * h * b,
            out_bytes: tok * h * b,
            tp: tp.max(1),
        }];

        let mut layer = Vec::with_capacity(14);
        let mut edges: Vec<(u16, u16)> = Vec::with_capacity(16);
        let mut push = |layer: &mut Vec<OpSpec>, spec: OpSpec, inputs: &[u16]| -> u16 {
            let i = layer.len() as u16;
            edges.extend(inputs.iter().map(|&p| (p, i)));
            layer.push(spec);
            i
        };
        let in_norm = push(&mut layer, norm(OpKind::InputNorm, tok), &[]);
        let qkv = push(&mut layer, gemm(OpKind::QkvProj, tok, (qh + 2 * kvh) * hd, h), &[in_norm]);
        let rope_elems = tok * (qh + kvh) * hd;
        let rope = push(
            &mut layer,
            OpSpec {
                kind: OpKind::Rope,
                shape: OpShape::Elementwise { tokens: tok, width: (qh + kvh) * hd },
                flops: 3 * rope_elems,
                bytes: 2 * rope_elems * b,
                weight_bytes: 0,
                out_bytes: rope_elems * b,
                tp: tp.max(1),
            },
            &[qkv],
        );
        let attn = push(&mut layer, self.attention_spec(batch, tp), &[rope, qkv]);
        let mut o = push(&mut layer, gemm(OpKind::OProj, tok, h, qh * hd), &[attn]);
        if tp > 1 {
            o = push(&mut layer, collective(OpKind::AllReduce, tok * h * b), &[o]);
        }
        let add = |layer_in| OpSpec {
            kind: OpKind::ResidualAdd,
            shape: OpShape::Elementwise { tokens: tok, width: h },
            flops: tok * h,
            bytes: 3 * tok * h * b,
            weight_bytes: 0,
            out_bytes: tok * h * b,
            tp: layer_in,
        };
        let add1 = push(&mut layer, add(tp.max(1)), &[o]);
        let post = push(&mut layer, norm(OpKind::PostAttnNorm, tok), &[add1]);
        let up = push(&mut layer, gemm(OpKind::GateUpProj, tok, up_n, h), &[post]);
        let act_elems = tok * inter;
        let act = push(
            &mut layer,
            OpSpec {
                kind: OpKind::Activation,
                shape: OpShape::Elementwise { tokens: tok, width: inter },
                flops: 5 * act_elems,
                bytes: if self.gated_mlp { 3 } else { 2 } * act_elems * b,
                weight_bytes: 0,
                out_bytes: act_elems * b,
                tp: tp.max(1),
            },
            &[up],
        );
        let mut down = push(&mut layer, gemm(OpKind::DownProj, tok, h, inter), &[act]);
        if tp > 1 {
            down = push(&mut layer, collective(OpKind::AllReduce, tok * h * b), &[down]);
        }
        let add2 = push(&mut layer, add(tp.max(1)), &[down, add1]);

        let sampled = batch.sampled();
        let mut tail =
            vec![norm(OpKind::FinalNorm, sampled), gemm(OpKind::LmHead, sampled, self.vocab_size.div_ceil(t), h)];
        if tp > 1 {
            tail.push(collective(OpKind::AllGather, sampled * self.vocab_size.div_ceil(t) * b));
        }

        IterationDag {
            head,
            layer,
            tail,
            layers: self.num_hidden_layers as u32,
            layer_edges: edges,
            residual_in: vec![in_norm, add1],
            residual_out: add2,
        }
    }

    fn attention_spec(&self, batch: &IterationBatch, tp: u32) -> OpSpec {
        let t = tp.max(1) as u64;
        let b = self.dtype.bytes();
        let qh = self.num_attention_heads / t;
        let kvh = self.num_key_value_heads.div_ceil(t);
        let hd = self.head_dim;
        let mut flops = 0u64;
        let mut bytes = 0u64;
        let mut q_tokens = 0u64;
        for p in &batch.prefills {
            let (c, prior) = (p.chunk as u64, p.prior_kv as u64);
            // Causal: query j of the chunk sees prior + j + 1 keys.
            let pairs = c * prior + c * (c + 1) / 2;
            flops += 4 * hd * qh * pairs;
            bytes += (2 * c * qh * hd + 2 * (prior + c) * kvh * hd + 2 * c * kvh * hd) * b;
            q_tokens += c;
        }
        let kv_sum: u64 = batch.decodes.iter().map(|d| d.kv_len as u64).sum();
        let nd = batch.decodes.len() as u64;
        flops += 4 * hd * qh * kv_sum;
        bytes += (2 * kv_sum * kvh * hd + 2 * nd * qh * hd + 2 * nd * kvh * hd) * b;
        q_tokens += nd;
        OpSpec {
            kind: OpKind::Attention,
            shape: OpShape::Attention(AttnShape {
                q_heads: qh as u32,
                kv_heads: kvh as u32,
                head_dim: hd as u32,
                prefill: batch.prefills.iter().map(|p| (p.chunk, p.prior_kv)).collect(),
                decode_batch: nd as u32,
                decode_kv_sum: kv_sum,
            }),
            flops,
            bytes,
            weight_bytes: 0,
            out_bytes: q_tokens * qh * hd * b,
            tp: tp.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> IterationBatch {
        IterationBatch {
            prefills: vec![PrefillItem { chunk: 100, prior_kv: 0, samples: true }],
            decodes: vec![DecodeItem { kv_len: 10 }; 3],
        }
    }

    #[test]
    fn op_counts_and_order() {
        let m = ModelConfig::preset("llama-2-7b").unwrap();
        let d1 = m.iteration_dag(&batch(), 1);
        assert_eq!(d1.ops_per_layer(), 11);
        assert_eq!(d1.len(), 1 + 11 * 32 + 2);
        let d2 = m.iteration_dag(&batch(), 2);
        assert_eq!(d2.ops_per_layer(), 13);
        assert_eq!(d2.len(), 1 + 13 * 32 + 3);
        for (p, c, _) in d2.edges() {
            assert!(p < c, "edge {p}->{c} goes backwards");
        }
        // Every op but the embedding has an input.
        for i in 1..d2.len() {
            assert!(!d2.preds(i).is_empty(), "op {i} has no input");
        }
    }

    #[test]
    fn gemm_flops_are_exact() {
        let m = ModelConfig::preset("llama-2-7b").unwrap();
        let d = m.iteration_dag(&batch(), 1);
        let qkv = d.layer.iter().find(|o| o.kind == OpKind::QkvProj).unwrap();
        assert_eq!(qkv.flops, 2 * 103 * (3 * 4096) * 4096);
        assert_eq!(qkv.weight_bytes, 3 * 4096 * 4096 * 2);
        let lm = d.tail.iter().find(|o| o.kind == OpKind::LmHead).unwrap();
        assert_eq!(lm.shape, OpShape::Gemm { m: 4, n: 32000, k: 4096 });
    }

    #[test]
    fn tp_shards_weights() {
        let m = ModelConfig::preset("llama-2-70b").unwrap();
        let w1: u64 = m.iteration_dag(&batch(), 1).layer.iter().map(|o| o.weight_bytes).sum();
        let w4: u64 = m.iteration_dag(&batch(), 4).layer.iter().map(|o| o.weight_bytes).sum();
        // Norm weights are replicated, everything else splits four ways.
        assert!((w1 as f64 / w4 as f64 - 4.0).abs() < 0.01, "{}", w1 as f64 / w4 as f64);
    }

    #[test]
    fn residual_edges() {
        let m = ModelConfig::preset("llama-2-7b").unwrap();
        let d = m.iteration_dag(&batch(), 1);
        // Layer 1's input norm reads layer 0's second residual add.
        let l1_norm = 1 + 11;
        assert_eq!(d.preds(l1_norm).as_slice(), &[11]);
        assert_eq!(d.op(11).spec.kind, OpKind::ResidualAdd);
    }

    #[test]
    fn attention_counts_causal_pairs() {
        let m = ModelConfig::preset("llama-2-7b").unwrap();
        let b =
            IterationBatch { prefills: vec![PrefillItem { chunk: 4, prior_kv: 2, samples: false }], decodes: vec![] };
        let d = m.iteration_dag(&b, 1);
        let a = d.layer.iter().find(|o| o.kind == OpKind::Attention).unwrap();
        // pairs = 4*2 + 4*5/2 = 18
        assert_eq!(a.flops, 4 * 128 * 32 * 18);
        assert_eq!(d.tail[1].shape, OpShape::Gemm { m: 0, n: 32000, k: 4096 });
    }
}
