//! The architecture choices beyond the Llama layout: norm and activation kinds, biases,
//! block shape, position encoding, sliding windows and mixture-of-experts.
//!
//! Every field defaults to the Llama layout and is left out of serialised configs when
//! it has its default, so a Llama's description and DAG are what they always were.

use serde::{Deserialize, Serialize};

/// The normalisation of the residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// RMSNorm: one weight vector (Llama, Mistral, Qwen, Gemma).
    #[default]
    Rms,
    /// LayerNorm: mean and variance, weight and bias (GPT-J, phi-2, Falcon).
    Layer,
}

/// The MLP's nonlinearity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Act {
    #[default]
    Silu,
    /// GELU with the tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    /// GELU with erf (`gelu`).
    Gelu,
}

impl Act {
    /// Parses Hugging Face's `hidden_act` spellings.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "silu" | "swish" => Act::Silu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" | "gelu_tanh" => Act::GeluTanh,
            "gelu" => Act::Gelu,
            _ => return None,
        })
    }
}

/// Which linear layers carry a bias vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Biases {
    pub qkv: bool,
    pub o: bool,
    /// Up (and gate) and down projections.
    pub mlp: bool,
    pub lm_head: bool,
}

/// A mixture-of-experts MLP in every layer.
///
/// Routing is deterministic and balanced: a batch of `tokens` makes `tokens * top_k`
/// assignments, each expert takes `assignments / experts` and the remainder goes one
/// each to experts taken round-robin across the expert units (so a decode step of one
/// token touches `top_k` experts in `top_k` different units). This is the expectation of
/// a well-balanced router (what auxiliary-loss training aims for); a trained router's
/// skew is not modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moe {
    pub experts: u32,
    pub top_k: u32,
    /// Width of one expert's MLP.
    pub expert_intermediate: u64,
    /// Experts split across the tensor-parallel group (each GPU holds `experts / tp`
    /// whole experts, tokens travel by all-to-all) rather than each expert split `tp`
    /// ways (vLLM's default, joined by an all-reduce).
    #[serde(default)]
    pub expert_parallel: bool,
}

/// Most placeable expert units per layer and GPU. A fused MoE kernel runs many experts
/// in one grouped GEMM; grouping a 128-expert layer into 16 units keeps the DAG at
/// tens of ops per layer while every unit stays a separately placeable weight GEMM.
pub const MAX_EXPERT_UNITS: u32 = 16;

pub(crate) fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}
