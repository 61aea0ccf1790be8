//! The operator DAG of one serving iteration.
//!
//! Every layer of a decoder does the same work for a given batch, so the DAG is stored
//! as three segments (head, one layer template, tail) and expanded by index: building
//! an iteration costs O(ops per layer), not O(ops), which keeps the simulator's hot
//! path allocation-light.

use crate::{Act, AttnShape, ModelConfig, Norm, OpKind, OpShape, OpSpec};
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

    /// Whether `other` has the same ops in the same places and the same edges (its
    /// batch, hence its ops' sizes, may differ): [`IterationDag::preds`] answers alike.
    pub fn same_shape(&self, other: &IterationDag) -> bool {
        self.head.len() == other.head.len()
            && self.layer.len() == other.layer.len()
            && self.tail.len() == other.tail.len()
            && self.layers == other.layers
            && self.layer_edges == other.layer_edges
            && self.residual_in == other.residual_in
            && self.residual_out == other.residual_out
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

/// Builds one layer template: ops in topological order and their in-layer edges.
pub(crate) struct LayerBuilder {
    pub ops: Vec<OpSpec>,
    pub edges: Vec<(u16, u16)>,
}

impl LayerBuilder {
    pub(crate) fn push(&mut self, spec: OpSpec, inputs: &[u16]) -> u16 {
        let i = self.ops.len() as u16;
        self.edges.extend(inputs.iter().map(|&p| (p, i)));
        self.ops.push(spec);
        i
    }
}

/// The op constructors of one iteration on one GPU of a `tp`-way group.
pub(crate) struct Ops<'a> {
    pub m: &'a ModelConfig,
    pub tp: u32,
    pub tok: u64,
}

impl Ops<'_> {
    pub fn t(&self) -> u64 {
        self.tp.max(1) as u64
    }
    pub fn b(&self) -> u64 {
        self.m.dtype.bytes()
    }
    pub fn gemm(&self, kind: OpKind, m: u64, n: u64, k: u64, bias: bool) -> OpSpec {
        let b = self.b();
        let bias = if bias { n } else { 0 };
        OpSpec {
            kind,
            shape: OpShape::Gemm { m, n, k },
            flops: 2 * m * n * k + m * bias,
            bytes: (m * k + k * n + m * n + bias) * b,
            weight_bytes: (k * n + bias) * b,
            out_bytes: m * n * b,
            tp: self.tp.max(1),
        }
    }
    pub fn norm(&self, kind: OpKind, rows: u64) -> OpSpec {
        let (h, b) = (self.m.hidden_size, self.b());
        let w = self.m.norm_weights();
        // LayerNorm also subtracts the mean and adds a bias: about twice RMSNorm's work.
        let per = match self.m.norm {
            Norm::Rms => 4,
            Norm::Layer => 8,
        };
        OpSpec {
            kind,
            shape: OpShape::Elementwise { tokens: rows, width: h },
            flops: per * rows * h,
            bytes: (2 * rows * h + w) * b,
            weight_bytes: w * b,
            out_bytes: rows * h * b,
            tp: self.tp.max(1),
        }
    }
    pub fn collective(&self, kind: OpKind, msg: u64) -> OpSpec {
        let t = self.t();
        OpSpec {
            kind,
            shape: OpShape::Collective { bytes: msg, ranks: self.tp },
            flops: msg / self.b() * (t - 1) / t,
            bytes: 2 * msg * (t - 1) / t,
            weight_bytes: 0,
            out_bytes: msg,
            tp: self.tp,
        }
    }
    /// A residual add of `inputs` tensors of `tok x h` (plus `extra` elements read).
    pub fn add(&self, inputs: u64, extra: u64) -> OpSpec {
        let (tok, h, b) = (self.tok, self.m.hidden_size, self.b());
        OpSpec {
            kind: OpKind::ResidualAdd,
            shape: OpShape::Elementwise { tokens: tok, width: h },
            flops: (inputs - 1) * tok * h + extra,
            bytes: ((inputs + 1) * tok * h + extra) * b,
            weight_bytes: 0,
            out_bytes: tok * h * b,
            tp: self.tp.max(1),
        }
    }
    /// The MLP nonlinearity over `rows x width` (times the gate for a gated MLP).
    pub fn activation(&self, rows: u64, width: u64) -> OpSpec {
        let elems = rows * width;
        // SiLU and its gate: 5 flops an element; the tanh or erf of GELU adds about 3.
        let per = match self.m.activation {
            Act::Silu => 5,
            Act::GeluTanh | Act::Gelu => 8,
        };
        OpSpec {
            kind: OpKind::Activation,
            shape: OpShape::Elementwise { tokens: rows, width },
            flops: per * elems,
            bytes: if self.m.gated_mlp { 3 } else { 2 } * elems * self.b(),
            weight_bytes: 0,
            out_bytes: elems * self.b(),
            tp: self.tp.max(1),
        }
    }

    /// Dense MLP from `input`: up (gate and up), activation, down, all-reduce.
    fn dense_mlp(&self, l: &mut LayerBuilder, input: u16) -> u16 {
        let (h, tok) = (self.m.hidden_size, self.tok);
        let inter = self.m.intermediate_size / self.t();
        let up_n = if self.m.gated_mlp { 2 * inter } else { inter };
        let mlp_bias = self.m.biases.mlp;
        let up = l.push(self.gemm(OpKind::GateUpProj, tok, up_n, h, mlp_bias), &[input]);
        let act = l.push(self.activation(tok, inter), &[up]);
        let mut down = l.push(self.gemm(OpKind::DownProj, tok, h, inter, mlp_bias), &[act]);
        if self.tp > 1 {
            down = l.push(self.collective(OpKind::AllReduce, tok * h * self.b()), &[down]);
        }
        down
    }

    /// The MLP (dense or mixture-of-experts) from `input`; its outputs and the extra
    /// elements the residual add reads to combine them.
    pub fn mlp(&self, l: &mut LayerBuilder, input: u16) -> (SmallVec<[u16; 2]>, u64) {
        match self.m.moe {
            None => (smallvec::smallvec![self.dense_mlp(l, input)], 0),
            Some(moe) => self.moe_mlp(l, input, moe),
        }
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
        let ops = Ops { m: self, tp, tok };
        let vocab = self.vocab_size.div_ceil(t);

        let head = vec![OpSpec {
            kind: OpKind::Embedding,
            shape: OpShape::Elementwise { tokens: tok, width: h },
            flops: 0,
            bytes: 2 * tok * h * b + 4 * tok,
            weight_bytes: vocab * h * b,
            out_bytes: tok * h * b,
            tp: tp.max(1),
        }];

        let mut l = LayerBuilder { ops: Vec::with_capacity(16), edges: Vec::with_capacity(18) };
        let in_norm = l.push(ops.norm(OpKind::InputNorm, tok), &[]);
        let qkv = l.push(ops.gemm(OpKind::QkvProj, tok, (qh + 2 * kvh) * hd, h, self.biases.qkv), &[in_norm]);
        let rot = if self.alibi { 0 } else { self.rotary_dim.unwrap_or(hd) };
        let attn_in = if rot > 0 || self.qk_norm {
            let rope_elems = tok * (qh + kvh) * rot;
            let mut spec = OpSpec {
                kind: OpKind::Rope,
                shape: OpShape::Elementwise { tokens: tok, width: (qh + kvh) * rot },
                flops: 3 * rope_elems,
                bytes: 2 * rope_elems * b,
                weight_bytes: 0,
                out_bytes: rope_elems * b,
                tp: tp.max(1),
            };
            if self.qk_norm {
                // Qwen3 norms each query and key head before rotating it: one more pass
                // over q and k, counted in this op.
                let qk = tok * (qh + kvh) * hd;
                spec.shape = OpShape::Elementwise { tokens: tok, width: (qh + kvh) * hd };
                spec.flops += 4 * qk;
                spec.bytes += (2 * qk + 2 * hd) * b;
                spec.weight_bytes += 2 * hd * b;
                spec.out_bytes = qk * b;
            }
            smallvec::smallvec![l.push(spec, &[qkv]), qkv]
        } else {
            SmallVec::<[u16; 2]>::from_slice(&[qkv])
        };
        let attn = l.push(self.attention_spec(batch, tp), &attn_in);
        let mut o = l.push(ops.gemm(OpKind::OProj, tok, h, qh * hd, self.biases.o), &[attn]);
        if tp > 1 {
            o = l.push(ops.collective(OpKind::AllReduce, tok * h * b), &[o]);
        }
        let (residual_in, out) = if self.parallel_block {
            // GPT-J / phi-2: the MLP reads the same normed input; one add joins both.
            let (mlp, extra) = ops.mlp(&mut l, in_norm);
            let mut ins: SmallVec<[u16; 4]> = smallvec::smallvec![o];
            ins.extend(mlp);
            let add = l.push(ops.add(3, extra), &ins);
            (vec![in_norm, add], add)
        } else {
            if self.sandwich_norms {
                o = l.push(ops.norm(OpKind::PostAttnNorm, tok), &[o]);
            }
            let add1 = l.push(ops.add(2, 0), &[o]);
            let post = l.push(ops.norm(OpKind::PostAttnNorm, tok), &[add1]);
            let (mut mlp, extra) = ops.mlp(&mut l, post);
            if self.sandwich_norms {
                mlp = smallvec::smallvec![l.push(ops.norm(OpKind::PostAttnNorm, tok), &mlp)];
            }
            let mut ins: SmallVec<[u16; 4]> = mlp.into_iter().collect();
            ins.push(add1);
            let add2 = l.push(ops.add(2, extra), &ins);
            (vec![in_norm, add1], add2)
        };

        let sampled = batch.sampled();
        let mut tail = vec![
            ops.norm(OpKind::FinalNorm, sampled),
            ops.gemm(OpKind::LmHead, sampled, vocab, h, self.biases.lm_head),
        ];
        if tp > 1 {
            tail.push(ops.collective(OpKind::AllGather, sampled * vocab * b));
        }

        IterationDag {
            head,
            layer: l.ops,
            tail,
            layers: self.num_hidden_layers as u32,
            layer_edges: l.edges,
            residual_in,
            residual_out: out,
        }
    }

    fn attention_spec(&self, batch: &IterationBatch, tp: u32) -> OpSpec {
        let t = tp.max(1) as u64;
        let b = self.dtype.bytes();
        let qh = self.num_attention_heads / t;
        let kvh = self.num_key_value_heads.div_ceil(t);
        let hd = self.head_dim;
        // A windowed layer sees at most `w` keys a query. The template stands for every
        // layer, so with windowed and global layers mixed (Gemma-2) its work is their
        // mean, and the shape handed to the cost model is the causal one with the same
        // query-key pairs (the prior context shortened).
        let layers = self.num_hidden_layers.max(1);
        let win = self.windowed_layers().min(layers);
        let w = self.sliding_window.unwrap_or(u32::MAX) as u64;
        let mean = |full: u64, capped: u64| ((layers - win) * full + win * capped) / layers;
        let mut flops = 0u64;
        let mut bytes = 0u64;
        let mut q_tokens = 0u64;
        let mut prefill = SmallVec::<[(u32, u32); 4]>::new();
        for p in &batch.prefills {
            let (c, prior) = (p.chunk as u64, p.prior_kv as u64);
            // Causal: query j of the chunk sees prior + j + 1 keys.
            let full = c * prior + c * (c + 1) / 2;
            let (pairs, keys) = if win == 0 {
                (full, prior + c)
            } else {
                let capped = windowed_pairs(c, prior, w);
                (mean(full, capped), mean(prior + c, (prior + c).min(w + c)))
            };
            let tri = c * (c + 1) / 2;
            let eff_prior = if win == 0 { prior } else { pairs.saturating_sub(tri).checked_div(c).unwrap_or(0) };
            prefill.push((p.chunk, eff_prior.min(u32::MAX as u64) as u32));
            flops += 4 * hd * qh * pairs;
            if self.alibi {
                flops += qh * pairs;
            }
            bytes += (2 * c * qh * hd + 2 * keys * kvh * hd + 2 * c * kvh * hd) * b;
            q_tokens += c;
        }
        let full: u64 = batch.decodes.iter().map(|d| d.kv_len as u64).sum();
        let kv_sum =
            if win == 0 { full } else { mean(full, batch.decodes.iter().map(|d| (d.kv_len as u64).min(w)).sum()) };
        let nd = batch.decodes.len() as u64;
        flops += 4 * hd * qh * kv_sum;
        if self.alibi {
            flops += qh * kv_sum;
        }
        bytes += (2 * kv_sum * kvh * hd + 2 * nd * qh * hd + 2 * nd * kvh * hd) * b;
        q_tokens += nd;
        OpSpec {
            kind: OpKind::Attention,
            shape: OpShape::Attention(AttnShape {
                q_heads: qh as u32,
                kv_heads: kvh as u32,
                head_dim: hd as u32,
                prefill,
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

/// Query-key pairs of a chunk of `c` queries after `prior` cached tokens when each
/// query sees at most `w` keys (itself included).
pub(crate) fn windowed_pairs(c: u64, prior: u64, w: u64) -> u64 {
    // Query j sees min(prior + j + 1, w) keys; the first `free` queries are uncapped.
    let free = w.saturating_sub(prior).min(c);
    free * prior + free * (free + 1) / 2 + (c - free) * w
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
