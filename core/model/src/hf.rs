//! Hugging Face `config.json`: every key is either understood (it sets a field of
//! [`ModelConfig`]), on [`COST_NEUTRAL_KEYS`], or an error naming it — a model with a
//! feature the DAG does not model is refused, never served as a Llama.

use crate::arch::{Act, Biases, Moe, Norm};
use crate::config::{need, Dtype, ModelConfig, ModelError};
use serde_json::{Map, Value};

/// Keys of a `config.json` that do not change what an iteration costs, so a config may
/// hold them and still be modelled exactly: numerics (epsilons, RoPE θ and scaling,
/// soft-capping, the attention scale), training-only settings (dropout, router losses,
/// initialisation), token ids, bookkeeping. Keep `README.md` ("Model configs") in step.
pub const COST_NEUTRAL_KEYS: &[&str] = &[
    "_name_or_path",
    "architectures",
    "attention_dropout",
    "attn_logit_softcapping",
    "bos_token_id",
    "cache_implementation",
    "embd_pdrop",
    "eos_token_id",
    "final_logit_softcapping",
    "hidden_dropout",
    "initializer_range",
    "layer_norm_eps",
    "norm_topk_prob",
    "output_router_logits",
    "pad_token_id",
    "pretraining_tp",
    "query_pre_attn_scalar",
    "resid_pdrop",
    "rms_norm_eps",
    "rope_scaling",
    "rope_theta",
    "router_aux_loss_coef",
    "router_jitter_noise",
    "tokenizer_class",
    "transformers_version",
    "use_cache",
];

/// Keys this parser reads (they change the DAG, the sizes or what a request may ask).
pub const UNDERSTOOD_KEYS: &[&str] = &[
    "max_position_embeddings",
    "model_type",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "num_hidden_layers",
    "vocab_size",
    "torch_dtype",
    "hidden_act",
    "hidden_activation",
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "partial_rotary_factor",
    "qk_layernorm",
    "sliding_window",
    "sliding_window_size",
    "use_sliding_window",
    "max_window_layers",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
];

/// The `model_type`s whose layout is modelled (a config without one is read as Llama).
pub const MODEL_TYPES: &[&str] = &["llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "phi"];

struct Keys<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

impl Keys<'_> {
    fn err(&self, field: &'static str, msg: impl Into<String>) -> ModelError {
        ModelError::Field { path: self.path.into(), field, msg: msg.into() }
    }
    /// `None` for a missing key or `null`.
    fn get(&self, k: &'static str) -> Option<&Value> {
        self.map.get(k).filter(|v| !v.is_null())
    }
    fn u64(&self, k: &'static str) -> Result<Option<u64>, ModelError> {
        self.get(k).map(|v| v.as_u64().ok_or_else(|| self.err(k, "must be a non-negative integer"))).transpose()
    }
    fn bool(&self, k: &'static str) -> Result<Option<bool>, ModelError> {
        self.get(k).map(|v| v.as_bool().ok_or_else(|| self.err(k, "must be true or false"))).transpose()
    }
    fn f64(&self, k: &'static str) -> Result<Option<f64>, ModelError> {
        self.get(k).map(|v| v.as_f64().ok_or_else(|| self.err(k, "must be a number"))).transpose()
    }
    fn str(&self, k: &'static str) -> Result<Option<&str>, ModelError> {
        self.get(k).map(|v| v.as_str().ok_or_else(|| self.err(k, "must be a string"))).transpose()
    }
}

/// Rotated dimensions of a head for a `partial_rotary_factor` (`None`: all of them).
pub(crate) fn rotary_dim(factor: f64, head_dim: u64) -> Result<Option<u64>, String> {
    if !(factor > 0.0 && factor <= 1.0) {
        return Err(format!("{factor} is not in (0, 1]"));
    }
    let d = (factor * head_dim as f64).round() as u64;
    Ok((d < head_dim).then_some(d))
}

impl ModelConfig {
    /// Parses a Hugging Face `config.json`; `path` only labels errors.
    pub fn from_hf_json(text: &str, path: &str, name: &str) -> Result<Self, ModelError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| ModelError::Parse { path: path.into(), msg: e.to_string() })?;
        let map = v.as_object().ok_or_else(|| ModelError::Parse { path: path.into(), msg: "not an object".into() })?;
        if let Some(k) =
            map.keys().find(|k| !UNDERSTOOD_KEYS.contains(&k.as_str()) && !COST_NEUTRAL_KEYS.contains(&k.as_str()))
        {
            return Err(ModelError::UnknownKey { path: path.into(), key: k.clone() });
        }
        let c = Keys { map, path };
        let family = c.str("model_type")?.unwrap_or("llama");
        if !MODEL_TYPES.contains(&family) {
            return Err(c.err("model_type", format!("`{family}` is not modelled (known: {})", MODEL_TYPES.join(", "))));
        }
        let hidden = need(path, "hidden_size", c.u64("hidden_size")?)?;
        let heads = need(path, "num_attention_heads", c.u64("num_attention_heads")?)?;
        let gemma = family == "gemma2";
        let default_head = if gemma { 256 } else { hidden.checked_div(heads).unwrap_or(0) };
        let head_dim = c.u64("head_dim")?.unwrap_or(default_head);
        let name = c.str("_name_or_path")?.unwrap_or(name).to_string();
        let mut m = ModelConfig::llama(
            &name,
            hidden,
            heads,
            c.u64("num_key_value_heads")?.unwrap_or(heads),
            head_dim,
            need(path, "intermediate_size", c.u64("intermediate_size")?)?,
            need(path, "num_hidden_layers", c.u64("num_hidden_layers")?)?,
            need(path, "vocab_size", c.u64("vocab_size")?)?,
        );
        if let Some(s) = c.str("torch_dtype")? {
            m.dtype = Dtype::parse(s).ok_or_else(|| c.err("torch_dtype", format!("unsupported dtype `{s}`")))?;
        }
        let (act_key, act) = match c.str("hidden_activation")? {
            Some(a) => ("hidden_activation", Some(a)),
            None => ("hidden_act", c.str("hidden_act")?),
        };
        m.activation = match act {
            Some(a) => Act::parse(a).ok_or_else(|| c.err(act_key, format!("unsupported activation `{a}`")))?,
            None if gemma => Act::GeluTanh,
            None if family == "phi" => Act::GeluTanh,
            None => Act::Silu,
        };
        m.tie_embeddings = c.bool("tie_word_embeddings")?.unwrap_or(gemma);
        let attn_bias = c.bool("attention_bias")?.unwrap_or(false);
        let mlp_bias = c.bool("mlp_bias")?.unwrap_or(false);
        m.biases = Biases { qkv: attn_bias, o: attn_bias, mlp: mlp_bias, lm_head: false };
        match family {
            // Qwen2 has q/k/v biases by construction (no key says so).
            "qwen2" => m.biases.qkv = true,
            "qwen3" | "qwen3_moe" => m.qk_norm = true,
            "gemma2" => m.sandwich_norms = true,
            "phi" => {
                m.norm = Norm::Layer;
                m.parallel_block = true;
                m.gated_mlp = false;
                m.biases = Biases { qkv: true, o: true, mlp: true, lm_head: true };
                m.qk_norm = c.bool("qk_layernorm")?.unwrap_or(false);
            }
            _ => {}
        }
        if family != "phi" && c.get("qk_layernorm").is_some() {
            return Err(c.err("qk_layernorm", format!("not read for model_type `{family}`")));
        }
        let rotary = c.f64("partial_rotary_factor")?.unwrap_or(if family == "phi" { 0.5 } else { 1.0 });
        m.rotary_dim = rotary_dim(rotary, head_dim).map_err(|e| c.err("partial_rotary_factor", e))?;
        m.context_window = c.u64("max_position_embeddings")?;
        self::window(&c, family, &mut m)?;
        self::moe(&c, family, &mut m)?;
        m.validate(path)?;
        Ok(m)
    }
}

fn window(c: &Keys, family: &str, m: &mut ModelConfig) -> Result<(), ModelError> {
    let layers = m.num_hidden_layers;
    let size = c.u64("sliding_window")?;
    if let (Some(a), Some(b)) = (size, c.u64("sliding_window_size")?) {
        if a != b {
            return Err(c.err("sliding_window_size", format!("{b} disagrees with sliding_window {a}")));
        }
    }
    let (size, windowed) = match family {
        // Mistral's class default is a 4096 window (a key left out); `null` is none
        // (v0.2 on). Mixtral's default is none.
        "mistral" => (if c.map.contains_key("sliding_window") { size } else { Some(4096) }, layers),
        "mixtral" | "llama" => (size, layers),
        // Qwen windows only the layers from `max_window_layers` on, and only when asked.
        "qwen2" | "qwen3" | "qwen3_moe" => match c.bool("use_sliding_window")?.unwrap_or(false) {
            false => (None, 0),
            true => {
                let from = c.u64("max_window_layers")?.unwrap_or(layers).min(layers);
                (size, layers - from)
            }
        },
        // Gemma-2 alternates: layers 0, 2, 4, ... are windowed.
        "gemma2" => (size.or(Some(4096)), layers.div_ceil(2)),
        _ => (size, layers),
    };
    for k in ["use_sliding_window", "max_window_layers"] {
        if !family.starts_with("qwen") && c.get(k).is_some() {
            return Err(c.err(k, format!("not read for model_type `{family}`")));
        }
    }
    if let Some(w) = size.filter(|_| windowed > 0) {
        m.sliding_window = Some(u32::try_from(w).map_err(|_| c.err("sliding_window", "implausibly large"))?);
        m.window_layers = (windowed < layers).then_some(windowed);
    }
    Ok(())
}

fn moe(c: &Keys, family: &str, m: &mut ModelConfig) -> Result<(), ModelError> {
    let moe_keys = [
        "num_local_experts",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "decoder_sparse_step",
        "mlp_only_layers",
    ];
    let (experts, width) = match family {
        "mixtral" => (c.u64("num_local_experts")?.unwrap_or(8), m.intermediate_size),
        "qwen3_moe" => {
            if c.u64("decoder_sparse_step")?.unwrap_or(1) != 1 {
                return Err(c.err("decoder_sparse_step", "only every layer being sparse (1) is modelled"));
            }
            if c.get("mlp_only_layers").and_then(|v| v.as_array()).is_some_and(|a| !a.is_empty()) {
                return Err(c.err("mlp_only_layers", "dense layers among sparse ones are not modelled"));
            }
            (c.u64("num_experts")?.unwrap_or(128), c.u64("moe_intermediate_size")?.unwrap_or(768))
        }
        _ => {
            if let Some(k) = moe_keys.iter().find(|k| c.get(k).is_some()) {
                return Err(c.err(k, format!("not read for model_type `{family}`")));
            }
            return Ok(());
        }
    };
    let top_k = c.u64("num_experts_per_tok")?.unwrap_or(if family == "mixtral" { 2 } else { 8 });
    let small = |k: &'static str, v: u64| u32::try_from(v).map_err(|_| c.err(k, "implausibly large"));
    m.moe = Some(Moe {
        experts: small("num_experts", experts)?,
        top_k: small("num_experts_per_tok", top_k)?,
        expert_intermediate: width,
        expert_parallel: false,
    });
    Ok(())
}
