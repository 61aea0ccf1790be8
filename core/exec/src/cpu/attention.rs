//! Paged causal attention on the CPU: GQA, sliding windows, and the score forms of
//! [`crate::kernels::Scores`] (scale, soft-cap, ALiBi), f32 math over bf16 storage.

use super::math::{need, widen, Scratch};
use crate::kernels::{Heads, BLOCK_TOKENS};
use half::bf16;

pub(super) struct AttnArgs<'a> {
    pub qkv: &'a [bf16],
    pub cache: &'a [bf16],
    pub tables: &'a [i32],
    pub q_start: &'a [i32],
    pub ctx: &'a [i32],
    pub seqs: usize,
    pub max_blocks: usize,
    pub h: Heads,
    pub window: usize,
    /// What multiplies q·k.
    pub scale: f32,
    pub softcap: Option<f32>,
    /// ALiBi slopes of the shard's query heads.
    pub slopes: Option<&'a [f32]>,
}

pub(super) fn attention(a: &AttnArgs, out: &mut [bf16], s: &mut Scratch) -> Result<(), String> {
    let h = a.h;
    let (d, kvw, group) = (h.dim, h.kv * h.dim, h.q / h.kv.max(1));
    let half = a.cache.len() / 2;
    let scale = a.scale;
    if let Some(sl) = a.slopes {
        need("attention alibi slopes", sl.len(), h.q)?;
    }
    if a.softcap.is_some_and(|c| c.is_nan() || c <= 0.0) {
        return Err(format!("attention soft-cap {:?} is not positive", a.softcap));
    }
    need("attention q_start", a.q_start.len(), a.seqs + 1)?;
    need("attention ctx_lens", a.ctx.len(), a.seqs)?;
    need("attention block_tables", a.tables.len(), a.seqs * a.max_blocks)?;
    for seq in 0..a.seqs {
        let (q0, q1) = (a.q_start[seq] as usize, a.q_start[seq + 1] as usize);
        let ctx = a.ctx[seq] as usize;
        if q1 < q0 || q1 - q0 > ctx || ctx > a.max_blocks * BLOCK_TOKENS {
            return Err(format!("sequence {seq}: {} queries over a context of {ctx}", q1.wrapping_sub(q0)));
        }
        need("attention out", out.len(), q1 * h.q * d)?;
        // Slot of every key position, resolved once per sequence.
        let mut slots = Vec::with_capacity(ctx);
        for t in 0..ctx {
            let b = a.tables[seq * a.max_blocks + t / BLOCK_TOKENS];
            if b < 0 || (b as usize * BLOCK_TOKENS + BLOCK_TOKENS) * kvw > half {
                return Err(format!("sequence {seq}: KV block {b} outside the cache"));
            }
            slots.push(b as usize * BLOCK_TOKENS + t % BLOCK_TOKENS);
        }
        for (j, row) in (q0..q1).enumerate() {
            let visible = ctx - (q1 - q0) + j + 1;
            let first = if a.window > 0 { visible.saturating_sub(a.window) } else { 0 };
            for head in 0..h.q {
                let kvh = head / group;
                let q = &a.qkv[row * h.row() + head * d..row * h.row() + (head + 1) * d];
                widen(q, &mut s.x);
                s.y.clear();
                let mut max = f32::NEG_INFINITY;
                let slope = a.slopes.map(|sl| sl[head]);
                for (pos, &slot) in (first..).zip(&slots[first..visible]) {
                    let k = &a.cache[slot * kvw + kvh * d..slot * kvw + (kvh + 1) * d];
                    let mut dot: f32 = s.x.iter().zip(k).map(|(q, k)| q * k.to_f32()).sum::<f32>() * scale;
                    if let Some(cap) = a.softcap {
                        dot = cap * (dot / cap).tanh();
                    }
                    if let Some(m) = slope {
                        // The query sits at `visible - 1`: a key `n` back gets −n·slope.
                        dot += m * (pos as f32 - (visible - 1) as f32);
                    }
                    max = max.max(dot);
                    s.y.push(dot);
                }
                let mut sum = 0.0f32;
                for v in s.y.iter_mut() {
                    *v = (*v - max).exp();
                    sum += *v;
                }
                s.w.clear();
                s.w.resize(d, 0.0);
                for (p, &slot) in s.y.iter().zip(&slots[first..visible]) {
                    let v = &a.cache[half + slot * kvw + kvh * d..half + slot * kvw + (kvh + 1) * d];
                    for (acc, v) in s.w.iter_mut().zip(v) {
                        *acc += p * v.to_f32();
                    }
                }
                let o = &mut out[row * h.q * d + head * d..row * h.q * d + (head + 1) * d];
                for (o, acc) in o.iter_mut().zip(&s.w) {
                    *o = bf16::from_f32(acc / sum);
                }
            }
        }
    }
    Ok(())
}
