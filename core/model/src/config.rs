//! Model descriptions: presets, Hugging Face `config.json`, Vidur `model_config.yml`.

use crate::arch::{is_default, Act, Biases, Moe, Norm};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Errors from reading or validating a model description.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unknown model `{0}` (known presets: {known})", known = preset_names().join(", "))]
    UnknownPreset(String),
    // The io error is in the message, not `source()`: shown once where a caller prints the chain.
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{path}: cannot parse: {msg}")]
    Parse { path: String, msg: String },
    #[error("{path}: field `{field}`: {msg}")]
    Field { path: String, field: &'static str, msg: String },
    #[error("{path}: key `{key}` is not modelled: it may change what the model costs (keys known not to: see COST_NEUTRAL_KEYS in slicesched-model, or the README)")]
    UnknownKey { path: String, key: String },
}

/// Element type of weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    Bf16,
    Fp16,
    Fp32,
    Fp8,
}

impl Dtype {
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 | Dtype::Fp16 => 2,
            Dtype::Fp32 => 4,
            Dtype::Fp8 => 1,
        }
    }
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "bfloat16" | "bf16" => Dtype::Bf16,
            "float16" | "fp16" | "half" => Dtype::Fp16,
            "float32" | "fp32" | "float" => Dtype::Fp32,
            "float8" | "fp8" | "float8_e4m3fn" => Dtype::Fp8,
            _ => return None,
        })
    }
}

/// A decoder-only transformer. The first fields are the Llama layout (RMSNorm, RoPE,
/// GQA, gated SiLU MLP); the rest say where a model departs from it, each defaulting to
/// Llama's choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub name: String,
    pub hidden_size: u64,
    pub num_attention_heads: u64,
    pub num_key_value_heads: u64,
    pub head_dim: u64,
    pub intermediate_size: u64,
    pub num_hidden_layers: u64,
    pub vocab_size: u64,
    pub dtype: Dtype,
    /// SwiGLU-style gate and up projections fused into one GEMM of twice the width.
    pub gated_mlp: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub norm: Norm,
    #[serde(default, skip_serializing_if = "is_default")]
    pub activation: Act,
    #[serde(default, skip_serializing_if = "is_default")]
    pub biases: Biases,
    /// The LM head reuses the embedding matrix (held once).
    #[serde(default, skip_serializing_if = "is_default")]
    pub tie_embeddings: bool,
    /// Attention and MLP read the same normed input and add to the residual together
    /// (GPT-J, phi-2): one norm per layer, one residual add.
    #[serde(default, skip_serializing_if = "is_default")]
    pub parallel_block: bool,
    /// Dimensions of each head that are rotated (partial rotary); `None`: all of them.
    #[serde(default, skip_serializing_if = "is_default")]
    pub rotary_dim: Option<u64>,
    /// ALiBi position biases in attention instead of RoPE.
    #[serde(default, skip_serializing_if = "is_default")]
    pub alibi: bool,
    /// Keys a query attends at most (sliding-window attention).
    #[serde(default, skip_serializing_if = "is_default")]
    pub sliding_window: Option<u32>,
    /// Layers that use the window (`None`: all; Gemma-2 alternates, half of them).
    #[serde(default, skip_serializing_if = "is_default")]
    pub window_layers: Option<u64>,
    /// RMSNorm of each query and key head before RoPE (Qwen3).
    #[serde(default, skip_serializing_if = "is_default")]
    pub qk_norm: bool,
    /// Norms after attention and after the MLP too, four per layer (Gemma-2).
    #[serde(default, skip_serializing_if = "is_default")]
    pub sandwich_norms: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub moe: Option<Moe>,
    /// Positions the model serves, prompt and output together (HF
    /// `max_position_embeddings`); `None`: not stated, nothing is refused for length.
    #[serde(default, skip_serializing_if = "is_default")]
    pub context_window: Option<u64>,
}

/// A preset: (name, hidden, heads, kv heads, head dim, intermediate, layers, vocab).
pub type Preset = (&'static str, u64, u64, u64, u64, u64, u64, u64);

pub const PRESETS: &[Preset] = &[
    ("llama-2-7b", 4096, 32, 32, 128, 11008, 32, 32000),
    ("llama-2-13b", 5120, 40, 40, 128, 13824, 40, 32000),
    ("llama-2-70b", 8192, 64, 8, 128, 28672, 80, 32000),
    ("llama-3-8b", 4096, 32, 8, 128, 14336, 32, 128256),
    ("llama-3-70b", 8192, 64, 8, 128, 28672, 80, 128256),
    ("mistral-7b", 4096, 32, 8, 128, 14336, 32, 32000),
    // Its heads are narrower than hidden / heads: attention is 4096 wide in a 5120 model.
    ("mistral-small-24b", 5120, 32, 8, 128, 32768, 40, 131072),
    ("qwen2.5-7b", 3584, 28, 4, 128, 18944, 28, 152064),
    ("qwen2.5-14b", 5120, 40, 8, 128, 13824, 48, 152064),
    ("qwen2.5-32b", 5120, 40, 8, 128, 27648, 64, 152064),
    ("codellama-13b", 5120, 40, 40, 128, 13824, 40, 32016),
    ("codellama-34b", 8192, 64, 8, 128, 22016, 48, 32000),
    // Tiny Llama-shaped models the CPU executor runs in CI in seconds (GQA, real layouts).
    ("tiny-2l", 256, 8, 2, 32, 768, 2, 512),
    ("tiny-4l", 512, 8, 4, 64, 1536, 4, 2048),
    ("tiny-3l-1k", 1024, 16, 4, 64, 2816, 3, 4096),
];

/// Presets that depart from the Llama layout, read from their published `config.json`
/// (`core/model/configs/`, one file per model, verbatim). They are served in bf16 even
/// where the upload is float32 (Gemma-2), as vLLM's `--dtype auto` does.
const CONFIG_PRESETS: &[(&str, &str)] = &[
    ("mixtral-8x7b", include_str!("../configs/mixtral-8x7b.json")),
    ("qwen3-30b-a3b", include_str!("../configs/qwen3-30b-a3b.json")),
    ("qwen3-8b", include_str!("../configs/qwen3-8b.json")),
    ("gemma-2-9b", include_str!("../configs/gemma-2-9b.json")),
    ("phi-2", include_str!("../configs/phi-2.json")),
    ("llama-3.1-70b", include_str!("../configs/llama-3.1-70b.json")),
    ("mistral-7b-v0.1", include_str!("../configs/mistral-7b-v0.1.json")),
    // Tiny models of other layouts the CPU executor runs in CI (written here, in the
    // published configs' form): phi's, Qwen3's, Mixtral's and Gemma-2's (a window of 8
    // on alternate layers, so short prompts reach past it).
    ("tiny-phi", include_str!("../configs/tiny-phi.json")),
    ("tiny-qwen3", include_str!("../configs/tiny-qwen3.json")),
    ("tiny-mixtral", include_str!("../configs/tiny-mixtral.json")),
    ("tiny-gemma2", include_str!("../configs/tiny-gemma2.json")),
];

/// The `config.json` text behind a preset read from one (None for the Llama-layout
/// table's): where an executor reads the numerics the shapes leave out (RoPE θ, norm ε).
pub fn preset_config_json(name: &str) -> Option<&'static str> {
    CONFIG_PRESETS.iter().find(|p| p.0 == name).map(|p| p.1)
}

/// Every preset's name, the Llama-layout table's first.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.0).chain(CONFIG_PRESETS.iter().map(|p| p.0)).collect()
}

/// Context windows of the released models behind the [`PRESETS`] (their
/// `max_position_embeddings`; Qwen2.5 as deployed for long context, with YaRN). The
/// tiny test models state none.
const PRESET_WINDOWS: &[(&str, u64)] = &[
    ("llama-2-7b", 4096),
    ("llama-2-13b", 4096),
    ("llama-2-70b", 4096),
    ("llama-3-8b", 8192),
    ("llama-3-70b", 8192),
    ("mistral-7b", 32_768),
    ("mistral-small-24b", 32_768),
    ("qwen2.5-7b", 131_072),
    ("qwen2.5-14b", 131_072),
    ("qwen2.5-32b", 131_072),
    ("codellama-13b", 16_384),
    ("codellama-34b", 16_384),
];

/// Other spellings users and traces use for the presets.
const ALIASES: &[(&str, &str)] = &[
    ("llama-2-7b-hf", "llama-2-7b"),
    ("llama-2-13b-hf", "llama-2-13b"),
    ("llama-2-70b-hf", "llama-2-70b"),
    ("meta-llama-3-8b", "llama-3-8b"),
    ("meta-llama-3-70b", "llama-3-70b"),
    ("mixtral-8x7b-v0.1", "mixtral-8x7b"),
    ("mixtral-8x7b-instruct-v0.1", "mixtral-8x7b"),
    ("meta-llama-3.1-70b", "llama-3.1-70b"),
    ("llama-3.1-70b-instruct", "llama-3.1-70b"),
    ("meta-llama-3.1-70b-instruct", "llama-3.1-70b"),
    ("gemma-2-9b-it", "gemma-2-9b"),
    ("qwen2.5-7b-instruct", "qwen2.5-7b"),
    ("qwen2.5-32b-instruct", "qwen2.5-32b"),
    ("mistral-small-24b-instruct-2501", "mistral-small-24b"),
    ("mistral-small-24b-base-2501", "mistral-small-24b"),
    ("codellama-13b-hf", "codellama-13b"),
    ("codellama-34b-hf", "codellama-34b"),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VidurConfig {
    num_layers: Option<u64>,
    num_q_heads: Option<u64>,
    num_kv_heads: Option<u64>,
    embedding_dim: Option<u64>,
    mlp_hidden_dim: Option<u64>,
    vocab_size: Option<u64>,
    use_gated_mlp: Option<bool>,
    use_bias: Option<bool>,
    use_qkv_bias: Option<bool>,
    activation: Option<String>,
    norm: Option<String>,
    /// False for a parallel attention+MLP block (Vidur's phi-2).
    post_attn_norm: Option<bool>,
    partial_rotary_factor: Option<f64>,
    max_position_embeddings: Option<u64>,
    // Read so that they are known; they do not change cost.
    #[allow(dead_code)]
    rope_theta: Option<serde_yaml::Value>,
    #[allow(dead_code)]
    rope_scaling: Option<serde_yaml::Value>,
    #[allow(dead_code)]
    is_neox_style: Option<serde_yaml::Value>,
    #[allow(dead_code)]
    no_tensor_parallel: Option<serde_yaml::Value>,
}

pub(crate) fn need<T>(path: &str, field: &'static str, v: Option<T>) -> Result<T, ModelError> {
    v.ok_or_else(|| ModelError::Field { path: path.into(), field, msg: "missing".into() })
}

impl ModelConfig {
    /// A preset by name (case-insensitive; `-hf` and vendor prefixes accepted).
    pub fn preset(name: &str) -> Result<Self, ModelError> {
        let lower = name.to_ascii_lowercase();
        let lower = lower.rsplit('/').next().unwrap_or(&lower).to_string();
        let key = ALIASES.iter().find(|(a, _)| *a == lower).map(|(_, p)| *p).unwrap_or(&lower);
        if let Some((n, text)) = CONFIG_PRESETS.iter().find(|p| p.0 == key) {
            let mut m = Self::from_hf_json(text, &format!("preset {n}"), n)?;
            m.name = n.to_string();
            m.dtype = Dtype::Bf16;
            return Ok(m);
        }
        let &(n, h, q, kv, d, i, l, v) =
            PRESETS.iter().find(|p| p.0 == key).ok_or_else(|| ModelError::UnknownPreset(name.to_string()))?;
        let mut m = Self::llama(n, h, q, kv, d, i, l, v);
        m.context_window = PRESET_WINDOWS.iter().find(|w| w.0 == n).map(|w| w.1);
        Ok(m)
    }

    /// A Llama-layout model of these sizes (bf16, gated SiLU MLP, RMSNorm, full RoPE).
    #[allow(clippy::too_many_arguments)]
    pub fn llama(n: &str, h: u64, q: u64, kv: u64, d: u64, i: u64, l: u64, v: u64) -> Self {
        Self {
            name: n.into(),
            hidden_size: h,
            num_attention_heads: q,
            num_key_value_heads: kv,
            head_dim: d,
            intermediate_size: i,
            num_hidden_layers: l,
            vocab_size: v,
            dtype: Dtype::Bf16,
            gated_mlp: true,
            norm: Norm::Rms,
            activation: Act::Silu,
            biases: Biases::default(),
            tie_embeddings: false,
            parallel_block: false,
            rotary_dim: None,
            alibi: false,
            sliding_window: None,
            window_layers: None,
            qk_norm: false,
            sandwich_norms: false,
            moe: None,
            context_window: None,
        }
    }

    /// Reads a Hugging Face `config.json` or a Vidur `model_config.yml` (by extension).
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| ModelError::Io { path: p.clone(), err })?;
        let is_yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yml" | "yaml"));
        let default_name = path
            .parent()
            .and_then(|d| d.file_name())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "custom".into());
        if is_yaml {
            Self::from_vidur_yaml(&text, &p, &default_name)
        } else {
            Self::from_hf_json(&text, &p, &default_name)
        }
    }

    /// Parses Vidur's `model_config.yml`; `path` only labels errors.
    pub fn from_vidur_yaml(text: &str, path: &str, name: &str) -> Result<Self, ModelError> {
        let c: VidurConfig =
            serde_yaml::from_str(text).map_err(|e| ModelError::Parse { path: path.into(), msg: e.to_string() })?;
        let hidden = need(path, "embedding_dim", c.embedding_dim)?;
        let heads = need(path, "num_q_heads", c.num_q_heads)?;
        let head_dim = hidden.checked_div(heads).unwrap_or(0);
        let field = |field, msg: String| ModelError::Field { path: path.into(), field, msg };
        let mut cfg = Self::llama(
            name,
            hidden,
            heads,
            c.num_kv_heads.unwrap_or(heads),
            head_dim,
            need(path, "mlp_hidden_dim", c.mlp_hidden_dim)?,
            need(path, "num_layers", c.num_layers)?,
            need(path, "vocab_size", c.vocab_size)?,
        );
        cfg.dtype = Dtype::Fp16;
        cfg.gated_mlp = c.use_gated_mlp.unwrap_or(true);
        if let Some(a) = c.activation {
            cfg.activation = Act::parse(&a).ok_or_else(|| field("activation", format!("unsupported `{a}`")))?;
        }
        cfg.norm = match c.norm.as_deref() {
            None | Some("rms_norm") => Norm::Rms,
            Some("layer_norm") => Norm::Layer,
            Some(o) => return Err(field("norm", format!("unsupported `{o}` (rms_norm, layer_norm)"))),
        };
        let bias = c.use_bias.unwrap_or(false);
        cfg.biases = Biases { qkv: bias || c.use_qkv_bias.unwrap_or(false), o: bias, mlp: bias, lm_head: false };
        cfg.parallel_block = !c.post_attn_norm.unwrap_or(true);
        cfg.context_window = c.max_position_embeddings;
        if let Some(f) = c.partial_rotary_factor {
            cfg.rotary_dim = crate::hf::rotary_dim(f, head_dim).map_err(|m| field("partial_rotary_factor", m))?;
        }
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Resolves a scenario's `model = "..."`: a preset name, or a path to a config file.
    pub fn resolve(spec: &str, base_dir: &Path) -> Result<Self, ModelError> {
        if spec.ends_with(".json") || spec.ends_with(".yml") || spec.ends_with(".yaml") {
            Self::from_file(&base_dir.join(spec))
        } else {
            Self::preset(spec)
        }
    }

    pub(crate) fn validate(&self, path: &str) -> Result<(), ModelError> {
        let bad = |field, msg: &str| Err(ModelError::Field { path: path.into(), field, msg: msg.into() });
        for (field, v) in [
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("vocab_size", self.vocab_size),
        ] {
            if v == 0 {
                return bad(field, "must be positive");
            }
            if v > 1 << 24 {
                return bad(field, "implausibly large");
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return bad("num_key_value_heads", "must divide num_attention_heads");
        }
        if self.head_dim == 0 {
            return bad("head_dim", "must be positive");
        }
        if let Some(r) = self.rotary_dim {
            if r == 0 || r > self.head_dim || r % 2 == 1 {
                return bad("partial_rotary_factor", "rotary dimensions must be even and within the head");
            }
        }
        if self.context_window == Some(0) {
            return bad("max_position_embeddings", "must be positive");
        }
        if self.sliding_window == Some(0) {
            return bad("sliding_window", "must be positive");
        }
        if self.window_layers.is_some_and(|w| w > self.num_hidden_layers) {
            return bad("sliding_window", "more windowed layers than layers");
        }
        if let Some(m) = self.moe {
            if m.experts < 2 || m.experts > 4096 {
                return bad("num_experts", "must be between 2 and 4096");
            }
            if m.top_k == 0 || m.top_k > m.experts {
                return bad("num_experts_per_tok", "must be between 1 and the number of experts");
            }
            if m.expert_intermediate == 0 || m.expert_intermediate > 1 << 24 {
                return bad("moe_intermediate_size", "must be positive and plausible");
            }
        }
        Ok(())
    }

    /// Layers whose attention uses the sliding window.
    pub fn windowed_layers(&self) -> u64 {
        match self.sliding_window {
            None => 0,
            Some(_) => self.window_layers.unwrap_or(self.num_hidden_layers),
        }
    }

    /// Whether layer `l`'s attention uses the sliding window. The config carries only how
    /// many layers do; which ones follows the families that window some: Gemma-2 (the
    /// sandwich-norm layout) alternates from layer 0 (`0, 2, 4, ...`), Qwen windows the
    /// last ones (from `max_window_layers` on).
    pub fn is_windowed_layer(&self, l: u64) -> bool {
        let (n, layers) = (self.windowed_layers(), self.num_hidden_layers);
        if n >= layers {
            n > 0
        } else if self.sandwich_norms {
            l.is_multiple_of(2) && l / 2 < n
        } else {
            l >= layers - n && l < layers
        }
    }

    /// The KV tokens one request holds at most, when every layer's attention is
    /// windowed (a model mixing windowed and global layers keeps all of its context in
    /// the global ones, so its KV is not capped).
    pub fn kv_window(&self) -> Option<u32> {
        self.sliding_window.filter(|_| self.windowed_layers() == self.num_hidden_layers)
    }

    /// The first way this model departs from the Llama layout, if any (what an executor
    /// that runs only that layout must refuse).
    pub fn departure_from_llama(&self) -> Option<&'static str> {
        Some(if self.moe.is_some() {
            "mixture-of-experts"
        } else if self.norm != Norm::Rms {
            "LayerNorm"
        } else if self.activation != Act::Silu {
            "a GELU activation"
        } else if !self.gated_mlp {
            "a plain (ungated) MLP"
        } else if self.biases != Biases::default() {
            "biases"
        } else if self.parallel_block {
            "a parallel attention+MLP block"
        } else if self.rotary_dim.is_some() {
            "partial rotary"
        } else if self.alibi {
            "ALiBi"
        } else if self.sliding_window.is_some() {
            "sliding-window attention"
        } else if self.qk_norm {
            "query/key norms"
        } else if self.sandwich_norms {
            "sandwich norms"
        } else {
            return None;
        })
    }

    /// Checks that the model can be split `tp` ways (heads and MLP width divide evenly).
    pub fn check_tp(&self, tp: u32) -> Result<(), String> {
        let t = tp as u64;
        if t == 0 || !self.num_attention_heads.is_multiple_of(t) {
            return Err(format!("{} attention heads do not split {tp} ways", self.num_attention_heads));
        }
        match self.moe {
            Some(m) if m.expert_parallel => {
                if !(m.experts as u64).is_multiple_of(t) {
                    return Err(format!("{} experts do not split {tp} ways", m.experts));
                }
            }
            Some(m) => {
                if !m.expert_intermediate.is_multiple_of(t) {
                    return Err(format!("expert width {} does not split {tp} ways", m.expert_intermediate));
                }
            }
            None => {
                if !self.intermediate_size.is_multiple_of(t) {
                    return Err(format!("intermediate size {} does not split {tp} ways", self.intermediate_size));
                }
            }
        }
        Ok(())
    }

    /// Bytes of weights one tensor-parallel shard holds.
    pub fn weight_bytes_per_gpu(&self, tp: u32) -> u64 {
        let t = tp as u64;
        let b = self.dtype.bytes();
        let h = self.hidden_size;
        let kv_heads_per_gpu = self.num_key_value_heads.div_ceil(t);
        let qkv_n = (self.num_attention_heads / t + 2 * kv_heads_per_gpu) * self.head_dim;
        let qkv = h * qkv_n + if self.biases.qkv { qkv_n } else { 0 };
        let o = self.num_attention_heads / t * self.head_dim * h + if self.biases.o { h } else { 0 };
        let up_mats = if self.gated_mlp { 2 } else { 1 };
        let mlp_of = |width: u64| h * width * (up_mats + 1) + if self.biases.mlp { up_mats * width + h } else { 0 };
        let mlp = match self.moe {
            None => mlp_of(self.intermediate_size / t),
            Some(m) if m.expert_parallel => m.experts as u64 / t * mlp_of(m.expert_intermediate) + m.experts as u64 * h,
            Some(m) => m.experts as u64 * mlp_of(m.expert_intermediate / t) + m.experts as u64 * h,
        };
        let norms = self.norms_per_layer() * self.norm_weights();
        let qk_norm = if self.qk_norm { 2 * self.head_dim } else { 0 };
        let layer = qkv + o + mlp + norms + qk_norm;
        let vocab = self.vocab_size.div_ceil(t);
        let emb = vocab * h;
        let lm_head = if self.tie_embeddings { 0 } else { emb } + if self.biases.lm_head { vocab } else { 0 };
        (layer * self.num_hidden_layers + emb + lm_head + self.norm_weights()) * b
    }

    /// Norms in one layer: input and post-attention, one for a parallel block, four with
    /// sandwich norms.
    pub fn norms_per_layer(&self) -> u64 {
        if self.parallel_block {
            1
        } else if self.sandwich_norms {
            4
        } else {
            2
        }
    }

    /// Weight elements of one norm (LayerNorm has a bias too).
    pub fn norm_weights(&self) -> u64 {
        match self.norm {
            Norm::Rms => self.hidden_size,
            Norm::Layer => 2 * self.hidden_size,
        }
    }

    /// Bytes of KV cache per token on one GPU of a `tp`-way group, all layers.
    pub fn kv_bytes_per_token(&self, tp: u32) -> u64 {
        let kv_heads_per_gpu = self.num_key_value_heads.div_ceil(tp as u64);
        2 * kv_heads_per_gpu * self.head_dim * self.num_hidden_layers * self.dtype.bytes()
    }

    /// Total parameters (for reports).
    pub fn parameters(&self) -> u64 {
        self.weight_bytes_per_gpu(1) / self.dtype.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_known_parameter_counts() {
        let billions = |n: &str| ModelConfig::preset(n).unwrap().parameters() as f64 / 1e9;
        assert!((billions("llama-2-7b") - 6.74).abs() < 0.05, "{}", billions("llama-2-7b"));
        assert!((billions("llama-2-13b") - 13.0).abs() < 0.1);
        assert!((billions("llama-2-70b") - 69.0).abs() < 0.3);
        assert!((billions("llama-3-8b") - 8.03).abs() < 0.05);
        assert!((billions("mistral-7b") - 7.24).abs() < 0.05);
        assert!((billions("qwen2.5-7b") - 7.6).abs() < 0.1);
        assert!((billions("mistral-small-24b") - 23.6).abs() < 0.1, "{}", billions("mistral-small-24b"));
        assert!((billions("qwen2.5-32b") - 32.8).abs() < 0.2, "{}", billions("qwen2.5-32b"));
        assert!((billions("codellama-13b") - 13.0).abs() < 0.1, "{}", billions("codellama-13b"));
        assert!((billions("codellama-34b") - 33.7).abs() < 0.2, "{}", billions("codellama-34b"));
    }

    #[test]
    fn tiny_presets_are_small_gqa_models() {
        for name in ["tiny-2l", "tiny-4l", "tiny-3l-1k"] {
            let m = ModelConfig::preset(name).unwrap();
            assert!((2..=4).contains(&m.num_hidden_layers) && (256..=1024).contains(&m.hidden_size), "{name}");
            assert!(m.num_key_value_heads < m.num_attention_heads, "{name} is GQA");
            assert_eq!(m.head_dim * m.num_attention_heads, m.hidden_size, "{name}");
            assert!(m.parameters() < 60_000_000, "{name}: {}", m.parameters());
        }
    }

    #[test]
    fn windowed_layers_follow_the_family() {
        let g = ModelConfig::preset("tiny-gemma2").unwrap();
        assert_eq!((g.sliding_window, g.window_layers), (Some(8), Some(2)));
        let win = |m: &ModelConfig| (0..m.num_hidden_layers).filter(|&l| m.is_windowed_layer(l)).collect::<Vec<_>>();
        assert_eq!(win(&g), [0, 2], "Gemma-2 alternates from layer 0");
        let mut q = g.clone();
        q.sandwich_norms = false;
        assert_eq!(win(&q), [2, 3], "Qwen windows the last layers");
        q.window_layers = None;
        assert_eq!(win(&q), [0, 1, 2, 3]);
        q.sliding_window = None;
        assert!(win(&q).is_empty());
    }

    #[test]
    fn aliases_and_unknown() {
        assert_eq!(ModelConfig::preset("meta-llama/Llama-2-7b-hf").unwrap().name, "llama-2-7b");
        let e = ModelConfig::preset("gpt-5").unwrap_err().to_string();
        assert!(e.contains("gpt-5") && e.contains("llama-2-7b"), "{e}");
    }

    #[test]
    fn hf_json_errors_name_the_field() {
        let e = ModelConfig::from_hf_json(r#"{"hidden_size": 4096}"#, "x.json", "x").unwrap_err();
        assert!(e.to_string().contains("num_attention_heads"), "{e}");
        let e = ModelConfig::from_hf_json(
            r#"{"hidden_size":64,"num_attention_heads":3,"num_key_value_heads":2,"intermediate_size":128,"num_hidden_layers":2,"vocab_size":100}"#,
            "x.json",
            "x",
        )
        .unwrap_err();
        assert!(e.to_string().contains("num_key_value_heads"), "{e}");
        assert!(ModelConfig::from_hf_json("not json", "x.json", "x").is_err());
    }

    #[test]
    fn hf_json_roundtrip_llama3() {
        let j = r#"{"hidden_size":4096,"num_attention_heads":32,"num_key_value_heads":8,
            "intermediate_size":14336,"num_hidden_layers":32,"vocab_size":128256,"torch_dtype":"bfloat16"}"#;
        let m = ModelConfig::from_hf_json(j, "c.json", "l3").unwrap();
        let p = ModelConfig::preset("llama-3-8b").unwrap();
        assert_eq!(m.weight_bytes_per_gpu(1), p.weight_bytes_per_gpu(1));
        assert_eq!(m.kv_bytes_per_token(1), 2 * 8 * 128 * 32 * 2);
    }

    #[test]
    fn vidur_yaml() {
        let y = "num_layers: 32\nnum_q_heads: 32\nnum_kv_heads: 8\nembedding_dim: 4096\nmlp_hidden_dim: 14336\nvocab_size: 128256\nuse_gated_mlp: true\n";
        let m = ModelConfig::from_vidur_yaml(y, "m.yml", "Meta-Llama-3-8B").unwrap();
        assert_eq!(m.num_key_value_heads, 8);
        assert_eq!(m.head_dim, 128);
        assert_eq!(m.context_window, None);
        let m = ModelConfig::from_vidur_yaml(&format!("{y}max_position_embeddings: 8192\n"), "m.yml", "l3").unwrap();
        assert_eq!(m.context_window, Some(8192));
    }

    #[test]
    fn context_windows_come_from_the_config_or_the_released_model() {
        let w = |n: &str| ModelConfig::preset(n).unwrap().context_window;
        assert_eq!((w("llama-2-13b"), w("llama-3-8b"), w("codellama-13b")), (Some(4096), Some(8192), Some(16_384)));
        assert_eq!((w("mixtral-8x7b"), w("phi-2"), w("tiny-2l")), (Some(32_768), Some(2048), None));
        // Every preset a user would serve states one (only the CPU test models do not).
        for n in preset_names().into_iter().filter(|n| !n.starts_with("tiny-")) {
            assert!(w(n).is_some(), "{n}");
        }
        let j = r#"{"hidden_size":64,"num_attention_heads":4,"intermediate_size":128,"num_hidden_layers":2,
            "vocab_size":100,"max_position_embeddings":0}"#;
        let e = ModelConfig::from_hf_json(j, "x.json", "x").unwrap_err().to_string();
        assert!(e.contains("max_position_embeddings") && e.contains("positive"), "{e}");
    }
}
