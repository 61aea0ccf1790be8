//! Hugging Face checkpoint folders: `config.json` plus `model.safetensors`, or shards
//! named by `model.safetensors.index.json`. Every tensor the model needs must be there
//! with its shape; anything else is refused with the tensor and both shapes named.

use crate::model::{ExecModel, HostTensor, HostWeights, Numerics};
use crate::ExecError;
use half::bf16;
use safetensors::{Dtype as StDtype, SafeTensors};
use slicesched_model::{Act, ModelConfig, Norm};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const SINGLE: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";

fn err(path: &Path, msg: impl Into<String>) -> ExecError {
    ExecError::Checkpoint { path: path.display().to_string(), msg: msg.into() }
}

/// Reads the model (`config.json`) and its weights from a checkpoint folder.
pub fn load(dir: &Path) -> Result<(ExecModel, HostWeights), ExecError> {
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| err(&cfg_path, e.to_string()))?;
    let name = dir.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "checkpoint".into());
    let config = ModelConfig::from_hf_json(&text, &cfg_path.display().to_string(), &name)
        .map_err(|e| err(&cfg_path, e.to_string()))?;
    let numerics = Numerics::from_hf_json(&config, &text)?;
    let model = ExecModel { config, numerics };
    let w = load_weights(dir, &model)?;
    Ok((model, w))
}

/// Reads the weights of `model` from a folder's safetensors file(s).
pub fn load_weights(dir: &Path, model: &ExecModel) -> Result<HostWeights, ExecError> {
    let files: Vec<String> = if dir.join(INDEX).exists() {
        let p = dir.join(INDEX);
        let text = std::fs::read_to_string(&p).map_err(|e| err(&p, e.to_string()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(&p, e.to_string()))?;
        let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| err(&p, "no `weight_map` object"))?;
        let mut f: Vec<String> = map.values().filter_map(|s| s.as_str().map(String::from)).collect();
        f.sort();
        f.dedup();
        f
    } else if dir.join(SINGLE).exists() {
        vec![SINGLE.into()]
    } else {
        return Err(err(dir, format!("neither {SINGLE} nor {INDEX}")));
    };
    let want: HashMap<String, Vec<usize>> = model.tensor_shapes().into_iter().collect();
    let mut tensors = BTreeMap::new();
    for f in files {
        let p = dir.join(&f);
        let bytes = std::fs::read(&p).map_err(|e| err(&p, e.to_string()))?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| err(&p, e.to_string()))?;
        for (name, view) in st.tensors() {
            let Some(shape) = want.get(&name) else { continue };
            if view.shape() != shape.as_slice() {
                return Err(err(
                    &p,
                    format!("tensor `{name}` has shape {:?}, the model's config needs {shape:?}", view.shape()),
                ));
            }
            let data = to_bf16(view.dtype(), view.data())
                .ok_or_else(|| err(&p, format!("tensor `{name}`: dtype {:?} is not bf16, f16 or f32", view.dtype())))?;
            tensors.insert(name, HostTensor { shape: shape.clone(), data });
        }
    }
    for (name, shape) in model.tensor_shapes() {
        if !tensors.contains_key(&name) {
            return Err(err(dir, format!("tensor `{name}` (shape {shape:?}) is missing")));
        }
    }
    Ok(HostWeights { tensors })
}

fn to_bf16(dtype: StDtype, b: &[u8]) -> Option<Vec<bf16>> {
    Some(match dtype {
        StDtype::BF16 => b.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect(),
        StDtype::F16 => {
            b.chunks_exact(2).map(|c| bf16::from_f32(half::f16::from_le_bytes([c[0], c[1]]).to_f32())).collect()
        }
        StDtype::F32 => {
            b.chunks_exact(4).map(|c| bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
        }
        _ => return None,
    })
}

struct Bf16View<'a>(&'a HostTensor);

impl safetensors::View for Bf16View<'_> {
    fn dtype(&self) -> StDtype {
        StDtype::BF16
    }
    fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(bytemuck::cast_slice(&self.0.data))
    }
    fn data_len(&self) -> usize {
        self.0.data.len() * 2
    }
}

/// The `config.json` of a model, as Hugging Face writes it for the family whose layout
/// the model has: `gemma2` (sandwich norms, with its soft-caps and query scale),
/// `qwen3_moe` and `mixtral` (experts, with and without query/key norms), `phi`
/// (parallel blocks), `qwen3` (query/key norms), `qwen2` (q/k/v biases alone), else
/// `llama` (with `attention_bias`, `mlp_bias`, `sliding_window`).
/// [`save`] refuses a model no family describes.
pub fn config_json(model: &ExecModel) -> String {
    let c = &model.config;
    let n = &model.numerics;
    let scaling = n.rope_scaling.map(|s| {
        serde_json::json!({"rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor, "original_max_position_embeddings": s.original_max_position_embeddings})
    });
    let (family, arch) = if c.sandwich_norms {
        ("gemma2", "Gemma2ForCausalLM")
    } else if c.moe.is_some() && c.qk_norm {
        ("qwen3_moe", "Qwen3MoeForCausalLM")
    } else if c.moe.is_some() {
        ("mixtral", "MixtralForCausalLM")
    } else if c.parallel_block {
        ("phi", "PhiForCausalLM")
    } else if c.qk_norm {
        ("qwen3", "Qwen3ForCausalLM")
    } else if c.biases.qkv && !c.biases.o && !c.biases.mlp {
        ("qwen2", "Qwen2ForCausalLM")
    } else {
        ("llama", "LlamaForCausalLM")
    };
    let act = match c.activation {
        Act::Silu => "silu",
        Act::Gelu => "gelu",
        Act::GeluTanh => "gelu_new",
    };
    let mut j = serde_json::json!({
        "architectures": [arch], "model_type": family, "_name_or_path": c.name,
        "hidden_size": c.hidden_size, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim,
        "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_hidden_layers,
        "vocab_size": c.vocab_size, "torch_dtype": "bfloat16", "rope_theta": n.rope_theta,
        "max_position_embeddings": n.max_positions, "hidden_act": act,
        "tie_word_embeddings": n.tie_word_embeddings, "rope_scaling": scaling,
    });
    let o = j.as_object_mut().expect("an object");
    let eps_key = if c.norm == Norm::Layer { "layer_norm_eps" } else { "rms_norm_eps" };
    o.insert(eps_key.into(), n.rms_norm_eps.into());
    if let Some(r) = c.rotary_dim {
        o.insert("partial_rotary_factor".into(), (r as f64 / c.head_dim as f64).into());
    }
    if let Some(m) = c.moe {
        o.insert("num_experts_per_tok".into(), m.top_k.into());
        if family == "mixtral" {
            // Mixtral's expert width is its `intermediate_size`; it always renormalises.
            o.insert("num_local_experts".into(), m.experts.into());
            o.insert("intermediate_size".into(), m.expert_intermediate.into());
        } else {
            o.insert("num_experts".into(), m.experts.into());
            o.insert("moe_intermediate_size".into(), m.expert_intermediate.into());
            o.insert("norm_topk_prob".into(), n.moe_renormalize.into());
        }
    }
    match family {
        "mixtral" => {
            o.insert("sliding_window".into(), c.sliding_window.into());
        }
        "llama" => {
            o.insert("attention_bias".into(), c.biases.qkv.into());
            o.insert("mlp_bias".into(), c.biases.mlp.into());
            o.insert("sliding_window".into(), c.sliding_window.into());
        }
        "gemma2" => {
            // Gemma-2 windows alternate layers; `sliding_window: null` would mean its
            // default of 4096, so a model without one is not this family (`describes`).
            o.insert("sliding_window".into(), c.sliding_window.into());
            o.insert("attention_bias".into(), c.biases.qkv.into());
            // Gemma-2 has no unscaled default: none is the head dim's plain scale.
            let scalar = n.query_pre_attn_scalar.unwrap_or(c.head_dim as f64);
            o.insert("query_pre_attn_scalar".into(), scalar.into());
            o.insert("attn_logit_softcapping".into(), n.attn_logit_softcap.into());
            o.insert("final_logit_softcapping".into(), n.final_logit_softcap.into());
            if c.activation == Act::GeluTanh {
                o.insert("hidden_activation".into(), "gelu_pytorch_tanh".into());
            }
        }
        "qwen2" | "qwen3" | "qwen3_moe" => {
            o.insert("use_sliding_window".into(), c.sliding_window.is_some().into());
            o.insert("sliding_window".into(), c.sliding_window.into());
            let from = c.num_hidden_layers - c.window_layers.unwrap_or(c.num_hidden_layers);
            o.insert("max_window_layers".into(), from.into());
        }
        _ => {}
    }
    serde_json::to_string_pretty(&j).expect("plain JSON")
}

/// Whether `config.json` text describes `model`'s layout (what a reload would run).
fn describes(text: &str, model: &ExecModel) -> bool {
    let Ok(back) = ModelConfig::from_hf_json(text, "config.json", &model.config.name) else { return false };
    let c = &model.config;
    (back.norm, back.activation, back.biases, back.gated_mlp, back.parallel_block, back.rotary_dim)
        == (c.norm, c.activation, c.biases, c.gated_mlp, c.parallel_block, c.rotary_dim)
        && (back.qk_norm, back.sliding_window, back.window_layers, back.alibi, back.sandwich_norms)
            == (c.qk_norm, c.sliding_window, c.window_layers, c.alibi, c.sandwich_norms)
        // Expert parallelism is how a group serves the experts, not the checkpoint's.
        && back.moe.map(|m| (m.experts, m.top_k, m.expert_intermediate))
            == c.moe.map(|m| (m.experts, m.top_k, m.expert_intermediate))
        && (c.moe.is_none() || c.qk_norm || model.numerics.moe_renormalize)
        // A reload reads Gemma's numerics from the family alone.
        && model.numerics.gemma == c.sandwich_norms
}

fn write_atomic(path: &Path, f: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), ExecError> {
    let tmp = path.with_extension("partial");
    f(&tmp).map_err(|e| err(path, e))?;
    std::fs::rename(&tmp, path).map_err(|e| err(path, e.to_string()))
}

/// Writes `config.json` and the weights, in shards of at most `shard_bytes` with an
/// index when given (else one file). Each file is written whole or not at all.
pub fn save(dir: &Path, model: &ExecModel, w: &HostWeights, shard_bytes: Option<u64>) -> Result<(), ExecError> {
    let config = config_json(model);
    if !describes(&config, model) {
        return Err(err(
            dir,
            format!("{}: no Hugging Face model family (llama, mistral-style windows, qwen2, qwen3, phi, mixtral, qwen3_moe, gemma2) has this layout; ALiBi has none here", model.config.name),
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e.to_string()))?;
    let mut shards: Vec<Vec<(&String, &HostTensor)>> = vec![Vec::new()];
    let mut size = 0u64;
    for (name, t) in &w.tensors {
        let b = t.data.len() as u64 * 2;
        if shard_bytes.is_some_and(|max| size + b > max && !shards.last().expect("one").is_empty()) {
            shards.push(Vec::new());
            size = 0;
        }
        size += b;
        shards.last_mut().expect("one").push((name, t));
    }
    let n = shards.len();
    let mut map = serde_json::Map::new();
    for (i, s) in shards.iter().enumerate() {
        let file =
            if shard_bytes.is_some() { format!("model-{:05}-of-{n:05}.safetensors", i + 1) } else { SINGLE.into() };
        let p = dir.join(&file);
        write_atomic(&p, |tmp| {
            safetensors::serialize_to_file(s.iter().map(|(k, t)| ((*k).clone(), Bf16View(t))), &None, tmp)
                .map_err(|e| e.to_string())
        })?;
        for (k, _) in s {
            map.insert((*k).clone(), serde_json::Value::String(file.clone()));
        }
    }
    if shard_bytes.is_some() {
        let total: u64 = w.tensors.values().map(|t| t.data.len() as u64 * 2).sum();
        let idx = serde_json::json!({"metadata": {"total_size": total}, "weight_map": map});
        write_atomic(&dir.join(INDEX), |tmp| std::fs::write(tmp, idx.to_string()).map_err(|e| e.to_string()))?;
    }
    write_atomic(&dir.join("config.json"), |tmp| std::fs::write(tmp, config).map_err(|e| e.to_string()))
}
