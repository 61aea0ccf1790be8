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
}

/// The shard of rank `r` of `tp`: contiguous q heads; the kv heads they read (GQA); a
/// slice of the MLP width and of the vocabulary.
pub fn shard(model: &ExecModel, tp: usize, r: usize) -> Result<Shard, ExecError> {
    let c = &model.config;
    if let Some(what) = c.departure_from_llama() {
        return Err(ExecError::Model(format!(
            "{}: the CPU executor runs the Llama layout (RMSNorm, RoPE, gated SiLU MLP, no biases); this model has {what}",
            c.name
        )));
    }
    c.check_tp(tp as u32).map_err(ExecError::Model)?;
    if !model.vocab().is_multiple_of(tp) {
        return Err(ExecError::Model(format!("vocabulary {} does not split {tp} ways", model.vocab())));
    }
    let (qh, kvh) = (c.num_attention_heads as usize, c.num_key_value_heads as usize);
    let group = qh / kvh;
    let q_heads: Vec<usize> = (r * qh / tp..(r + 1) * qh / tp).collect();
    let mut kv_heads: Vec<usize> = q_heads.iter().map(|h| h / group).collect();
    kv_heads.dedup();
    let i = c.intermediate_size as usize / tp;
    let v = model.vocab() / tp;
    Ok(Shard { q_heads, kv_heads, inter: r * i..(r + 1) * i, vocab: r * v..(r + 1) * v })
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

/// The buffers of one layer on one rank.
#[derive(Debug, Clone)]
pub struct LayerBufs {
    pub input_norm: View,
    pub qkv: View,
    pub o: View,
    pub post_norm: View,
    pub gate_up: View,
    pub down: View,
}

/// What one rank of a weight copy holds on its device.
#[derive(Debug, Clone)]
pub struct RankWeights {
    pub device: DeviceId,
    pub shard: Shard,
    pub layers: Vec<Option<LayerBufs>>,
    pub embed: Option<View>,
    pub final_norm: Option<View>,
    pub lm_head: Option<View>,
    pub rope: View,
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
    for (name, shape) in model.tensor_shapes() {
        check_shape(w, &name, &shape)?;
    }
    let s = shard(model, tp, r)?;
    let d = model.head_dim();
    let heads = |hs: &[usize]| hs.first().map(|&h| h * d..(hs[hs.len() - 1] + 1) * d).unwrap_or(0..0);
    let mut layers = vec![None; model.layers()];
    for (l, slot) in layers.iter_mut().enumerate().take(range.end).skip(range.start) {
        let p = format!("model.layers.{l}");
        let t = |n: &str| w.get(&format!("{p}.{n}"));
        let mut qkv = Vec::new();
        rows_of(t("self_attn.q_proj.weight")?, heads(&s.q_heads), &mut qkv);
        rows_of(t("self_attn.k_proj.weight")?, heads(&s.kv_heads), &mut qkv);
        rows_of(t("self_attn.v_proj.weight")?, heads(&s.kv_heads), &mut qkv);
        let mut gate_up = Vec::new();
        rows_of(t("mlp.gate_proj.weight")?, s.inter.clone(), &mut gate_up);
        rows_of(t("mlp.up_proj.weight")?, s.inter.clone(), &mut gate_up);
        *slot = Some(LayerBufs {
            input_norm: put(b, device, Arena::Weights, t("input_layernorm.weight")?.data.clone(), bufs)?,
            qkv: put(b, device, Arena::Weights, qkv, bufs)?,
            o: put(b, device, Arena::Weights, cols_of(t("self_attn.o_proj.weight")?, heads(&s.q_heads)), bufs)?,
            post_norm: put(b, device, Arena::Weights, t("post_attention_layernorm.weight")?.data.clone(), bufs)?,
            gate_up: put(b, device, Arena::Weights, gate_up, bufs)?,
            down: put(b, device, Arena::Weights, cols_of(t("mlp.down_proj.weight")?, s.inter.clone()), bufs)?,
        });
    }
    let embed = if range.head {
        Some(put(b, device, Arena::Weights, w.get("model.embed_tokens.weight")?.data.clone(), bufs)?)
    } else {
        None
    };
    let (final_norm, lm_head) = if range.tail {
        let mut lm = Vec::new();
        rows_of(w.lm_head(model)?, s.vocab.clone(), &mut lm);
        (
            Some(put(b, device, Arena::Weights, w.get("model.norm.weight")?.data.clone(), bufs)?),
            Some(put(b, device, Arena::Weights, lm, bufs)?),
        )
    } else {
        (None, None)
    };
    let table = model.numerics.rope_table(d, model.numerics.max_positions);
    let id = b.alloc(device, Arena::Weights, Dtype::F32, table.len())?;
    bufs.push(id);
    let rope = View::whole(id, table.len());
    b.upload(rope, &HostData::F32(table))?;
    Ok(RankWeights { device, shard: s, layers, embed, final_norm, lm_head, rope, bufs: bufs.clone() })
}
