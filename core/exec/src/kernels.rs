//! The kernel set of one iteration, as launch descriptions a backend runs.
//!
//! Storage is bf16 (ids and positions i32, logits f32); every kernel computes in f32 and
//! rounds its output to bf16 once, as the CUDA kernels of executor.md §7 do, so per-op
//! comparisons between backends isolate kernel error. Layouts:
//! - `qkv` rows are `[q (H·D) | k (KVH·D) | v (KVH·D)]`;
//! - a KV cache of one layer is `[2][blocks·16][KVH·D]` (K half, then V half), 16-token
//!   blocks as in the simulator; `block_tables` is `[seqs][max_blocks]`;
//! - a GEMM is HF Linear: `y[m,n] = x[m,k] · w[n,k]ᵀ`.

use crate::backend::View;

/// Tokens per KV block (the simulator's block size).
pub const BLOCK_TOKENS: usize = 16;

/// One kernel launch: its arguments and shape. Exactly one output view; a kernel that
/// works in place (RoPE) has its tensor as output and not among its inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Kernel {
    /// `out[t] = table[ids[t] - vocab_start]` (rows of `hidden`), times `scale` where
    /// given (Gemma's √hidden; f32 product, one rounding).
    Embedding { ids: View, table: View, out: View, hidden: usize, scale: Option<f32> },
    /// `out = x · rsqrt(mean(x²) + eps) · weight`, row by row; `(1 + weight)` where
    /// `unit_offset` (Gemma's convention).
    RmsNorm { x: View, weight: View, out: View, rows: usize, width: usize, eps: f32, unit_offset: bool },
    /// `out[i] = x[rows[i]]` (the last token of each sampled sequence).
    GatherRows { x: View, rows: View, out: View, width: usize },
    /// `y = x · wᵀ (+ bias)`, f32 accumulation, the bias (n wide, bf16) added before the
    /// one rounding; `y` is bf16 or f32.
    Gemm { x: View, w: View, bias: Option<View>, y: View, m: usize, n: usize, k: usize },
    /// `out = (x − mean) · rsqrt(var + eps) · weight + bias`, row by row.
    LayerNorm { x: View, weight: View, bias: View, out: View, rows: usize, width: usize, eps: f32 },
    /// RMSNorm of every query head (by `q_weight`) and key head (by `k_weight`, both one
    /// head wide) in place on `qkv` (Qwen3's query/key norms, before RoPE).
    HeadNorm { qkv: View, q_weight: View, k_weight: View, tokens: usize, heads: Heads, eps: f32 },
    /// HF rotate-half RoPE in place on the first `rotary` dimensions of every q and k head
    /// of `qkv` (all `D` but for partial rotary); `table` holds `cos[max_pos][rotary/2]`
    /// then `sin[max_pos][rotary/2]` (built on the host, llama3 scaling there).
    Rope { qkv: View, positions: View, table: View, tokens: usize, heads: Heads, max_pos: usize, rotary: usize },
    /// Writes each token's k and v into its slot of the layer's cache (slot < 0: skipped).
    CacheWrite { qkv: View, slots: View, cache: View, tokens: usize, heads: Heads },
    /// Paged causal attention for prefill chunks and decodes alike, with GQA: query row
    /// `j` of sequence `s` sits at position `ctx_lens[s] − q_len + j` and sees keys up to it,
    /// the last `window` of them where `window` > 0 (sliding-window attention); `scores`
    /// says how a score is formed.
    Attention {
        qkv: View,
        cache: View,
        block_tables: View,
        q_start: View,
        ctx_lens: View,
        out: View,
        seqs: usize,
        max_blocks: usize,
        heads: Heads,
        window: usize,
        scores: Scores,
    },
    /// `out = a + b`.
    Add { a: View, b: View, out: View },
    /// `out[t,i] = silu(x[t,i]) · x[t,I+i]` for gate|up rows of width `2I`.
    SiluMul { x: View, out: View, rows: usize, inter: usize },
    /// Any other activation: `out[t,i] = act(x[t,i]) · x[t,I+i]` when `gated` (rows of
    /// width `2I`), else `out[t,i] = act(x[t,i])` (rows of width `I`).
    Act { x: View, out: View, rows: usize, inter: usize, act: slicesched_model::Act, gated: bool },
    /// A router's choice for each of `rows` tokens from its f32 logits `[rows][experts]`:
    /// softmax, the `k` most probable experts (ties to the lower id), their probabilities
    /// renormalised to sum to one when `renormalize`. `out` (f32) holds each row's `k`
    /// expert ids, then the `k` weights: `[rows][2k]`.
    TopK { logits: View, out: View, rows: usize, experts: usize, k: usize, renormalize: bool },
    /// The up (gate|up) GEMMs of experts `first..first + ws.len()` over the tokens routed
    /// to them: `out[t·k + slot] = x[t] · ws[e − first]ᵀ` for every (token, slot) whose
    /// expert `e` is one of them, zero rows elsewhere. `ws[i]` is `[n][hidden]`;
    /// `routing` is a [`Kernel::TopK`] output.
    ExpertUp {
        x: View,
        routing: View,
        ws: Vec<View>,
        first: usize,
        rows: usize,
        k: usize,
        n: usize,
        hidden: usize,
        out: View,
    },
    /// The down GEMMs of the same experts, weighted and combined per token:
    /// `out[t] = Σ_slot weight(t, slot) · x[t·k + slot] · ws[e − first]ᵀ` over the slots
    /// routed to them (f32 sum, one rounding). `ws[i]` is `[hidden][inter]`.
    ExpertDown {
        x: View,
        routing: View,
        ws: Vec<View>,
        first: usize,
        rows: usize,
        k: usize,
        inter: usize,
        hidden: usize,
        out: View,
    },
    /// `out = Σ parts` in the given order (the local step of an all-reduce; every rank
    /// sums in rank order, so all ranks hold identical bits).
    Sum { parts: Vec<View>, out: View },
    /// `x = cap · tanh(x / cap)` in place over f32 `x` (Gemma-2's final logit soft-cap).
    Softcap { x: View, cap: f32 },
    /// Greedy sampling: `out[r] = argmax` over the row spread across `shards` blocks of
    /// `[rows][shard_n]` f32 logits (an all-gathered vocab); ties take the lowest id.
    Argmax { logits: View, out: View, rows: usize, shards: usize, shard_n: usize },
}

/// How an attention score is formed beyond Llama's `q·k / √D` (the default).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Scores {
    /// What multiplies q·k instead of 1/√D (Gemma-2's `query_pre_attn_scalar`^-½).
    pub scale: Option<f32>,
    /// `cap · tanh(s / cap)` of the scaled score (Gemma-2's attention soft-cap).
    pub softcap: Option<f32>,
    /// f32 slopes of the shard's query heads: `slope · (key pos − query pos)` is added to
    /// the score (ALiBi; HF's bloom adds `slope · key pos`, the same after softmax).
    pub alibi: Option<View>,
}

/// Head counts of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub q: usize,
    pub kv: usize,
    pub dim: usize,
}

impl Heads {
    pub fn row(&self) -> usize {
        (self.q + 2 * self.kv) * self.dim
    }
}

impl Kernel {
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Embedding { .. } => "embedding",
            Kernel::RmsNorm { .. } => "rmsnorm",
            Kernel::GatherRows { .. } => "gather_rows",
            Kernel::Gemm { .. } => "gemm",
            Kernel::Rope { .. } => "rope",
            Kernel::CacheWrite { .. } => "cache_write",
            Kernel::Attention { .. } => "paged_attention",
            Kernel::Add { .. } => "residual_add",
            Kernel::SiluMul { .. } => "silu_mul",
            Kernel::LayerNorm { .. } => "layernorm",
            Kernel::TopK { .. } => "topk",
            Kernel::ExpertUp { .. } => "expert_up",
            Kernel::ExpertDown { .. } => "expert_down",
            Kernel::HeadNorm { .. } => "head_norm",
            Kernel::Act { act: slicesched_model::Act::Silu, .. } => "silu",
            Kernel::Act { .. } => "gelu",
            Kernel::Sum { .. } => "sum",
            Kernel::Softcap { .. } => "softcap",
            Kernel::Argmax { .. } => "argmax",
        }
    }

    pub fn output(&self) -> View {
        match self {
            Kernel::Embedding { out, .. }
            | Kernel::RmsNorm { out, .. }
            | Kernel::GatherRows { out, .. }
            | Kernel::Attention { out, .. }
            | Kernel::Add { out, .. }
            | Kernel::SiluMul { out, .. }
            | Kernel::LayerNorm { out, .. }
            | Kernel::Act { out, .. }
            | Kernel::TopK { out, .. }
            | Kernel::ExpertUp { out, .. }
            | Kernel::ExpertDown { out, .. }
            | Kernel::Sum { out, .. }
            | Kernel::Argmax { out, .. } => *out,
            Kernel::Gemm { y, .. } => *y,
            Kernel::Rope { qkv, .. } | Kernel::HeadNorm { qkv, .. } => *qkv,
            Kernel::Softcap { x, .. } => *x,
            Kernel::CacheWrite { cache, .. } => *cache,
        }
    }

    pub fn inputs(&self) -> Vec<View> {
        match self {
            Kernel::Embedding { ids, table, .. } => vec![*ids, *table],
            Kernel::RmsNorm { x, weight, .. } => vec![*x, *weight],
            Kernel::GatherRows { x, rows, .. } => vec![*x, *rows],
            Kernel::Gemm { x, w, bias, .. } => [*x, *w].into_iter().chain(*bias).collect(),
            Kernel::LayerNorm { x, weight, bias, .. } => vec![*x, *weight, *bias],
            Kernel::HeadNorm { q_weight, k_weight, .. } => vec![*q_weight, *k_weight],
            Kernel::Act { x, .. } => vec![*x],
            Kernel::TopK { logits, .. } => vec![*logits],
            Kernel::ExpertUp { x, routing, ws, .. } | Kernel::ExpertDown { x, routing, ws, .. } => {
                [*x, *routing].into_iter().chain(ws.iter().copied()).collect()
            }
            Kernel::Rope { positions, table, .. } => vec![*positions, *table],
            Kernel::CacheWrite { qkv, slots, .. } => vec![*qkv, *slots],
            Kernel::Attention { qkv, cache, block_tables, q_start, ctx_lens, scores, .. } => {
                [*qkv, *cache, *block_tables, *q_start, *ctx_lens].into_iter().chain(scores.alibi).collect()
            }
            Kernel::Softcap { .. } => vec![],
            Kernel::Add { a, b, .. } => vec![*a, *b],
            Kernel::SiluMul { x, .. } => vec![*x],
            Kernel::Sum { parts, .. } => parts.clone(),
            Kernel::Argmax { logits, .. } => vec![*logits],
        }
    }

    /// Floating-point operations, for GFLOP/s figures.
    pub fn flops(&self) -> u64 {
        match self {
            Kernel::Gemm { m, n, k, .. } => 2 * (*m * *n * *k) as u64,
            _ => 0,
        }
    }
}
