//! What the executor needs of a model beyond the simulator's shapes: RoPE and norm
//! numerics, host weights by Hugging Face name (seeded or from a checkpoint), and the
//! byte-level tokenizer.

use crate::ExecError;
use half::bf16;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use slicesched_model::{ModelConfig, Norm};
use std::collections::BTreeMap;

/// Llama-3's RoPE frequency scaling (`rope_scaling.rope_type = "llama3"`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: f64,
}

/// Numerics a forward pass needs that the simulator does not.
#[derive(Debug, Clone, PartialEq)]
pub struct Numerics {
    pub rope_theta: f64,
    /// The norms' epsilon (`rms_norm_eps`, or `layer_norm_eps` for a LayerNorm model).
    pub rms_norm_eps: f64,
    pub rope_scaling: Option<Llama3Scaling>,
    /// Positions the RoPE table covers (prompt plus output must stay under it).
    pub max_positions: usize,
    pub tie_word_embeddings: bool,
    /// A mixture-of-experts router renormalises the top-k probabilities to sum to one
    /// (Mixtral always; Qwen3-MoE's `norm_topk_prob`).
    pub moe_renormalize: bool,
    /// Gemma's: embeddings times √hidden (rounded to bf16 first, as HF's normalizer is),
    /// and RMSNorm weights stored as an offset from one (`x̂ · (1 + w)`).
    pub gemma: bool,
    /// Attention scores scaled by this^-½ instead of head_dim^-½ (Gemma-2's
    /// `query_pre_attn_scalar`).
    pub query_pre_attn_scalar: Option<f64>,
    /// `cap · tanh(s / cap)` of every scaled attention score (`attn_logit_softcapping`).
    pub attn_logit_softcap: Option<f64>,
    /// `cap · tanh(l / cap)` of every logit (`final_logit_softcapping`).
    pub final_logit_softcap: Option<f64>,
}

#[derive(Deserialize)]
struct HfNumerics {
    rope_theta: Option<f64>,
    rms_norm_eps: Option<f64>,
    layer_norm_eps: Option<f64>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    norm_topk_prob: Option<bool>,
    rope_scaling: Option<serde_json::Value>,
    model_type: Option<String>,
    query_pre_attn_scalar: Option<f64>,
    // Absent and `null` differ here: Gemma-2 caps by default, `null` turns a cap off.
    #[serde(default, deserialize_with = "present")]
    attn_logit_softcapping: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    final_logit_softcapping: Option<Option<f64>>,
}

/// `Some(None)` for a key given as `null`, `None` (the default) for an absent one.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<f64>>, D::Error> {
    Option::<f64>::deserialize(d).map(Some)
}

/// Gemma-2's default soft-caps (HF `Gemma2Config`): 50 on attention scores, 30 on logits.
const GEMMA2_CAPS: (f64, f64) = (50.0, 30.0);

impl Numerics {
    /// Defaults by family: Llama-3 gets θ = 500000 and its scaling, others θ = 10000;
    /// the sandwich-norm layout (Gemma-2's) gets Gemma-2's numerics.
    pub fn for_model(cfg: &ModelConfig) -> Self {
        let llama3 = cfg.name.contains("llama-3");
        let gemma = cfg.sandwich_norms;
        Self {
            rope_theta: if llama3 { 500_000.0 } else { 10_000.0 },
            rms_norm_eps: if gemma { 1e-6 } else { 1e-5 },
            rope_scaling: llama3.then_some(Llama3Scaling {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            }),
            max_positions: 8192,
            tie_word_embeddings: cfg.tie_embeddings,
            moe_renormalize: true,
            gemma,
            // HF's default scalar (256) is its default head dim: the plain scale.
            query_pre_attn_scalar: gemma.then_some(cfg.head_dim as f64),
            attn_logit_softcap: gemma.then_some(GEMMA2_CAPS.0),
            final_logit_softcap: gemma.then_some(GEMMA2_CAPS.1),
        }
    }

    /// Reads them from a Hugging Face `config.json` (missing fields keep the defaults).
    pub fn from_hf_json(cfg: &ModelConfig, text: &str) -> Result<Self, ExecError> {
        let h: HfNumerics = serde_json::from_str(text).map_err(|e| ExecError::Model(format!("config.json: {e}")))?;
        let mut n = Self::for_model(cfg);
        n.rope_theta = h.rope_theta.unwrap_or(n.rope_theta);
        n.rms_norm_eps = h.rms_norm_eps.or(h.layer_norm_eps).unwrap_or(n.rms_norm_eps);
        n.max_positions = h.max_position_embeddings.unwrap_or(n.max_positions).min(1 << 17);
        n.tie_word_embeddings = h.tie_word_embeddings.unwrap_or(cfg.tie_embeddings);
        n.moe_renormalize = h.norm_topk_prob.unwrap_or(true);
        // Only Gemma-2 reads these keys (the other families' HF classes ignore them).
        n.gemma = h.model_type.as_deref() == Some("gemma2");
        if n.gemma {
            n.query_pre_attn_scalar = Some(h.query_pre_attn_scalar.unwrap_or(256.0));
            n.attn_logit_softcap = h.attn_logit_softcapping.unwrap_or(Some(GEMMA2_CAPS.0));
            n.final_logit_softcap = h.final_logit_softcapping.unwrap_or(Some(GEMMA2_CAPS.1));
        } else {
            (n.query_pre_attn_scalar, n.attn_logit_softcap, n.final_logit_softcap) = (None, None, None);
        }
        if [n.query_pre_attn_scalar, n.attn_logit_softcap, n.final_logit_softcap].iter().flatten().any(|v| *v <= 0.0) {
            return Err(ExecError::Model(
                "config.json: query_pre_attn_scalar and the soft-caps must be positive".into(),
            ));
        }
        n.rope_scaling = match h.rope_scaling {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => {
                let kind = v.get("rope_type").or_else(|| v.get("type")).and_then(|t| t.as_str()).unwrap_or("");
                if kind != "llama3" {
                    return Err(ExecError::Model(format!("config.json: rope_scaling type `{kind}` is not supported")));
                }
                Some(
                    serde_json::from_value(v)
                        .map_err(|e| ExecError::Model(format!("config.json: rope_scaling: {e}")))?,
                )
            }
        };
        Ok(n)
    }

    /// Inverse frequencies of the `dim / 2` rotary pairs (`dim`: the rotated part of a
    /// head), scaled as Llama 3 does.
    pub fn inv_freq(&self, head_dim: usize) -> Vec<f64> {
        let half = head_dim / 2;
        (0..half)
            .map(|i| {
                let f = 1.0 / self.rope_theta.powf(2.0 * i as f64 / head_dim as f64);
                let Some(s) = self.rope_scaling else { return f };
                let wavelen = 2.0 * std::f64::consts::PI / f;
                let low = s.original_max_position_embeddings / s.low_freq_factor;
                let high = s.original_max_position_embeddings / s.high_freq_factor;
                if wavelen < high {
                    f
                } else if wavelen > low {
                    f / s.factor
                } else {
                    let smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor)
                        / (s.high_freq_factor - s.low_freq_factor);
                    (1.0 - smooth) * f / s.factor + smooth * f
                }
            })
            .collect()
    }

    /// `cos[pos][D/2]` then `sin[pos][D/2]` in f32, computed in f64 on the host so every
    /// backend reads the same floats.
    pub fn rope_table(&self, head_dim: usize, positions: usize) -> Vec<f32> {
        let inv = self.inv_freq(head_dim);
        let mut t = Vec::with_capacity(2 * positions * inv.len());
        for f in [f64::cos, f64::sin] {
            for p in 0..positions {
                t.extend(inv.iter().map(|w| f(p as f64 * w) as f32));
            }
        }
        t
    }
}

/// A model the executor can run.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecModel {
    pub config: ModelConfig,
    pub numerics: Numerics,
}

impl ExecModel {
    /// The model with its numerics: a preset read from a published `config.json` takes
    /// them from it (Qwen3's θ of 10⁶, phi's LayerNorm ε), others the family defaults.
    pub fn new(config: ModelConfig) -> Self {
        let numerics = slicesched_model::preset_config_json(&config.name)
            .and_then(|text| Numerics::from_hf_json(&config, text).ok())
            .unwrap_or_else(|| Numerics::for_model(&config));
        Self { config, numerics }
    }
    pub fn hidden(&self) -> usize {
        self.config.hidden_size as usize
    }
    pub fn head_dim(&self) -> usize {
        self.config.head_dim as usize
    }
    pub fn layers(&self) -> usize {
        self.config.num_hidden_layers as usize
    }
    pub fn vocab(&self) -> usize {
        self.config.vocab_size as usize
    }

    /// Dimensions of each head that RoPE rotates (0 where the model has no RoPE).
    pub fn rotary_dim(&self) -> usize {
        if self.config.alibi {
            0
        } else {
            self.config.rotary_dim.map_or(self.head_dim(), |r| r as usize)
        }
    }

    /// Keys a query of layer `l` sees at most (its sliding window), 0 for all.
    pub fn window(&self, l: usize) -> usize {
        match self.config.sliding_window {
            Some(w) if self.config.is_windowed_layer(l as u64) => w as usize,
            _ => 0,
        }
    }

    /// What multiplies q·k: head_dim^-½, or `query_pre_attn_scalar`^-½ where given.
    pub fn attn_scale(&self) -> f64 {
        1.0 / self.numerics.query_pre_attn_scalar.unwrap_or(self.head_dim() as f64).sqrt()
    }

    /// The embedding's multiplier (Gemma's √hidden, rounded to bf16 as HF's normalizer
    /// is, so that one rounding of the product matches theirs), None for the others.
    pub fn embed_scale(&self) -> Option<f32> {
        self.numerics.gemma.then(|| bf16::from_f64((self.hidden() as f64).sqrt()).to_f32())
    }

    /// Each query head's ALiBi slope (empty without ALiBi), as HF's bloom, MPT and
    /// Baichuan compute them: a geometric series from 2^(-8/n) for the largest power of
    /// two n ≤ heads, the rest interleaved from the series of 2n.
    pub fn alibi_slopes(&self) -> Vec<f64> {
        if !self.config.alibi {
            return Vec::new();
        }
        let heads = self.config.num_attention_heads as usize;
        let pow2 = 1usize << heads.max(1).ilog2();
        let base = |n: usize| 2f64.powf(-8.0 / n as f64);
        let mut s: Vec<f64> = (1..=pow2).map(|p| base(pow2).powi(p as i32)).collect();
        s.extend((0..heads - pow2).map(|i| base(2 * pow2).powi(2 * i as i32 + 1)));
        s
    }

    /// The Hugging Face names of this model's tensors.
    pub fn names(&self) -> Names {
        // phi (the parallel-block family the config parser reads) names its O projection
        // `dense`, its MLP `fc1`/`fc2` and its final norm `final_layernorm`.
        let phi = self.config.parallel_block;
        // Mixtral keeps its experts under `block_sparse_moe` as w1 (gate), w3 (up) and
        // w2 (down); Qwen3-MoE (the MoE family with query/key norms) under `mlp`.
        let mixtral = !self.config.qk_norm;
        Names {
            // Gemma-2's post-attention norm is the attention output's; its MLP has norms
            // of its own before and after.
            post_norms: if phi {
                &[]
            } else if self.config.sandwich_norms {
                &["post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
            } else {
                &["post_attention_layernorm"]
            },
            o: if phi { "self_attn.dense" } else { "self_attn.o_proj" },
            up: if phi { "mlp.fc1" } else { "mlp.up_proj" },
            down: if phi { "mlp.fc2" } else { "mlp.down_proj" },
            final_norm: if phi { "model.final_layernorm" } else { "model.norm" },
            router: if mixtral { "block_sparse_moe.gate" } else { "mlp.gate" },
            experts: if mixtral { "block_sparse_moe.experts" } else { "mlp.experts" },
            expert_projs: if mixtral { ["w1", "w3", "w2"] } else { ["gate_proj", "up_proj", "down_proj"] },
        }
    }

    /// Every tensor of a checkpoint, by Hugging Face name, with its shape: the Llama
    /// layout, plus biases, LayerNorm biases, Qwen3's query/key norms and phi's names
    /// where the config has them.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let c = &self.config;
        let (h, d, i) = (c.hidden_size as usize, c.head_dim as usize, c.intermediate_size as usize);
        let (q, kv) = (c.num_attention_heads as usize * d, c.num_key_value_heads as usize * d);
        let names = self.names();
        let ln = c.norm == Norm::Layer;
        let mut v = vec![("model.embed_tokens.weight".to_string(), vec![self.vocab(), h])];
        let linear = |v: &mut Vec<(String, Vec<usize>)>, name: String, out: usize, inp: usize, bias: bool| {
            v.push((format!("{name}.weight"), vec![out, inp]));
            if bias {
                v.push((format!("{name}.bias"), vec![out]));
            }
        };
        let norm = |v: &mut Vec<(String, Vec<usize>)>, name: String| {
            v.push((format!("{name}.weight"), vec![h]));
            if ln {
                v.push((format!("{name}.bias"), vec![h]));
            }
        };
        for l in 0..self.layers() {
            let p = format!("model.layers.{l}");
            norm(&mut v, format!("{p}.input_layernorm"));
            linear(&mut v, format!("{p}.self_attn.q_proj"), q, h, c.biases.qkv);
            linear(&mut v, format!("{p}.self_attn.k_proj"), kv, h, c.biases.qkv);
            linear(&mut v, format!("{p}.self_attn.v_proj"), kv, h, c.biases.qkv);
            if c.qk_norm {
                v.push((format!("{p}.self_attn.q_norm.weight"), vec![d]));
                v.push((format!("{p}.self_attn.k_norm.weight"), vec![d]));
            }
            linear(&mut v, format!("{p}.{}", names.o), h, q, c.biases.o);
            for n in names.post_norms {
                norm(&mut v, format!("{p}.{n}"));
            }
            if let Some(moe) = c.moe {
                let ei = moe.expert_intermediate as usize;
                v.push((format!("{p}.{}.weight", names.router), vec![moe.experts as usize, h]));
                for e in 0..moe.experts {
                    let [g, u, dn] = names.expert_projs;
                    v.push((format!("{p}.{}.{e}.{g}.weight", names.experts), vec![ei, h]));
                    v.push((format!("{p}.{}.{e}.{u}.weight", names.experts), vec![ei, h]));
                    v.push((format!("{p}.{}.{e}.{dn}.weight", names.experts), vec![h, ei]));
                }
                continue;
            }
            if c.gated_mlp {
                linear(&mut v, format!("{p}.mlp.gate_proj"), i, h, c.biases.mlp);
            }
            linear(&mut v, format!("{p}.{}", names.up), i, h, c.biases.mlp);
            linear(&mut v, format!("{p}.{}", names.down), h, i, c.biases.mlp);
        }
        norm(&mut v, names.final_norm.to_string());
        if !self.numerics.tie_word_embeddings {
            v.push(("lm_head.weight".into(), vec![self.vocab(), h]));
        }
        if c.biases.lm_head {
            v.push(("lm_head.bias".into(), vec![self.vocab()]));
        }
        v
    }
}

/// Where a model family keeps the tensors whose names differ from Llama's.
#[derive(Debug, Clone, Copy)]
pub struct Names {
    /// The norms after the input norm, in the order the layer applies them (the DAG's
    /// `PostAttnNorm` ops): none in a parallel block, three with sandwich norms.
    pub post_norms: &'static [&'static str],
    pub o: &'static str,
    pub up: &'static str,
    pub down: &'static str,
    pub final_norm: &'static str,
    /// A mixture-of-experts layer's router, its experts' prefix (`{experts}.{e}.`) and
    /// their gate, up and down projections.
    pub router: &'static str,
    pub experts: &'static str,
    pub expert_projs: [&'static str; 3],
}

/// Why the CPU executor cannot run `cfg`, if it cannot: it runs the Llama layout and the
/// departures the DAG models that change only kernels (LayerNorm, GELU, plain MLPs,
/// biases, parallel blocks, partial rotary, query/key norms, ALiBi, sliding windows on
/// every layer or on some (`ModelConfig::is_windowed_layer`), Gemma-2's sandwich norms
/// with the numerics the DAG does not carry (`Numerics::gemma` and the soft-caps), tied
/// embeddings, Mixtral's and Qwen3-MoE's mixtures of experts split across the
/// tensor-parallel group or expert-parallel: `runner/ep.rs`).
pub fn cpu_departure(cfg: &ModelConfig) -> Option<&'static str> {
    if cfg.moe.is_some() && (!cfg.gated_mlp || cfg.biases.mlp || cfg.parallel_block) {
        Some("an expert MLP other than Mixtral's and Qwen3-MoE's")
    } else if cfg.sandwich_norms && (cfg.moe.is_some() || cfg.parallel_block) {
        // The DAG norms a mixture's units' outputs one by one; no family has this.
        Some("sandwich norms around a mixture of experts or a parallel block")
    } else if cfg.qk_norm && cfg.norm == Norm::Layer {
        Some("query/key LayerNorms")
    } else {
        None
    }
}

/// A tensor on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<bf16>,
}

/// A model's weights on the host, by Hugging Face name.
#[derive(Debug, Clone, PartialEq)]
pub struct HostWeights {
    pub tensors: BTreeMap<String, HostTensor>,
}

fn name_seed(seed: u64, name: &str) -> u64 {
    // FNV-1a: each tensor's values depend on its name only, so a copy of a layer range
    // gets the same weights whatever else was generated.
    name.bytes().fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

impl HostWeights {
    /// Deterministic random weights: linear layers uniform with variance 1/fan-in (so
    /// activations keep their scale through the layers), norms near 1.
    pub fn random(model: &ExecModel, seed: u64) -> Self {
        let gen = |name: &str, shape: &[usize]| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(name_seed(seed, name));
            let n: usize = shape.iter().product();
            if name.ends_with(".bias") {
                (0..n).map(|_| bf16::from_f32(rng.random_range(-0.1..0.1))).collect()
            } else if shape.len() == 1 {
                // Gemma's norms apply 1 + w: their weights sit near zero.
                let one = if model.numerics.gemma { 0.0 } else { 1.0 };
                (0..n).map(|_| bf16::from_f32(one + rng.random_range(-0.1..0.1))).collect()
            } else {
                let a = if name.contains("embed") { 1.0 } else { (3.0 / shape[1] as f32).sqrt() };
                (0..n).map(|_| bf16::from_f32(rng.random_range(-a..a))).collect()
            }
        };
        // Each tensor has its own seed, so generating them on several threads gives the
        // same bits; an 8B model's 8 billion draws take seconds instead of half a minute.
        let shapes = model.tensor_shapes();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 16);
        let made: Vec<(usize, Vec<bf16>)> = std::thread::scope(|sc| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    sc.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some((name, shape)) = shapes.get(i) else { break mine };
                            mine.push((i, gen(name, shape)));
                        }
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().expect("a weight generator panicked")).collect()
        });
        let mut data: Vec<Option<Vec<bf16>>> = vec![None; shapes.len()];
        for (i, d) in made {
            data[i] = Some(d);
        }
        let tensors = shapes
            .into_iter()
            .zip(data)
            .map(|((name, shape), d)| (name, HostTensor { shape, data: d.expect("every tensor generated") }))
            .collect();
        Self { tensors }
    }

    pub fn get(&self, name: &str) -> Result<&HostTensor, ExecError> {
        self.tensors.get(name).ok_or_else(|| ExecError::Model(format!("weights lack tensor `{name}`")))
    }

    /// The LM head (the embedding when they are tied).
    pub fn lm_head(&self, model: &ExecModel) -> Result<&HostTensor, ExecError> {
        self.get(if model.numerics.tie_word_embeddings { "model.embed_tokens.weight" } else { "lm_head.weight" })
    }
}

/// UTF-8 bytes as token ids (the fallback when no `tokenizer.json` is given).
pub struct ByteTokenizer;

impl ByteTokenizer {
    pub fn encode(text: &str) -> Vec<i32> {
        text.bytes().map(i32::from).collect()
    }
    /// Ids under 256 are bytes; larger ids (a random model's choice) show as `<id>`.
    pub fn decode(ids: &[i32]) -> String {
        let mut bytes = Vec::new();
        for &i in ids {
            match u8::try_from(i) {
                Ok(b) => bytes.push(b),
                Err(_) => bytes.extend(format!("<{i}>").bytes()),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
