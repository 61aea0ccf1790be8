//! One op of one rank: the kernels a per-rank op of the iteration DAG launches (norms,
//! GEMMs, RoPE, cache write + attention, activation, the LM head), with its workspace.

use super::iter::{Build, Loc, OpRec, Part};
use super::load::{LayerBufs, Linear, MoeBufs, NormBufs};
use super::Tenant;
use crate::backend::{Dtype, Event, StreamId, View};
use crate::kernels::{Heads, Kernel, Scores};
use crate::ExecError;
use slicesched_model::OpKind;

#[allow(clippy::too_many_arguments)]
pub(super) fn launch_op(
    t: &Tenant,
    r: usize,
    rank: &super::RankWeights,
    kind: OpKind,
    layer: Option<usize>,
    ins: &[Loc],
    waits: &[Event],
    s: StreamId,
    bld: &mut Build,
    rec: &mut OpRec,
    (tokens, sampled, h, eps, heads): (usize, usize, usize, f32, Heads),
    unit: (usize, usize),
) -> Result<(View, Event), ExecError> {
    let b = bld.b;
    let dev = rank.device;
    let lw = || {
        layer
            .and_then(|l| rank.layers[l].as_ref())
            .ok_or_else(|| ExecError::Placement(format!("{}: layer weights missing", kind.name())))
    };
    let inter = rank.shard.inter.len();
    let launch = |rec: &mut OpRec, k: Kernel, w: &[Event]| -> Result<Event, ExecError> {
        let ev = b.launch(s, k, w)?;
        rec.kernels.push(ev.clone());
        Ok(ev)
    };
    let gemm = |bld: &mut Build,
                x: View,
                w: Linear,
                n: usize,
                k: usize,
                dtype: Dtype,
                m: usize|
     -> Result<(View, Kernel), ExecError> {
        let y = bld.alloc(dev, dtype, m * n)?;
        Ok((y, Kernel::Gemm { x, w: w.w, bias: w.bias, y, m, n, k }))
    };
    let cfg = &t.model.config;
    let n = &t.model.numerics;
    // RMSNorm (Gemma's applies 1 + w), or LayerNorm with its bias.
    let norm = |x: View, nb: NormBufs, out: View, rows: usize| match nb.bias {
        Some(bias) => Kernel::LayerNorm { x, weight: nb.weight, bias, out, rows, width: h, eps },
        None => Kernel::RmsNorm { x, weight: nb.weight, out, rows, width: h, eps, unit_offset: n.gemma },
    };
    let out_ev = match kind {
        OpKind::Embedding => {
            let out = bld.alloc(dev, Dtype::Bf16, tokens * h)?;
            let ids = bld.meta(dev, Part::Ids)?;
            let table = rank.embed.ok_or_else(|| ExecError::Placement("embedding not on this group".into()))?;
            let scale = t.model.embed_scale();
            (out, launch(rec, Kernel::Embedding { ids, table, out, hidden: h, scale }, waits)?)
        }
        OpKind::InputNorm | OpKind::PostAttnNorm => {
            let l = lw()?;
            let nb = if kind == OpKind::InputNorm {
                l.input_norm
            } else {
                // `unit`: which of the layer's post-attention norms this op is.
                *l.post_norms.get(unit.0).ok_or_else(|| {
                    ExecError::Launch(format!("post-attention norm {} of a layer with {}", unit.0, l.post_norms.len()))
                })?
            };
            let out = bld.alloc(dev, Dtype::Bf16, tokens * h)?;
            (out, launch(rec, norm(ins[0].view, nb, out, tokens), waits)?)
        }
        OpKind::QkvProj => {
            let (y, k) = gemm(bld, ins[0].view, lw()?.qkv, heads.row(), h, Dtype::Bf16, tokens)?;
            (y, launch(rec, k, waits)?)
        }
        OpKind::Rope => {
            let out = bld.alloc(dev, Dtype::Bf16, tokens * heads.row())?;
            let positions = bld.meta(dev, Part::Positions)?;
            let mut last = b.copy(s, ins[0].view, out, waits)?;
            rec.kernels.push(last.clone());
            // Query/key norms carry weights: the op runs where its layer is (`check_op`);
            // without them it needs none, and runs on any group.
            let qk_norm = if cfg.qk_norm { lw()?.qk_norm } else { None };
            if let Some((q_weight, k_weight)) = qk_norm {
                let k = Kernel::HeadNorm { qkv: out, q_weight, k_weight, tokens, heads, eps };
                last = launch(rec, k, &[last])?;
            }
            let rotary = t.model.rotary_dim();
            if rotary > 0 {
                let k = Kernel::Rope {
                    qkv: out,
                    positions,
                    table: rank.rope,
                    tokens,
                    heads,
                    max_pos: t.model.numerics.max_positions,
                    rotary,
                };
                last = launch(rec, k, &[last])?;
            }
            (out, last)
        }
        OpKind::Attention => {
            let l = layer.expect("attention is in a layer");
            if t.kv[r].device != dev {
                return Err(ExecError::Placement("attention away from its KV cache".into()));
            }
            // Everything an op's kernels need is allocated before its first launch, so
            // they run back to back instead of the stream sleeping between them.
            let cache = t.kv[r].caches[l];
            let slots = bld.meta(dev, Part::Slots)?;
            let qkv = ins[0].view;
            let out = bld.alloc(dev, Dtype::Bf16, tokens * heads.q * heads.dim)?;
            let seqs = bld.meta.parts[Part::Ctx as usize].1;
            let max_blocks = bld.meta.parts[Part::Tables as usize].1 / seqs.max(1);
            let k = Kernel::Attention {
                qkv,
                cache,
                block_tables: bld.meta(dev, Part::Tables)?,
                q_start: bld.meta(dev, Part::QStart)?,
                ctx_lens: bld.meta(dev, Part::Ctx)?,
                out,
                seqs,
                max_blocks,
                heads,
                window: t.model.window(l),
                scores: Scores {
                    scale: n.query_pre_attn_scalar.map(|_| t.model.attn_scale() as f32),
                    softcap: n.attn_logit_softcap.map(|c| c as f32),
                    alibi: rank.alibi,
                },
            };
            let cw = launch(rec, Kernel::CacheWrite { qkv, slots, cache, tokens, heads }, waits)?;
            (out, launch(rec, k, &[cw])?)
        }
        OpKind::OProj => {
            let (y, k) = gemm(bld, ins[0].view, lw()?.o, h, heads.q * heads.dim, Dtype::Bf16, tokens)?;
            (y, launch(rec, k, waits)?)
        }
        OpKind::ResidualAdd => {
            let out = bld.alloc(dev, Dtype::Bf16, tokens * h)?;
            let k = match ins {
                [a, b] => Kernel::Add { a: a.view, b: b.view, out },
                // A parallel block joins attention, MLP and residual in one add.
                _ => Kernel::Sum { parts: ins.iter().map(|l| l.view).collect(), out },
            };
            (out, launch(rec, k, waits)?)
        }
        OpKind::GateUpProj => {
            let n = if cfg.gated_mlp { 2 * inter } else { inter };
            let w = lw()?.gate_up.ok_or_else(|| ExecError::Launch("a dense MLP op in an expert layer".into()))?;
            let (y, k) = gemm(bld, ins[0].view, w, n, h, Dtype::Bf16, tokens)?;
            (y, launch(rec, k, waits)?)
        }
        OpKind::Activation => {
            // An expert unit's activation covers every (token, slot) row of the routing.
            let rows = cfg.moe.map_or(tokens, |m| tokens * m.top_k as usize);
            let out = bld.alloc(dev, Dtype::Bf16, rows * inter)?;
            let x = ins[0].view;
            let k = match (cfg.activation, cfg.gated_mlp) {
                (slicesched_model::Act::Silu, true) => Kernel::SiluMul { x, out, rows, inter },
                (act, gated) => Kernel::Act { x, out, rows, inter, act, gated },
            };
            (out, launch(rec, k, waits)?)
        }
        OpKind::DownProj => {
            let w = lw()?.down.ok_or_else(|| ExecError::Launch("a dense MLP op in an expert layer".into()))?;
            let (y, k) = gemm(bld, ins[0].view, w, h, inter, Dtype::Bf16, tokens)?;
            (y, launch(rec, k, waits)?)
        }
        OpKind::Router => {
            let (moe, bufs) = moe_of(cfg, lw()?)?;
            let (experts, k) = (moe.experts as usize, moe.top_k as usize);
            let logits = bld.alloc(dev, Dtype::F32, tokens * experts)?;
            let out = bld.alloc(dev, Dtype::F32, tokens * 2 * k)?;
            let g = Kernel::Gemm { x: ins[0].view, w: bufs.router, bias: None, y: logits, m: tokens, n: experts, k: h };
            let ge = launch(rec, g, waits)?;
            let renormalize = t.model.numerics.moe_renormalize;
            (out, launch(rec, Kernel::TopK { logits, out, rows: tokens, experts, k, renormalize }, &[ge])?)
        }
        OpKind::ExpertUp | OpKind::ExpertDown => {
            let (moe, bufs) = moe_of(cfg, lw()?)?;
            let k = moe.top_k as usize;
            // The DAG's units follow a balanced routing of this batch's token count; the
            // real routing may reach any of the rank's experts, so the units present
            // share them all.
            let (j, p) = unit;
            let e = bufs.up.len();
            let (lo, hi) = (j * e / p.max(1), (j + 1) * e / p.max(1));
            let first = bufs.first + lo;
            let (x, routing) = (ins[0].view, ins[1].view);
            let kern = if kind == OpKind::ExpertUp {
                let out = bld.alloc(dev, Dtype::Bf16, tokens * k * 2 * inter)?;
                let ws = bufs.up[lo..hi].to_vec();
                (out, Kernel::ExpertUp { x, routing, ws, first, rows: tokens, k, n: 2 * inter, hidden: h, out })
            } else {
                let out = bld.alloc(dev, Dtype::Bf16, tokens * h)?;
                let ws = bufs.down[lo..hi].to_vec();
                (out, Kernel::ExpertDown { x, routing, ws, first, rows: tokens, k, inter, hidden: h, out })
            };
            (kern.0, launch(rec, kern.1, waits)?)
        }
        OpKind::FinalNorm => {
            let rows = bld.meta(dev, Part::Sampled)?;
            let g = bld.alloc(dev, Dtype::Bf16, sampled * h)?;
            let out = bld.alloc(dev, Dtype::Bf16, sampled * h)?;
            let nb = rank.final_norm.ok_or_else(|| ExecError::Placement("final norm not on this group".into()))?;
            let ge = launch(rec, Kernel::GatherRows { x: ins[0].view, rows, out: g, width: h }, waits)?;
            (out, launch(rec, norm(g, nb, out, sampled), &[ge])?)
        }
        OpKind::LmHead => {
            let w = rank.lm_head.ok_or_else(|| ExecError::Placement("LM head not on this group".into()))?;
            let (y, k) = gemm(bld, ins[0].view, w, rank.shard.vocab.len(), h, Dtype::F32, sampled)?;
            let ev = launch(rec, k, waits)?;
            match n.final_logit_softcap {
                // Elementwise: each rank caps its shard of the vocabulary.
                Some(cap) => (y, launch(rec, Kernel::Softcap { x: y, cap: cap as f32 }, &[ev])?),
                None => (y, ev),
            }
        }
        OpKind::AllReduce | OpKind::AllGather | OpKind::AllToAll | OpKind::Transfer => {
            return Err(ExecError::Launch(format!("{} is not a per-rank op", kind.name())))
        }
    };
    Ok(out_ev)
}

/// The layer's experts, and the model's mixture.
fn moe_of<'a>(
    cfg: &slicesched_model::ModelConfig,
    l: &'a LayerBufs,
) -> Result<(slicesched_model::Moe, &'a MoeBufs), ExecError> {
    match (cfg.moe, l.moe.as_ref()) {
        (Some(m), Some(b)) => Ok((m, b)),
        _ => Err(ExecError::Launch("an expert op in a dense layer".into())),
    }
}
