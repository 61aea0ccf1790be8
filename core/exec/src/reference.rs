//! A naive f64 forward pass over the same bf16 weights: the oracle the kernels and the
//! executor are tested against. Slow and simple on purpose.

use crate::model::{ExecModel, HostWeights};
use crate::ExecError;
use slicesched_model::{Act, Norm};

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

pub fn layernorm(x: &[f64], w: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let width = w.len();
    x.chunks(width)
        .flat_map(|r| {
            let mean = r.iter().sum::<f64>() / width as f64;
            let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / width as f64;
            let inv = 1.0 / (var + eps).sqrt();
            r.iter().zip(w).zip(b).map(move |((v, w), b)| (v - mean) * inv * w + b).collect::<Vec<_>>()
        })
        .collect()
}

pub fn silu_mul(g: f64, u: f64) -> f64 {
    g / (1.0 + (-g).exp()) * u
}

/// The activation `a` of `v` (exact GELU through erf, or its tanh approximation).
pub fn act(a: Act, v: f64) -> f64 {
    match a {
        Act::Silu => v / (1.0 + (-v).exp()),
        Act::Gelu => 0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2)),
        Act::GeluTanh => 0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh()),
    }
}

/// How a score is formed: `q·k · scale`, soft-capped where `softcap`, plus
/// `slope · (key pos − query pos)` with ALiBi `slopes` (one per head; empty for none).
#[derive(Debug, Clone, Default)]
pub struct Scores {
    pub scale: f64,
    pub softcap: Option<f64>,
    pub slopes: Vec<f64>,
}

impl Scores {
    /// Llama's: `q·k / √d`.
    pub fn plain(d: usize) -> Self {
        Self { scale: 1.0 / (d as f64).sqrt(), ..Self::default() }
    }
    /// The model's (its query scale, soft-cap and ALiBi slopes).
    pub fn of(model: &ExecModel) -> Self {
        let softcap = model.numerics.attn_logit_softcap;
        Self { scale: model.attn_scale(), softcap, slopes: model.alibi_slopes() }
    }
}

/// Causal GQA attention of one sequence: `q[n][H·D]`, `k`/`v` `[n][KVH·D]`; a query sees
/// the last `window` keys up to itself (all of them where `window` is 0).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    n: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
    window: usize,
    sc: &Scores,
) -> Vec<f64> {
    let g = heads / kv_heads;
    let mut out = vec![0.0; n * heads * d];
    for t in 0..n {
        for h in 0..heads {
            let kh = h / g;
            let qv = &q[t * heads * d + h * d..][..d];
            let first = if window > 0 { (t + 1).saturating_sub(window) } else { 0 };
            let s: Vec<f64> = (first..=t)
                .map(|j| {
                    let mut s =
                        qv.iter().zip(&k[j * kv_heads * d + kh * d..][..d]).map(|(a, b)| a * b).sum::<f64>() * sc.scale;
                    if let Some(cap) = sc.softcap {
                        s = cap * (s / cap).tanh();
                    }
                    s + sc.slopes.get(h).map_or(0.0, |m| m * (j as f64 - t as f64))
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for (j, p) in (first..).zip(&e) {
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
    forward_routed(model, w, tokens).map(|(l, _)| l)
}

/// [`forward`], and for a mixture-of-experts model each position's narrowest routing
/// margin over the layers (the gap between the k-th and the next expert's router logit;
/// infinite for a dense model). A position routed on a near tie may take another expert
/// in bf16 than in f64, and every later position attends to it: a comparison of the
/// two is meaningful only while the running minimum of the margins is clear of bf16's
/// error.
pub fn forward_routed(
    model: &ExecModel,
    w: &HostWeights,
    tokens: &[i32],
) -> Result<(Vec<Vec<f64>>, Vec<f64>), ExecError> {
    let margins = std::cell::RefCell::new(vec![f64::INFINITY; tokens.len()]);
    let c = &model.config;
    let (h, d, n) = (model.hidden(), model.head_dim(), tokens.len());
    let (qh, kvh, inter) =
        (c.num_attention_heads as usize, c.num_key_value_heads as usize, c.intermediate_size as usize);
    let eps = model.numerics.rms_norm_eps;
    let rot = model.rotary_dim();
    let inv = model.numerics.inv_freq(rot.max(2));
    let names = model.names();
    let t = |name: &str| w.get(name).map(|t| f(&t.data));
    let norm = |x: &[f64], name: &str| -> Result<Vec<f64>, ExecError> {
        let mut wt = t(&format!("{name}.weight"))?;
        if model.numerics.gemma {
            wt.iter_mut().for_each(|w| *w += 1.0);
        }
        Ok(match c.norm {
            Norm::Layer => layernorm(x, &wt, &t(&format!("{name}.bias"))?, eps),
            Norm::Rms => rmsnorm(x, &wt, eps),
        })
    };
    let linear = |x: &[f64], name: &str, out: usize, inp: usize, bias: bool| -> Result<Vec<f64>, ExecError> {
        let mut y = gemm(x, &t(&format!("{name}.weight"))?, n, out, inp);
        if bias {
            let b = t(&format!("{name}.bias"))?;
            y.chunks_mut(out).for_each(|r| r.iter_mut().zip(&b).for_each(|(y, b)| *y += b));
        }
        Ok(y)
    };
    let emb = t("model.embed_tokens.weight")?;
    let mut x: Vec<f64> = tokens.iter().flat_map(|&t| emb[t as usize * h..(t as usize + 1) * h].to_vec()).collect();
    if let Some(k) = model.embed_scale() {
        // HF multiplies in bf16: the scaled embedding is rounded once.
        x.iter_mut().for_each(|v| *v = half::bf16::from_f64(*v * k as f64).to_f64());
    }
    let scores = Scores::of(model);
    for l in 0..model.layers() {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let xn = norm(&x, &p("input_layernorm"))?;
        let mut q = linear(&xn, &p("self_attn.q_proj"), qh * d, h, c.biases.qkv)?;
        let mut k = linear(&xn, &p("self_attn.k_proj"), kvh * d, h, c.biases.qkv)?;
        let v = linear(&xn, &p("self_attn.v_proj"), kvh * d, h, c.biases.qkv)?;
        if c.qk_norm {
            let (qw, kw) = (t(&p("self_attn.q_norm.weight"))?, t(&p("self_attn.k_norm.weight"))?);
            q = q.chunks(d).flat_map(|hd| rmsnorm(hd, &qw, eps)).collect();
            k = k.chunks(d).flat_map(|hd| rmsnorm(hd, &kw, eps)).collect();
        }
        if rot > 0 {
            for tk in 0..n {
                for hh in 0..qh {
                    rope(&mut q[(tk * qh + hh) * d..][..rot], tk, &inv);
                }
                for hh in 0..kvh {
                    rope(&mut k[(tk * kvh + hh) * d..][..rot], tk, &inv);
                }
            }
        }
        let a = attention(&q, &k, &v, n, qh, kvh, d, model.window(l), &scores);
        let mut o = linear(&a, &p(names.o), h, qh * d, c.biases.o)?;
        let mlp = |xn: &[f64]| -> Result<Vec<f64>, ExecError> {
            if let Some(moe) = c.moe {
                return experts(model, xn, &|s: &str| t(&p(s)), moe, n, &mut margins.borrow_mut());
            }
            let up = linear(xn, &p(names.up), inter, h, c.biases.mlp)?;
            let a: Vec<f64> = if c.gated_mlp {
                let g = linear(xn, &p("mlp.gate_proj"), inter, h, c.biases.mlp)?;
                g.iter().zip(&up).map(|(g, u)| act(c.activation, *g) * u).collect()
            } else {
                up.iter().map(|u| act(c.activation, *u)).collect()
            };
            linear(&a, &p(names.down), h, inter, c.biases.mlp)
        };
        if c.parallel_block {
            let m = mlp(&xn)?;
            x.iter_mut().zip(o.iter().zip(&m)).for_each(|(x, (o, m))| *x += o + m);
        } else if let [attn_out, pre_mlp, mlp_out] = names.post_norms {
            // Gemma-2's sandwich: attention's and the MLP's outputs normed before each add.
            o = norm(&o, &p(attn_out))?;
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            let m = norm(&mlp(&norm(&x, &p(pre_mlp))?)?, &p(mlp_out))?;
            x.iter_mut().zip(&m).for_each(|(x, o)| *x += o);
        } else {
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            let m = mlp(&norm(&x, &p("post_attention_layernorm"))?)?;
            x.iter_mut().zip(&m).for_each(|(x, o)| *x += o);
        }
    }
    let xn = norm(&x, names.final_norm)?;
    let mut logits = gemm(&xn, &f(&w.lm_head(model)?.data), n, model.vocab(), h);
    if c.biases.lm_head {
        let b = t("lm_head.bias")?;
        logits.chunks_mut(model.vocab()).for_each(|r| r.iter_mut().zip(&b).for_each(|(y, b)| *y += b));
    }
    if let Some(cap) = model.numerics.final_logit_softcap {
        logits.iter_mut().for_each(|l| *l = cap * (*l / cap).tanh());
    }
    Ok((logits.chunks(model.vocab()).map(|r| r.to_vec()).collect(), margins.into_inner()))
}

/// A mixture-of-experts MLP over `n` tokens: softmax router, the top-k experts (ties to
/// the lower id), their weights renormalised where the model does, each expert a gated
/// MLP; `t` reads one of the layer's tensors.
fn experts(
    model: &ExecModel,
    xn: &[f64],
    t: &dyn Fn(&str) -> Result<Vec<f64>, ExecError>,
    moe: slicesched_model::Moe,
    n: usize,
    margins: &mut [f64],
) -> Result<Vec<f64>, ExecError> {
    let names = model.names();
    let (h, e, k, ei) = (model.hidden(), moe.experts as usize, moe.top_k as usize, moe.expert_intermediate as usize);
    let logits = gemm(xn, &t(&format!("{}.weight", names.router))?, n, e, h);
    let [g, u, dn] = names.expert_projs;
    let mut out = vec![0.0; n * h];
    for tok in 0..n {
        let row = &logits[tok * e..(tok + 1) * e];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|v| (v - max).exp()).sum();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        if k < e {
            margins[tok] = margins[tok].min(row[order[k - 1]] - row[order[k]]);
        }
        let p: Vec<f64> = order[..k].iter().map(|&x| (row[x] - max).exp() / z).collect();
        let sum: f64 = if model.numerics.moe_renormalize { p.iter().sum() } else { 1.0 };
        let x = &xn[tok * h..(tok + 1) * h];
        for (&ex, p) in order[..k].iter().zip(&p) {
            let w = |n: &str| t(&format!("{}.{ex}.{n}.weight", names.experts));
            let gate = gemm(x, &w(g)?, 1, ei, h);
            let up = gemm(x, &w(u)?, 1, ei, h);
            let a: Vec<f64> = gate.iter().zip(&up).map(|(g, u)| act(model.config.activation, *g) * u).collect();
            let y = gemm(&a, &w(dn)?, 1, h, ei);
            for (o, y) in out[tok * h..(tok + 1) * h].iter_mut().zip(&y) {
                *o += p / sum * y;
            }
        }
    }
    Ok(out)
}
