//! The CPU kernels: f32 math on bf16 storage, GEMMs in one summation order (`gemm.rs`).

// Kernels index several tensors by the same token or row: plain index loops read best.
#![allow(clippy::needless_range_loop)]

use super::Data;
use crate::backend::{BufId, View};
use crate::kernels::{Heads, Kernel};
use half::bf16;

/// The buffers a kernel reads, locked for the launch.
pub(crate) struct Ins<'a> {
    pub bufs: Vec<(BufId, &'a Data)>,
}

impl<'a> Ins<'a> {
    fn get(&self, v: View) -> Result<&'a Data, String> {
        self.bufs.iter().find(|b| b.0 == v.buf).map(|b| b.1).ok_or_else(|| format!("buffer {:?} not locked", v.buf))
    }
    fn bf16(&self, v: View) -> Result<&'a [bf16], String> {
        match self.get(v)? {
            Data::Bf16(d) => slice(d, v),
            d => Err(format!("buffer {:?} holds {}, kernel wants bf16", v.buf, d.kind())),
        }
    }
    fn f32(&self, v: View) -> Result<&'a [f32], String> {
        match self.get(v)? {
            Data::F32(d) => slice(d, v),
            d => Err(format!("buffer {:?} holds {}, kernel wants f32", v.buf, d.kind())),
        }
    }
    fn i32(&self, v: View) -> Result<&'a [i32], String> {
        match self.get(v)? {
            Data::I32(d) => slice(d, v),
            d => Err(format!("buffer {:?} holds {}, kernel wants i32", v.buf, d.kind())),
        }
    }
}

fn slice<T>(d: &[T], v: View) -> Result<&[T], String> {
    d.get(v.offset..v.offset + v.len).ok_or_else(|| format!("view {v:?} outside a buffer of {}", d.len()))
}

fn slice_mut<T>(d: &mut [T], v: View) -> Result<&mut [T], String> {
    let n = d.len();
    d.get_mut(v.offset..v.offset + v.len).ok_or_else(|| format!("view {v:?} outside a buffer of {n}"))
}

fn out_bf16(d: &mut Data, v: View) -> Result<&mut [bf16], String> {
    match d {
        Data::Bf16(d) => slice_mut(d, v),
        d => Err(format!("output buffer holds {}, kernel writes bf16", d.kind())),
    }
}

fn out_f32(d: &mut Data, v: View) -> Result<&mut [f32], String> {
    match d {
        Data::F32(d) => slice_mut(d, v),
        d => Err(format!("output buffer holds {}, kernel writes f32", d.kind())),
    }
}

/// Each expert's GEMM over the (token, slot) rows a [`Kernel::TopK`] `route` sends it:
/// `ws[i]` is expert `first + i`'s `[n][k_in]` weights, `row(t, slot)` an input row;
/// `emit(t, slot, y)` takes each output row, in expert then token order.
#[allow(clippy::too_many_arguments)]
fn per_expert<'x>(
    ins: &Ins,
    ws: &[View],
    route: &[f32],
    (first, rows, k): (usize, usize, usize),
    (n, k_in): (usize, usize),
    row: impl Fn(usize, usize) -> &'x [bf16],
    s: &mut Scratch,
    mut emit: impl FnMut(usize, usize, &[f32]),
) -> Result<(), String> {
    need("expert routing", route.len(), rows * 2 * k)?;
    // Every expert's (token, slot) rows in one pass over the routing, in token order.
    let mut slots: Vec<Vec<(usize, usize)>> = vec![Vec::new(); ws.len()];
    for t in 0..rows {
        for slot in 0..k {
            let e = route[t * 2 * k + slot] as usize;
            if let Some(v) = e.checked_sub(first).and_then(|i| slots.get_mut(i)) {
                v.push((t, slot));
            }
        }
    }
    for (w, slots) in ws.iter().zip(&slots) {
        let w = ins.bf16(*w)?;
        need("expert weight", w.len(), n * k_in)?;
        if slots.is_empty() {
            continue;
        }
        let mut xs = Vec::with_capacity(slots.len() * k_in);
        for &(t, slot) in slots {
            xs.extend_from_slice(row(t, slot));
        }
        matmul(&xs, w, (slots.len(), n, k_in), s);
        for (j, &(t, slot)) in slots.iter().enumerate() {
            emit(t, slot, &s.y[j * n..(j + 1) * n]);
        }
    }
    Ok(())
}

pub(super) fn need(what: &str, have: usize, want: usize) -> Result<(), String> {
    if have < want {
        return Err(format!("{what}: view of {have} elements, shape needs {want}"));
    }
    Ok(())
}

/// Per-thread f32 scratch for GEMMs and attention; its growth is charged to the ledger.
#[derive(Default)]
pub(crate) struct Scratch {
    pub x: Vec<f32>,
    pub w: Vec<f32>,
    pub y: Vec<f32>,
}

impl Scratch {
    pub fn bytes(&self) -> u64 {
        4 * (self.x.capacity() + self.w.capacity() + self.y.capacity()) as u64
    }
}

pub(super) fn widen(src: &[bf16], dst: &mut Vec<f32>) {
    dst.clear();
    dst.extend(src.iter().map(|v| v.to_f32()));
}

pub(crate) fn run(k: &Kernel, ins: &Ins, out: &mut Data, s: &mut Scratch) -> Result<(), String> {
    match k {
        Kernel::Embedding { ids, table, out: o, hidden, scale } => {
            let (ids, table) = (ins.i32(*ids)?, ins.bf16(*table)?);
            let dst = out_bf16(out, *o)?;
            need("embedding out", dst.len(), ids.len() * hidden)?;
            let vocab = table.len() / hidden;
            for (t, &id) in ids.iter().enumerate() {
                if id < 0 || id as usize >= vocab {
                    return Err(format!("token id {id} outside the vocabulary of {vocab}"));
                }
                let (src, row) = (&table[id as usize * hidden..][..*hidden], &mut dst[t * hidden..(t + 1) * hidden]);
                match scale {
                    None => row.copy_from_slice(src),
                    Some(k) => row.iter_mut().zip(src).for_each(|(o, e)| *o = bf16::from_f32(e.to_f32() * k)),
                }
            }
        }
        Kernel::RmsNorm { x, weight, out: o, rows, width, eps, unit_offset } => {
            let (x, w) = (ins.bf16(*x)?, ins.bf16(*weight)?);
            let dst = out_bf16(out, *o)?;
            need("rmsnorm x", x.len(), rows * width)?;
            need("rmsnorm out", dst.len(), rows * width)?;
            need("rmsnorm weight", w.len(), *width)?;
            let one = if *unit_offset { 1.0 } else { 0.0 };
            for r in 0..*rows {
                let row = &x[r * width..(r + 1) * width];
                let ms = row.iter().map(|v| v.to_f32() * v.to_f32()).sum::<f32>() / *width as f32;
                let inv = 1.0 / (ms + eps).sqrt();
                for i in 0..*width {
                    dst[r * width + i] = bf16::from_f32(row[i].to_f32() * inv * (one + w[i].to_f32()));
                }
            }
        }
        Kernel::GatherRows { x, rows, out: o, width } => {
            let (x, rows) = (ins.bf16(*x)?, ins.i32(*rows)?);
            let dst = out_bf16(out, *o)?;
            need("gather out", dst.len(), rows.len() * width)?;
            for (i, &r) in rows.iter().enumerate() {
                let r = r as usize;
                need("gather x", x.len(), (r + 1) * width)?;
                dst[i * width..(i + 1) * width].copy_from_slice(&x[r * width..(r + 1) * width]);
            }
        }
        Kernel::Gemm { x, w, bias, y, m, n, k } => {
            let bias = bias.map(|b| ins.bf16(b)).transpose()?;
            gemm(ins.bf16(*x)?, ins.bf16(*w)?, bias, out, *y, (*m, *n, *k), s)?
        }
        Kernel::LayerNorm { x, weight, bias, out: o, rows, width, eps } => {
            let (x, w, b) = (ins.bf16(*x)?, ins.bf16(*weight)?, ins.bf16(*bias)?);
            let dst = out_bf16(out, *o)?;
            need("layernorm x", x.len(), rows * width)?;
            need("layernorm out", dst.len(), rows * width)?;
            need("layernorm weight", w.len().min(b.len()), *width)?;
            for r in 0..*rows {
                let row = &x[r * width..(r + 1) * width];
                let mean = row.iter().map(|v| v.to_f32()).sum::<f32>() / *width as f32;
                let var = row.iter().map(|v| (v.to_f32() - mean).powi(2)).sum::<f32>() / *width as f32;
                let inv = 1.0 / (var + eps).sqrt();
                for i in 0..*width {
                    dst[r * width + i] = bf16::from_f32((row[i].to_f32() - mean) * inv * w[i].to_f32() + b[i].to_f32());
                }
            }
        }
        Kernel::HeadNorm { qkv, q_weight, k_weight, tokens, heads, eps } => {
            let (qw, kw) = (ins.bf16(*q_weight)?, ins.bf16(*k_weight)?);
            let dst = out_bf16(out, *qkv)?;
            let d = heads.dim;
            need("head_norm qkv", dst.len(), tokens * heads.row())?;
            need("head_norm weights", qw.len().min(kw.len()), d)?;
            for t in 0..*tokens {
                for head in 0..heads.q + heads.kv {
                    let w = if head < heads.q { qw } else { kw };
                    let v = &mut dst[t * heads.row() + head * d..t * heads.row() + (head + 1) * d];
                    let ms = v.iter().map(|x| x.to_f32() * x.to_f32()).sum::<f32>() / d as f32;
                    let inv = 1.0 / (ms + eps).sqrt();
                    for i in 0..d {
                        v[i] = bf16::from_f32(v[i].to_f32() * inv * w[i].to_f32());
                    }
                }
            }
        }
        Kernel::Rope { positions, table, tokens, heads, max_pos, qkv, rotary } => {
            let (pos, tab) = (ins.i32(*positions)?, ins.f32(*table)?);
            let dst = out_bf16(out, *qkv)?;
            rope(dst, pos, tab, *tokens, *heads, *max_pos, *rotary)?;
        }
        Kernel::CacheWrite { qkv, slots, cache, tokens, heads } => {
            let (src, slots) = (ins.bf16(*qkv)?, ins.i32(*slots)?);
            let dst = out_bf16(out, *cache)?;
            let (row, w) = (heads.row(), heads.kv * heads.dim);
            let half = dst.len() / 2;
            need("cache_write qkv", src.len(), tokens * row)?;
            for t in 0..*tokens {
                if slots[t] < 0 {
                    continue;
                }
                let at = slots[t] as usize * w;
                if at + w > half {
                    return Err(format!("KV slot {} outside a cache of {} slots", slots[t], half / w));
                }
                let k0 = t * row + heads.q * heads.dim;
                dst[at..at + w].copy_from_slice(&src[k0..k0 + w]);
                dst[half + at..half + at + w].copy_from_slice(&src[k0 + w..k0 + 2 * w]);
            }
        }
        Kernel::Attention {
            qkv,
            cache,
            block_tables,
            q_start,
            ctx_lens,
            out: o,
            seqs,
            max_blocks,
            heads,
            window,
            scores,
        } => {
            let a = super::attention::AttnArgs {
                qkv: ins.bf16(*qkv)?,
                cache: ins.bf16(*cache)?,
                tables: ins.i32(*block_tables)?,
                q_start: ins.i32(*q_start)?,
                ctx: ins.i32(*ctx_lens)?,
                seqs: *seqs,
                max_blocks: *max_blocks,
                h: *heads,
                window: *window,
                scale: scores.scale.unwrap_or(1.0 / (heads.dim as f32).sqrt()),
                softcap: scores.softcap,
                slopes: scores.alibi.map(|v| ins.f32(v)).transpose()?,
            };
            super::attention::attention(&a, out_bf16(out, *o)?, s)?;
        }
        Kernel::Add { a, b, out: o } => {
            let (a, b) = (ins.bf16(*a)?, ins.bf16(*b)?);
            let dst = out_bf16(out, *o)?;
            need("add", a.len().min(b.len()), dst.len())?;
            for i in 0..dst.len() {
                dst[i] = bf16::from_f32(a[i].to_f32() + b[i].to_f32());
            }
        }
        Kernel::SiluMul { x, out: o, rows, inter } => {
            let x = ins.bf16(*x)?;
            let dst = out_bf16(out, *o)?;
            need("silu_mul x", x.len(), rows * 2 * inter)?;
            need("silu_mul out", dst.len(), rows * inter)?;
            for r in 0..*rows {
                for i in 0..*inter {
                    let g = x[r * 2 * inter + i].to_f32();
                    let u = x[r * 2 * inter + inter + i].to_f32();
                    dst[r * inter + i] = bf16::from_f32(g / (1.0 + (-g).exp()) * u);
                }
            }
        }
        Kernel::Act { x, out: o, rows, inter, act, gated } => {
            let x = ins.bf16(*x)?;
            let dst = out_bf16(out, *o)?;
            let width = if *gated { 2 * inter } else { *inter };
            need("activation x", x.len(), rows * width)?;
            need("activation out", dst.len(), rows * inter)?;
            let f = |v: f32| match act {
                slicesched_model::Act::Silu => v / (1.0 + (-v).exp()),
                slicesched_model::Act::Gelu => 0.5 * v * (1.0 + libm::erff(v / std::f32::consts::SQRT_2)),
                slicesched_model::Act::GeluTanh => {
                    0.5 * v * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
                }
            };
            for r in 0..*rows {
                for i in 0..*inter {
                    let a = f(x[r * width + i].to_f32());
                    let u = if *gated { x[r * width + inter + i].to_f32() } else { 1.0 };
                    dst[r * inter + i] = bf16::from_f32(a * u);
                }
            }
        }
        Kernel::TopK { logits, out: o, rows, experts, k, renormalize } => {
            let l = ins.f32(*logits)?;
            need("topk logits", l.len(), rows * experts)?;
            if *k == 0 || k > experts {
                return Err(format!("top {k} of {experts} experts"));
            }
            let dst = out_f32(out, *o)?;
            need("topk out", dst.len(), rows * 2 * k)?;
            let mut order: Vec<usize> = Vec::with_capacity(*experts);
            for r in 0..*rows {
                let row = &l[r * experts..(r + 1) * experts];
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let z: f32 = row.iter().map(|v| (v - max).exp()).sum();
                order.clear();
                order.extend(0..*experts);
                // Stable: equal logits keep the lower id first.
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
                let top = &order[..*k];
                let p = |e: usize| (row[e] - max).exp() / z;
                let sum: f32 = if *renormalize { top.iter().map(|&e| p(e)).sum() } else { 1.0 };
                for (i, &e) in top.iter().enumerate() {
                    dst[r * 2 * k + i] = e as f32;
                    dst[r * 2 * k + k + i] = p(e) / sum;
                }
            }
        }
        Kernel::ExpertUp { x, routing, ws, first, rows, k, n, hidden, out: o } => {
            let (x, route) = (ins.bf16(*x)?, ins.f32(*routing)?);
            need("expert_up x", x.len(), rows * hidden)?;
            let dst = out_bf16(out, *o)?;
            need("expert_up out", dst.len(), rows * k * n)?;
            dst[..rows * k * n].fill(bf16::ZERO);
            let row = |t: usize, _| &x[t * hidden..(t + 1) * hidden];
            per_expert(ins, ws, route, (*first, *rows, *k), (*n, *hidden), row, s, |t, slot, y| {
                for (d, v) in dst[(t * k + slot) * n..(t * k + slot + 1) * n].iter_mut().zip(y) {
                    *d = bf16::from_f32(*v);
                }
            })?;
        }
        Kernel::ExpertDown { x, routing, ws, first, rows, k, inter, hidden, out: o } => {
            let (x, route) = (ins.bf16(*x)?, ins.f32(*routing)?);
            need("expert_down x", x.len(), rows * k * inter)?;
            let mut acc = vec![0f32; rows * hidden];
            let row = |t: usize, slot: usize| &x[(t * k + slot) * inter..(t * k + slot + 1) * inter];
            per_expert(ins, ws, route, (*first, *rows, *k), (*hidden, *inter), row, s, |t, slot, y| {
                let weight = route[t * 2 * k + k + slot];
                for (a, v) in acc[t * hidden..(t + 1) * hidden].iter_mut().zip(y) {
                    *a += weight * v;
                }
            })?;
            let dst = out_bf16(out, *o)?;
            need("expert_down out", dst.len(), rows * hidden)?;
            for (d, a) in dst.iter_mut().zip(&acc) {
                *d = bf16::from_f32(*a);
            }
        }
        Kernel::Sum { parts, out: o } => {
            let parts = parts.iter().map(|p| ins.bf16(*p)).collect::<Result<Vec<_>, _>>()?;
            let dst = out_bf16(out, *o)?;
            for p in &parts {
                need("sum part", p.len(), dst.len())?;
            }
            for i in 0..dst.len() {
                dst[i] = bf16::from_f32(parts.iter().map(|p| p[i].to_f32()).sum());
            }
        }
        Kernel::Softcap { x, cap } => {
            if cap.is_nan() || *cap <= 0.0 {
                return Err(format!("soft-cap {cap} is not positive"));
            }
            for v in out_f32(out, *x)? {
                *v = cap * (*v / cap).tanh();
            }
        }
        Kernel::Argmax { logits, out: o, rows, shards, shard_n } => {
            let l = ins.f32(*logits)?;
            need("argmax logits", l.len(), rows * shards * shard_n)?;
            let Data::I32(d) = out else { return Err("argmax writes i32".into()) };
            let dst = d.get_mut(o.offset..o.offset + o.len).ok_or("argmax output outside its buffer")?;
            need("argmax out", dst.len(), *rows)?;
            for r in 0..*rows {
                let mut best = (f32::NEG_INFINITY, -1i32);
                for sh in 0..*shards {
                    let row = &l[(sh * rows + r) * shard_n..(sh * rows + r + 1) * shard_n];
                    for (i, &v) in row.iter().enumerate() {
                        if v.is_nan() {
                            return Err(format!("NaN logit in row {r}"));
                        }
                        if v > best.0 {
                            best = (v, (sh * shard_n + i) as i32);
                        }
                    }
                }
                dst[r] = best.1;
            }
        }
    }
    Ok(())
}

fn gemm(
    x: &[bf16],
    w: &[bf16],
    bias: Option<&[bf16]>,
    out: &mut Data,
    y: View,
    (m, n, k): (usize, usize, usize),
    s: &mut Scratch,
) -> Result<(), String> {
    need("gemm x", x.len(), m * k)?;
    need("gemm w", w.len(), n * k)?;
    need("gemm y", y.len, m * n)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    matmul(x, w, (m, n, k), s);
    if let Some(b) = bias {
        need("gemm bias", b.len(), n)?;
        for row in s.y.chunks_mut(n) {
            for (v, b) in row.iter_mut().zip(b) {
                *v += b.to_f32();
            }
        }
    }
    match out {
        Data::Bf16(d) => {
            let dst = d.get_mut(y.offset..y.offset + m * n).ok_or("gemm output outside its buffer")?;
            for (o, v) in dst.iter_mut().zip(&s.y) {
                *o = bf16::from_f32(*v);
            }
        }
        Data::F32(d) => {
            d.get_mut(y.offset..y.offset + m * n).ok_or("gemm output outside its buffer")?.copy_from_slice(&s.y);
        }
        Data::I32(_) => return Err("gemm cannot write i32".into()),
    }
    Ok(())
}

/// `s.y[m×n] = x · wᵀ` in f32, batch-invariant (`gemm.rs`). The caller checked `x` holds
/// m·k and `w` n·k elements.
pub(crate) fn matmul(x: &[bf16], w: &[bf16], (m, n, k): (usize, usize, usize), s: &mut Scratch) {
    widen(&x[..m * k], &mut s.x);
    s.y.clear();
    s.y.resize(m * n, 0.0);
    super::gemm::gemm(&s.x, w, &mut s.y, m, n, k);
}

fn rope(
    qkv: &mut [bf16],
    pos: &[i32],
    tab: &[f32],
    tokens: usize,
    h: Heads,
    max_pos: usize,
    rotary: usize,
) -> Result<(), String> {
    if rotary > h.dim || rotary % 2 == 1 {
        return Err(format!("{rotary} rotary dimensions in a head of {}", h.dim));
    }
    let half = rotary / 2;
    need("rope qkv", qkv.len(), tokens * h.row())?;
    need("rope table", tab.len(), 2 * max_pos * half)?;
    for t in 0..tokens {
        let p = pos[t];
        if p < 0 || p as usize >= max_pos {
            return Err(format!("position {p} outside the RoPE table of {max_pos}"));
        }
        let cos = &tab[p as usize * half..(p as usize + 1) * half];
        let sin = &tab[(max_pos + p as usize) * half..(max_pos + p as usize + 1) * half];
        for head in 0..h.q + h.kv {
            let base = t * h.row() + head * h.dim;
            for i in 0..half {
                let (a, b) = (qkv[base + i].to_f32(), qkv[base + half + i].to_f32());
                qkv[base + i] = bf16::from_f32(a * cos[i] - b * sin[i]);
                qkv[base + half + i] = bf16::from_f32(b * cos[i] + a * sin[i]);
            }
        }
    }
    Ok(())
}
