//! Model descriptions: presets, Hugging Face `config.json`, Vidur `model_config.yml`.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Errors from reading or validating a model description.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unknown model `{0}` (known presets: {known})", known = PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", "))]
    UnknownPreset(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: cannot parse: {msg}")]
    Parse { path: String, msg: String },
    #[error("{path}: field `{field}`: {msg}")]
    Field { path: String, field: &'static str, msg: String },
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
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "bfloat16" | "bf16" => Dtype::Bf16,
            "float16" | "fp16" | "half" => Dtype::Fp16,
            "float32" | "fp32" | "float" => Dtype::Fp32,
            "float8" | "fp8" | "float8_e4m3fn" => Dtype::Fp8,
            _ => return None,
        })
    }
}

/// A decoder-only transformer (Llama family layout: RMSNorm, RoPE, GQA, gated MLP).
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
    ("codellama-34b", 8192, 64, 8, 128, 22016, 48, 32000),
    // Tiny Llama-shaped models the CPU executor runs in CI in seconds (GQA, real layouts).
    ("tiny-2l", 256, 8, 2, 32, 768, 2, 512),
    ("tiny-4l", 512, 8, 4, 64, 1536, 4, 2048),
    ("tiny-3l-1k", 1024, 16, 4, 64, 2816, 3, 4096),
];

/// Other spellings users and traces use for the presets.
const ALIASES: &[(&str, &str)] = &[
    ("llama-2-7b-hf", "llama-2-7b"),
    ("llama-2-13b-hf", "llama-2-13b"),
    ("llama-2-70b-hf", "llama-2-70b"),
    ("meta-llama-3-8b", "llama-3-8b"),
    ("meta-llama-3-70b", "llama-3-70b"),
    ("mistral-7b-v0.1", "mistral-7b"),
    ("qwen2.5-7b-instruct", "qwen2.5-7b"),
    ("qwen2.5-32b-instruct", "qwen2.5-32b"),
    ("mistral-small-24b-instruct-2501", "mistral-small-24b"),
    ("mistral-small-24b-base-2501", "mistral-small-24b"),
    ("codellama-34b-hf", "codellama-34b"),
];

#[derive(Deserialize)]
struct HfConfig {
    hidden_size: Option<u64>,
    num_attention_heads: Option<u64>,
    num_key_value_heads: Option<u64>,
    intermediate_size: Option<u64>,
    num_hidden_layers: Option<u64>,
    vocab_size: Option<u64>,
    head_dim: Option<u64>,
    torch_dtype: Option<String>,
    #[serde(rename = "_name_or_path")]
    name_or_path: Option<String>,
}

#[derive(Deserialize)]
struct VidurConfig {
    num_layers: Option<u64>,
    num_q_heads: Option<u64>,
    num_kv_heads: Option<u64>,
    embedding_dim: Option<u64>,
    mlp_hidden_dim: Option<u64>,
    vocab_size: Option<u64>,
    use_gated_mlp: Option<bool>,
}

fn need<T>(path: &str, field: &'static str, v: Option<T>) -> Result<T, ModelError> {
    v.ok_or_else(|| ModelError::Field { path: path.into(), field, msg: "missing".into() })
}

impl ModelConfig {
    /// A preset by name (case-insensitive; `-hf` and vendor prefixes accepted).
    pub fn preset(name: &str) -> Result<Self, ModelError> {
        let lower = name.to_ascii_lowercase();
        let lower = lower.rsplit('/').next().unwrap_or(&lower).to_string();
        let key = ALIASES.iter().find(|(a, _)| *a == lower).map(|(_, p)| *p).unwrap_or(&lower);
        let &(n, h, q, kv, d, i, l, v) =
            PRESETS.iter().find(|p| p.0 == key).ok_or_else(|| ModelError::UnknownPreset(name.to_string()))?;
        Ok(Self {
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
        })
    }

    /// Reads a Hugging Face `config.json` or a Vidur `model_config.yml` (by extension).
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io { path: p.clone(), source })?;
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

    /// Parses a Hugging Face `config.json`; `path` only labels errors.
    pub fn from_hf_json(text: &str, path: &str, name: &str) -> Result<Self, ModelError> {
        let c: HfConfig =
            serde_json::from_str(text).map_err(|e| ModelError::Parse { path: path.into(), msg: e.to_string() })?;
        let hidden = need(path, "hidden_size", c.hidden_size)?;
        let heads = need(path, "num_attention_heads", c.num_attention_heads)?;
        let dtype = match c.torch_dtype.as_deref() {
            None => Dtype::Bf16,
            Some(s) => Dtype::parse(s).ok_or_else(|| ModelError::Field {
                path: path.into(),
                field: "torch_dtype",
                msg: format!("unsupported dtype `{s}`"),
            })?,
        };
        let cfg = Self {
            name: c.name_or_path.unwrap_or_else(|| name.to_string()),
            hidden_size: hidden,
            num_attention_heads: heads,
            num_key_value_heads: c.num_key_value_heads.unwrap_or(heads),
            head_dim: c.head_dim.unwrap_or(hidden.checked_div(heads).unwrap_or(0)),
            intermediate_size: need(path, "intermediate_size", c.intermediate_size)?,
            num_hidden_layers: need(path, "num_hidden_layers", c.num_hidden_layers)?,
            vocab_size: need(path, "vocab_size", c.vocab_size)?,
            dtype,
            gated_mlp: true,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Parses Vidur's `model_config.yml`; `path` only labels errors.
    pub fn from_vidur_yaml(text: &str, path: &str, name: &str) -> Result<Self, ModelError> {
        let c: VidurConfig =
            serde_yaml::from_str(text).map_err(|e| ModelError::Parse { path: path.into(), msg: e.to_string() })?;
        let hidden = need(path, "embedding_dim", c.embedding_dim)?;
        let heads = need(path, "num_q_heads", c.num_q_heads)?;
        let cfg = Self {
            name: name.to_string(),
            hidden_size: hidden,
            num_attention_heads: heads,
            num_key_value_heads: c.num_kv_heads.unwrap_or(heads),
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            intermediate_size: need(path, "mlp_hidden_dim", c.mlp_hidden_dim)?,
            num_hidden_layers: need(path, "num_layers", c.num_layers)?,
            vocab_size: need(path, "vocab_size", c.vocab_size)?,
            dtype: Dtype::Fp16,
            gated_mlp: c.use_gated_mlp.unwrap_or(true),
        };
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

    fn validate(&self, path: &str) -> Result<(), ModelError> {
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
        Ok(())
    }

    /// Checks that the model can be split `tp` ways (heads and MLP width divide evenly).
    pub fn check_tp(&self, tp: u32) -> Result<(), String> {
        let t = tp as u64;
        if t == 0 || !self.num_attention_heads.is_multiple_of(t) {
            return Err(format!("{} attention heads do not split {tp} ways", self.num_attention_heads));
        }
        if !self.intermediate_size.is_multiple_of(t) {
            return Err(format!("intermediate size {} does not split {tp} ways", self.intermediate_size));
        }
        Ok(())
    }

    /// Bytes of weights one tensor-parallel shard holds.
    pub fn weight_bytes_per_gpu(&self, tp: u32) -> u64 {
        let t = tp as u64;
        let b = self.dtype.bytes();
        let h = self.hidden_size;
        let kv_heads_per_gpu = self.num_key_value_heads.div_ceil(t);
        let qkv = h * (self.num_attention_heads / t + 2 * kv_heads_per_gpu) * self.head_dim;
        let o = self.num_attention_heads / t * self.head_dim * h;
        let mlp = h * self.intermediate_size / t * if self.gated_mlp { 3 } else { 2 };
        let norms = 2 * h;
        let layer = qkv + o + mlp + norms;
        let emb = self.vocab_size.div_ceil(t) * h;
        (layer * self.num_hidden_layers + 2 * emb + h) * b
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
    }
}
