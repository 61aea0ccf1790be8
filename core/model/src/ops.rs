//! Operator kinds and the exact work of one operator instance.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// What an operator computes. The names of the profiled ones follow Vidur's columns
/// (see [`OpKind::profile_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Embedding,
    InputNorm,
    QkvProj,
    Rope,
    Attention,
    OProj,
    AllReduce,
    ResidualAdd,
    PostAttnNorm,
    GateUpProj,
    Activation,
    DownProj,
    FinalNorm,
    LmHead,
    AllGather,
    /// An activation moved between GPUs (inserted by the scheduler, never by a model).
    Transfer,
    /// A mixture-of-experts layer's gate: tokens x experts logits (and the top-k).
    Router,
    /// The up (gate and up) GEMM of one expert unit, over the tokens routed to it.
    ExpertUp,
    /// The down GEMM of one expert unit.
    ExpertDown,
    /// Tokens sent to (or back from) the GPUs holding their experts.
    AllToAll,
}

impl OpKind {
    pub const ALL: [OpKind; 20] = [
        OpKind::Embedding,
        OpKind::InputNorm,
        OpKind::QkvProj,
        OpKind::Rope,
        OpKind::Attention,
        OpKind::OProj,
        OpKind::AllReduce,
        OpKind::ResidualAdd,
        OpKind::PostAttnNorm,
        OpKind::GateUpProj,
        OpKind::Activation,
        OpKind::DownProj,
        OpKind::FinalNorm,
        OpKind::LmHead,
        OpKind::AllGather,
        OpKind::Transfer,
        OpKind::Router,
        OpKind::ExpertUp,
        OpKind::ExpertDown,
        OpKind::AllToAll,
    ];

    /// The profiled kind whose cost curves price this one. Only the mixture-of-experts
    /// kinds differ: the router is a small GEMM (priced like QKV), expert GEMMs like the
    /// dense MLP's with their routed tokens, an all-to-all like an all-gather of the
    /// same bytes. The one place the cost model and the plugin interface (whose op
    /// kinds are frozen per version) map the new kinds.
    pub fn cost_class(self) -> OpKind {
        match self {
            OpKind::Router => OpKind::QkvProj,
            OpKind::ExpertUp => OpKind::GateUpProj,
            OpKind::ExpertDown => OpKind::DownProj,
            OpKind::AllToAll => OpKind::AllGather,
            k => k,
        }
    }

    /// The op's column name in Vidur's `mlp.csv`, where it was profiled.
    pub fn profile_name(self) -> Option<&'static str> {
        Some(match self {
            OpKind::Embedding => "emb",
            OpKind::InputNorm => "input_layernorm",
            OpKind::QkvProj => "attn_pre_proj",
            OpKind::Rope => "attn_rope",
            OpKind::OProj => "attn_post_proj",
            OpKind::PostAttnNorm => "post_attention_layernorm",
            OpKind::GateUpProj => "mlp_up_proj",
            OpKind::Activation => "mlp_act",
            OpKind::DownProj => "mlp_down_proj",
            OpKind::ResidualAdd => "add",
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Embedding => "embedding",
            OpKind::InputNorm => "input_norm",
            OpKind::QkvProj => "qkv_proj",
            OpKind::Rope => "rope",
            OpKind::Attention => "attention",
            OpKind::OProj => "o_proj",
            OpKind::AllReduce => "all_reduce",
            OpKind::ResidualAdd => "residual_add",
            OpKind::PostAttnNorm => "post_attn_norm",
            OpKind::GateUpProj => "gate_up_proj",
            OpKind::Activation => "activation",
            OpKind::DownProj => "down_proj",
            OpKind::FinalNorm => "final_norm",
            OpKind::LmHead => "lm_head",
            OpKind::AllGather => "all_gather",
            OpKind::Transfer => "transfer",
            OpKind::Router => "router",
            OpKind::ExpertUp => "expert_up",
            OpKind::ExpertDown => "expert_down",
            OpKind::AllToAll => "all_to_all",
        }
    }

    pub fn is_gemm(self) -> bool {
        matches!(
            self,
            OpKind::QkvProj
                | OpKind::OProj
                | OpKind::GateUpProj
                | OpKind::DownProj
                | OpKind::LmHead
                | OpKind::Router
                | OpKind::ExpertUp
                | OpKind::ExpertDown
        )
    }

    /// Norms, rope, residual adds and activations: one pass over an activation, no
    /// matmul, no collective.
    pub fn is_elementwise(self) -> bool {
        matches!(
            self,
            OpKind::InputNorm
                | OpKind::Rope
                | OpKind::ResidualAdd
                | OpKind::PostAttnNorm
                | OpKind::Activation
                | OpKind::FinalNorm
        )
    }

    /// Where this op runs follows from where its input was produced: elementwise ops
    /// and collectives run with their producer, attention with its KV cache. Only the
    /// others (the weight GEMMs, embedding, LM head) have a real choice of GPU.
    pub fn follows_producer(self) -> bool {
        self.is_elementwise() || self.is_collective() || self == OpKind::Attention
    }

    pub fn is_collective(self) -> bool {
        matches!(self, OpKind::AllReduce | OpKind::AllGather | OpKind::AllToAll)
    }
}

/// The attention work of one iteration on one GPU of the tensor-parallel group.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AttnShape {
    pub q_heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Prefill chunks as (chunk tokens, KV tokens already cached before the chunk).
    pub prefill: SmallVec<[(u32, u32); 4]>,
    /// Decode requests in the batch and the sum of their KV lengths (new token included).
    pub decode_batch: u32,
    pub decode_kv_sum: u64,
}

/// Tensor shapes of an operator, as much as its cost depends on them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OpShape {
    /// `[m, k] x [k, n]` on one GPU (already sharded).
    Gemm {
        m: u64,
        n: u64,
        k: u64,
    },
    /// A memory-bound pass over `tokens x width` elements.
    Elementwise {
        tokens: u64,
        width: u64,
    },
    Attention(AttnShape),
    /// A collective over `ranks` GPUs on a message of `bytes` per GPU.
    Collective {
        bytes: u64,
        ranks: u32,
    },
    /// A point-to-point copy of `bytes`.
    Transfer {
        bytes: u64,
    },
}

/// One operator instance: what it is and exactly how much work it does on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpSpec {
    pub kind: OpKind,
    pub shape: OpShape,
    /// Floating-point operations (multiply and add counted separately).
    pub flops: u64,
    /// Bytes read from and written to device memory, weights included.
    pub bytes: u64,
    /// Bytes of weights the op reads (they must be resident where it runs).
    pub weight_bytes: u64,
    /// Bytes of the output activation it produces.
    pub out_bytes: u64,
    /// Tensor-parallel degree of the group it runs on.
    pub tp: u32,
}

impl OpSpec {
    /// Tokens processed (the GEMM `m`, or rows of an elementwise op).
    pub fn tokens(&self) -> u64 {
        match &self.shape {
            OpShape::Gemm { m, .. } => *m,
            OpShape::Elementwise { tokens, .. } => *tokens,
            OpShape::Attention(a) => a.prefill.iter().map(|p| p.0 as u64).sum::<u64>() + a.decode_batch as u64,
            OpShape::Collective { .. } | OpShape::Transfer { .. } => 0,
        }
    }

    /// FLOPs per byte moved: where the op sits on the roofline.
    pub fn intensity(&self) -> f64 {
        self.flops as f64 / self.bytes.max(1) as f64
    }
}
