//! A naive f64 forward pass over the same bf16 weights: the oracle the kernels and the
//! executor are tested against. Slow and simple on purpose.

use crate::model::{ExecModel, HostWeights};
use crate::ExecError;

fn f(v: &[half::bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `y[m][n] = x[m][k] · w[n][k]ᵀ`.
pub fn gemm(x: &[f64], w: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|l| x[i * k + l] * w[j * k + l]).sum();
        }
    }
    y
}

pub fn rmsnorm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let width = w.len();
    x.chunks(width)
        .flat_map(|r| {
            let inv = 1.0 / (r.iter().map(|v| v * v).sum::<f64>() / width as f64 + eps).sqrt();
            r.iter().zip(w).map(move |(v, w)| v * inv * w).collect::<Vec<_>>()
        })
        .collect()
}

/// Rotate-half RoPE of one head vector at `pos`.
pub fn rope(v: &mut [f64], pos: usize, inv_freq: &[f64]) {
    let half = v.len() / 2;
    for i in 0..half {
        let (c, s) = ((pos as f64 * inv_freq[i]).cos(), (pos as f64 * inv_freq[i]).sin());
        let (a, b) = (v[i], v[half + i]);
        v[i] = a * c - b * s;
        v[half + i] = b * c + a * s;
    }
}

pub fn silu_mul(g: f64, u: f64) -> f64 {
    g / (1.0 + (-g).exp()) * u
}

/// Causal GQA attention of one sequence: `q[n][H·D]`, `k`/`v` `[n][KVH·D]`.
pub fn attention(q: &[f64], k: &[f64], v: &[f64], n: usize, heads: usize, kv_heads: usize, d: usize) -> Vec<f64> {
    let g = heads / kv_heads;
    let mut out = vec![0.0; n * heads * d];
    for t in 0..n {
        for h in 0..heads {
            let kh = h / g;
            let qv = &q[t * heads * d + h * d..][..d];
            let s: Vec<f64> = (0..=t)
                .map(|j| {
                    qv.iter().zip(&k[j * kv_heads * d + kh * d..][..d]).map(|(a, b)| a * b).sum::<f64>()
                        / (d as f64).sqrt()
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for (j, p) in e.iter().enumerate() {
                for i in 0..d {
                    out[t * heads * d + h * d + i] += p / z * v[j * kv_heads * d + kh * d + i];
                }
            }
        }
    }
    out
}

/// Logits at every position of `tokens` (one sequence from position 0).
pub fn forward(model: &ExecModel, w: &HostWeights, tokens: &[i32]) -> Result<Vec<Vec<f64>>, ExecError> {
    let c = &model.config;
    let (h, d, n) = (model.hidden(), model.head_dim(), tokens.len());
    let (qh, kvh, inter) =
        (c.num_attention_heads as usize, c.num_key_value_heads as usize, c.intermediate_size as usize);
    let eps = model.numerics.rms_norm_eps;
    let inv = model.numerics.inv_freq(d);
    let emb = f(&w.get("model.embed_tokens.weight")?.data);
    let mut x: Vec<f64> = tokens.iter().flat_map(|&t| emb[t as usize * h..(t as usize + 1) * h].to_vec()).collect();
    for l in 0..model.layers() {
        let p = |s: &str| w.get(&format!("model.layers.{l}.{s}")).map(|t| f(&t.data));
        let xn = rmsnorm(&x, &p("input_layernorm.weight")?, eps);
        let mut q = gemm(&xn, &p("self_attn.q_proj.weight")?, n, qh * d, h);
        let mut k = gemm(&xn, &p("self_attn.k_proj.weight")?, n, kvh * d, h);
        let v = gemm(&xn, &p("self_attn.v_proj.weight")?, n, kvh * d, h);
        for t in 0..n {
            for hh in 0..qh {
                rope(&mut q[(t * qh + hh) * d..][..d], t, &inv);
            }
            for hh in 0..kvh {
                rope(&mut k[(t * kvh + hh) * d..][..d], t, &inv);
            }
        }
        let a = attention(&q, &k, &v, n, qh, kvh, d);
        let o = gemm(&a, &p("self_attn.o_proj.weight")?, n, h, qh * d);
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        let xn = rmsnorm(&x, &p("post_attention_layernorm.weight")?, eps);
        let g = gemm(&xn, &p("mlp.gate_proj.weight")?, n, inter, h);
        let u = gemm(&xn, &p("mlp.up_proj.weight")?, n, inter, h);
        let act: Vec<f64> = g.iter().zip(&u).map(|(g, u)| silu_mul(*g, *u)).collect();
        let dn = gemm(&act, &p("mlp.down_proj.weight")?, n, h, inter);
        x.iter_mut().zip(&dn).for_each(|(x, o)| *x += o);
    }
    let xn = rmsnorm(&x, &f(&w.get("model.norm.weight")?.data), eps);
    let logits = gemm(&xn, &f(&w.lm_head(model)?.data), n, model.vocab(), h);
    Ok(logits.chunks(model.vocab()).map(|r| r.to_vec()).collect())
}
