//! One op of one rank: the kernels a per-rank op of the iteration DAG launches (norms,
//! GEMMs, RoPE, cache write + attention, activation, the LM head), with its workspace.

use super::iter::{Build, Loc, OpRec, Part};
use super::load::{Linear, NormBufs};
use super::Tenant;
use crate::backend::{Dtype, Event, StreamId, View};
use crate::kernels::{Heads, Kernel};
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
    // RMSNorm, or LayerNorm with its bias.
    let norm = |x: View, nb: NormBufs, out: View, rows: usize| match nb.bias {
        Some(bias) => Kernel::LayerNorm { x, weight: nb.weight, bias, out, rows, width: h, eps },
        None => Kernel::RmsNorm { x, weight: nb.weight, out, rows, width: h, eps },
    };
    let out_ev = match kind {
        OpKind::Embedding => {
            let out = bld.alloc(dev, Dtype::Bf16, tokens * h)?;
            let ids = bld.meta(dev, Part::Ids)?;
            let table = rank.embed.ok_or_else(|| ExecError::Placement("embedding not on this group".into()))?;
            (out, launch(rec, Kernel::Embedding { ids, table, out, hidden: h }, waits)?)
        }
        OpKind::InputNorm | OpKind::PostAttnNorm => {
            let l = lw()?;
            let nb = if kind == OpKind::InputNorm {
                l.input_norm
            } else {
                l.post_norm.ok_or_else(|| ExecError::Launch("a post-attention norm in a parallel block".into()))?
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
            // Query/key norms carry weights: the op runs where its layer is (`check_op`).
            if let Some((q_weight, k_weight)) = if cfg.qk_norm { lw()?.qk_norm } else { None } {
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
                window: t.model.window(),
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
            let (y, k) = gemm(bld, ins[0].view, lw()?.gate_up, n, h, Dtype::Bf16, tokens)?;
            (y, launch(rec, k, waits)?)
        }
        OpKind::Activation => {
            let out = bld.alloc(dev, Dtype::Bf16, tokens * inter)?;
            let x = ins[0].view;
            let k = match (cfg.activation, cfg.gated_mlp) {
                (slicesched_model::Act::Silu, true) => Kernel::SiluMul { x, out, rows: tokens, inter },
                (act, gated) => Kernel::Act { x, out, rows: tokens, inter, act, gated },
            };
            (out, launch(rec, k, waits)?)
        }
        OpKind::DownProj => {
            let (y, k) = gemm(bld, ins[0].view, lw()?.down, h, inter, Dtype::Bf16, tokens)?;
            (y, launch(rec, k, waits)?)
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
            (y, launch(rec, k, waits)?)
        }
        OpKind::AllReduce | OpKind::AllGather | OpKind::Transfer => {
            return Err(ExecError::Launch(format!("{} is not a per-rank op", kind.name())))
        }
        // `Backend::refuses` stops mixture-of-experts models before anything is loaded.
        OpKind::Router | OpKind::ExpertUp | OpKind::ExpertDown | OpKind::AllToAll => {
            return Err(ExecError::Launch(format!("{}: the CPU executor does not run mixture-of-experts", kind.name())))
        }
    };
    Ok(out_ev)
}
