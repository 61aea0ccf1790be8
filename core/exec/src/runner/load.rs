//! Loading a tenant: its weights sharded tensor-parallel across a group's devices (the
//! home holds every layer; copies hold a layer range), its paged KV cache at home.

use crate::backend::{Arena, Backend, BufId, DeviceId, Dtype, HostData, View};
use crate::model::{ExecModel, HostTensor, HostWeights};
use crate::ExecError;
use half::bf16;

/// Which part of the model a weight copy holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerRange {
    pub start: usize,
    pub end: usize,
    /// The embedding.
    pub head: bool,
    /// The final norm and the LM head.
    pub tail: bool,
}

impl LayerRange {
    pub fn all(layers: usize) -> Self {
        Self { start: 0, end: layers, head: true, tail: true }
    }
    pub fn layers(start: usize, end: usize) -> Self {
        Self { start, end, head: false, tail: false }
    }
    pub fn has_layer(&self, l: usize) -> bool {
        (self.start..self.end).contains(&l)
    }
}

/// One rank's share of heads and widths.
#[derive(Debug, Clone)]
pub struct Shard {
    pub q_heads: Vec<usize>,
    pub kv_heads: Vec<usize>,
    pub inter: std::ops::Range<usize>,
    pub vocab: std::ops::Range<usize>,
    /// The experts of a mixture this rank holds (all but under expert parallelism).
    pub experts: std::ops::Range<usize>,
}

/// The shard of rank `r` of `tp`: contiguous q heads; the kv heads they read (GQA); a
/// slice of the MLP width and of the vocabulary; under expert parallelism a contiguous
/// share of the experts, each whole.
pub fn shard(model: &ExecModel, tp: usize, r: usize) -> Result<Shard, ExecError> {
    let c = &model.config;
    c.check_tp(tp as u32).map_err(ExecError::Model)?;
    if !model.vocab().is_multiple_of(tp) {
        return Err(ExecError::Model(format!("vocabulary {} does not split {tp} ways", model.vocab())));
    }
    let (qh, kvh) = (c.num_attention_heads as usize, c.num_key_value_heads as usize);
    let group = qh / kvh;
    let q_heads: Vec<usize> = (r * qh / tp..(r + 1) * qh / tp).collect();
    let mut kv_heads: Vec<usize> = q_heads.iter().map(|h| h / group).collect();
    kv_heads.dedup();
    let v = model.vocab() / tp;
    let vocab = r * v..(r + 1) * v;
    match c.moe {
        // As the DAG has it: expert parallelism takes effect on a group of several.
        Some(m) if m.expert_parallel && tp > 1 => {
            let e = m.experts as usize / tp;
            let inter = 0..m.expert_intermediate as usize;
            Ok(Shard { q_heads, kv_heads, inter, vocab, experts: r * e..(r + 1) * e })
        }
        _ => {
            // A mixture-of-experts layer splits each expert's width as a dense MLP is.
            let i = c.moe.map_or(c.intermediate_size, |m| m.expert_intermediate) as usize / tp;
            let experts = 0..c.moe.map_or(0, |m| m.experts as usize);
            Ok(Shard { q_heads, kv_heads, inter: r * i..(r + 1) * i, vocab, experts })
        }
    }
}

/// Rows `rows` (each `width` wide) of a row-major tensor.
fn rows_of(t: &HostTensor, rows: std::ops::Range<usize>, out: &mut Vec<bf16>) {
    let w = t.shape[1];
    out.extend_from_slice(&t.data[rows.start * w..rows.end * w]);
}

/// Columns `cols` of every row of a row-major tensor.
fn cols_of(t: &HostTensor, cols: std::ops::Range<usize>) -> Vec<bf16> {
    let w = t.shape[1];
    (0..t.shape[0]).flat_map(|r| t.data[r * w + cols.start..r * w + cols.end].iter().copied()).collect()
}

/// A linear layer's weight on one rank, with its share of the bias (a row-parallel
/// layer's bias on rank 0 only, so that the all-reduce adds it once).
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    pub w: View,
    pub bias: Option<View>,
}

/// A norm's weight, and its bias for a LayerNorm.
#[derive(Debug, Clone, Copy)]
pub struct NormBufs {
    pub weight: View,
    pub bias: Option<View>,
}

/// The buffers of one layer on one rank.
#[derive(Debug, Clone)]
pub struct LayerBufs {
    pub input_norm: NormBufs,
    pub qkv: Linear,
    /// Qwen3's query and key norms (one head wide each).
    pub qk_norm: Option<(View, View)>,
    pub o: Linear,
    /// The norms after the input norm in the order the layer applies them
    /// (`Names::post_norms`): none in a parallel block (attention and MLP read the input
    /// norm), three with sandwich norms.
    pub post_norms: Vec<NormBufs>,
    /// Gate and up rows (gated MLP), or the up projection alone; None in a
    /// mixture-of-experts layer.
    pub gate_up: Option<Linear>,
    pub down: Option<Linear>,
    pub moe: Option<MoeBufs>,
}

/// A mixture-of-experts layer on one rank: the router (whole on every rank) and each
/// expert's share of its width (gate|up rows, down columns), as a dense MLP is split;
/// under expert parallelism the rank's experts whole.
#[derive(Debug, Clone)]
pub struct MoeBufs {
    pub router: View,
    /// The expert `up[0]` and `down[0]` belong to.
    pub first: usize,
    pub up: Vec<View>,
    pub down: Vec<View>,
}

/// What one rank of a weight copy holds on its device.
#[derive(Debug, Clone)]
pub struct RankWeights {
    pub device: DeviceId,
    pub shard: Shard,
    pub layers: Vec<Option<LayerBufs>>,
    pub embed: Option<View>,
    pub final_norm: Option<NormBufs>,
    pub lm_head: Option<Linear>,
    pub rope: View,
    /// The ALiBi slopes (f32) of this rank's query heads.
    pub alibi: Option<View>,
    pub bufs: Vec<BufId>,
}

fn put(
    b: &dyn Backend,
    dev: DeviceId,
    arena: Arena,
    data: Vec<bf16>,
    bufs: &mut Vec<BufId>,
) -> Result<View, ExecError> {
    let id = b.alloc(dev, arena, Dtype::Bf16, data.len())?;
    bufs.push(id);
    let v = View::whole(id, data.len());
    b.upload(v, &HostData::Bf16(data))?;
    Ok(v)
}

fn check_shape(w: &HostWeights, name: &str, want: &[usize]) -> Result<(), ExecError> {
    let t = w.get(name)?;
    if t.shape != want {
        return Err(ExecError::Model(format!("tensor `{name}` has shape {:?}, the model needs {want:?}", t.shape)));
    }
    Ok(())
}

/// Uploads one rank's shard of `range`. On failure frees what it allocated.
pub fn load_rank(
    b: &dyn Backend,
    model: &ExecModel,
    w: &HostWeights,
    tp: usize,
    r: usize,
    device: DeviceId,
    range: LayerRange,
) -> Result<RankWeights, ExecError> {
    let mut bufs = Vec::new();
    let res = load_rank_inner(b, model, w, tp, r, device, range, &mut bufs);
    if res.is_err() {
        for id in bufs {
            let _ = b.free(id);
        }
    }
    res
}

#[allow(clippy::too_many_arguments)]
fn load_rank_inner(
    b: &dyn Backend,
    model: &ExecModel,
    w: &HostWeights,
    tp: usize,
    r: usize,
    device: DeviceId,
    range: LayerRange,
    bufs: &mut Vec<BufId>,
) -> Result<RankWeights, ExecError> {
    if let Some(why) = b.refuses(&model.config) {
        return Err(ExecError::Model(why));
    }
    for (name, shape) in model.tensor_shapes() {
        check_shape(w, &name, &shape)?;
    }
    let s = shard(model, tp, r)?;
    let d = model.head_dim();
    let c = &model.config;
    let names = model.names();
    let heads = |hs: &[usize]| hs.first().map(|&h| h * d..(hs[hs.len() - 1] + 1) * d).unwrap_or(0..0);
    let up = |data: Vec<bf16>, bufs: &mut Vec<BufId>| put(b, device, Arena::Weights, data, bufs);
    let vec_of = |name: &str| w.get(name).map(|t| t.data.clone());
    // Elements `range` of a 1-D tensor (a column-parallel layer's share of its bias).
    let part = |name: &str, range: std::ops::Range<usize>| w.get(name).map(|t| t.data[range].to_vec());
    let norm = |name: &str, bufs: &mut Vec<BufId>| -> Result<NormBufs, ExecError> {
        let weight = up(vec_of(&format!("{name}.weight"))?, bufs)?;
        let bias = if c.norm == slicesched_model::Norm::Layer {
            Some(up(vec_of(&format!("{name}.bias"))?, bufs)?)
        } else {
            None
        };
        Ok(NormBufs { weight, bias })
    };
    let mut layers = vec![None; model.layers()];
    for (l, slot) in layers.iter_mut().enumerate().take(range.end).skip(range.start) {
        let p = format!("model.layers.{l}");
        let t = |n: &str| w.get(&format!("{p}.{n}"));
        let (qr, kvr) = (heads(&s.q_heads), heads(&s.kv_heads));
        let mut qkv = Vec::new();
        rows_of(t("self_attn.q_proj.weight")?, qr.clone(), &mut qkv);
        rows_of(t("self_attn.k_proj.weight")?, kvr.clone(), &mut qkv);
        rows_of(t("self_attn.v_proj.weight")?, kvr.clone(), &mut qkv);
        let qkv_bias = if c.biases.qkv {
            let mut v = part(&format!("{p}.self_attn.q_proj.bias"), qr.clone())?;
            v.extend(part(&format!("{p}.self_attn.k_proj.bias"), kvr.clone())?);
            v.extend(part(&format!("{p}.self_attn.v_proj.bias"), kvr.clone())?);
            Some(v)
        } else {
            None
        };
        // Row-parallel layers (O, down): the whole bias on rank 0, none elsewhere.
        let row_bias = |name: &str, on: bool| -> Result<Option<Vec<bf16>>, ExecError> {
            Ok(if on && r == 0 { Some(vec_of(&format!("{p}.{name}.bias"))?) } else { None })
        };
        let input_norm = norm(&format!("{p}.input_layernorm"), bufs)?;
        let qkv = Linear { w: up(qkv, bufs)?, bias: qkv_bias.map(|v| up(v, bufs)).transpose()? };
        let qk_norm = if c.qk_norm {
            let q = up(t("self_attn.q_norm.weight")?.data.clone(), bufs)?;
            Some((q, up(t("self_attn.k_norm.weight")?.data.clone(), bufs)?))
        } else {
            None
        };
        let o = Linear {
            w: up(cols_of(t(&format!("{}.weight", names.o))?, qr.clone()), bufs)?,
            bias: row_bias(names.o, c.biases.o)?.map(|v| up(v, bufs)).transpose()?,
        };
        let post_norms = names.post_norms.iter().map(|n| norm(&format!("{p}.{n}"), bufs)).collect::<Result<_, _>>()?;
        let (gate_up, down, moe) = if let Some(moe) = c.moe {
            // `shard` gave this rank its experts and its share of each one's width.
            let cols = s.inter.clone();
            let [g, u, dn] = names.expert_projs;
            let router = up(t(&format!("{}.weight", names.router))?.data.clone(), bufs)?;
            let (mut ups, mut downs) = (Vec::new(), Vec::new());
            debug_assert!(s.experts.end <= moe.experts as usize);
            for e in s.experts.clone() {
                let ex = |n: &str| t(&format!("{}.{e}.{n}.weight", names.experts));
                let mut gu = Vec::new();
                rows_of(ex(g)?, cols.clone(), &mut gu);
                rows_of(ex(u)?, cols.clone(), &mut gu);
                ups.push(up(gu, bufs)?);
                downs.push(up(cols_of(ex(dn)?, cols.clone()), bufs)?);
            }
            (None, None, Some(MoeBufs { router, first: s.experts.start, up: ups, down: downs }))
        } else {
            let mut gate_up = Vec::new();
            let mut gate_up_bias = Vec::new();
            let ups: &[&str] = if c.gated_mlp { &["mlp.gate_proj", names.up] } else { &[names.up] };
            for u in ups {
                rows_of(t(&format!("{u}.weight"))?, s.inter.clone(), &mut gate_up);
                if c.biases.mlp {
                    gate_up_bias.extend(part(&format!("{p}.{u}.bias"), s.inter.clone())?);
                }
            }
            let gate_up =
                Linear { w: up(gate_up, bufs)?, bias: if c.biases.mlp { Some(up(gate_up_bias, bufs)?) } else { None } };
            let down = Linear {
                w: up(cols_of(t(&format!("{}.weight", names.down))?, s.inter.clone()), bufs)?,
                bias: row_bias(names.down, c.biases.mlp)?.map(|v| up(v, bufs)).transpose()?,
            };
            (Some(gate_up), Some(down), None)
        };
        *slot = Some(LayerBufs { input_norm, qkv, qk_norm, o, post_norms, gate_up, down, moe });
    }
    let embed = if range.head { Some(up(vec_of("model.embed_tokens.weight")?, bufs)?) } else { None };
    let (final_norm, lm_head) = if range.tail {
        let mut lm = Vec::new();
        rows_of(w.lm_head(model)?, s.vocab.clone(), &mut lm);
        let fnorm = norm(names.final_norm, bufs)?;
        let bias = if c.biases.lm_head { Some(up(part("lm_head.bias", s.vocab.clone())?, bufs)?) } else { None };
        (Some(fnorm), Some(Linear { w: up(lm, bufs)?, bias }))
    } else {
        (None, None)
    };
    let f32s = |data: Vec<f32>, bufs: &mut Vec<BufId>| -> Result<View, ExecError> {
        let id = b.alloc(device, Arena::Weights, Dtype::F32, data.len())?;
        bufs.push(id);
        let v = View::whole(id, data.len());
        b.upload(v, &HostData::F32(data))?;
        Ok(v)
    };
    let rot = model.rotary_dim().max(2);
    let rope = f32s(model.numerics.rope_table(rot, model.numerics.max_positions), bufs)?;
    // Computed in f64 on the host, as the RoPE table is, so every backend reads the same.
    let slopes = model.alibi_slopes();
    let alibi =
        if slopes.is_empty() { None } else { Some(f32s(s.q_heads.iter().map(|&h| slopes[h] as f32).collect(), bufs)?) };
    Ok(RankWeights { device, shard: s, layers, embed, final_norm, lm_head, rope, alibi, bufs: bufs.clone() })
}
