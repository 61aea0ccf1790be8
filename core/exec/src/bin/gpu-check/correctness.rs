//! Section (b): every op on the GPU against the CPU backend on the same random inputs
//! (never zeros; GPU outputs poisoned with NaN first), with executor.md §9(b)'s
//! thresholds, and a 2-layer model's logits and greedy tokens.

use crate::harness::Harness;
use anyhow::{Context, Result};
use half::bf16;
use rand::{Rng, SeedableRng};
use serde_json::json;
use slicesched_exec::cuda::CudaBackend;
use slicesched_exec::kernels::{Heads, Kernel, BLOCK_TOKENS};
use slicesched_exec::*;

#[derive(Clone, Copy)]
pub enum Shapes {
    Tiny,
    Llama8b,
}

type Rng64 = rand_chacha::ChaCha8Rng;

fn bf(r: &mut Rng64, n: usize, scale: f32) -> HostData {
    HostData::Bf16((0..n).map(|_| bf16::from_f32(r.random_range(-scale..scale))).collect())
}

fn f32s(r: &mut Rng64, n: usize, scale: f32) -> HostData {
    HostData::F32((0..n).map(|_| r.random_range(-scale..scale)).collect())
}

fn poison(dtype: Dtype, n: usize) -> HostData {
    match dtype {
        Dtype::Bf16 => HostData::Bf16(vec![bf16::NAN; n]),
        Dtype::F32 => HostData::F32(vec![f32::NAN; n]),
        Dtype::I32 => HostData::I32(vec![i32::MIN; n]),
    }
}

/// Uploads `ins` and a (poisoned) output to device 0 of `b`, runs the kernel `make`
/// builds from their views, and downloads the output.
fn run_on(
    b: &dyn Backend,
    ins: &[HostData],
    out: (Dtype, usize),
    make: &dyn Fn(&[View], View) -> Kernel,
) -> Result<HostData> {
    let d = DeviceId(0);
    let mut views = Vec::new();
    let mut bufs = Vec::new();
    for h in ins {
        let id = b.alloc(d, Arena::Workspace, h.dtype(), h.len())?;
        bufs.push(id);
        let v = View::whole(id, h.len());
        b.upload(v, h)?;
        views.push(v);
    }
    let o = b.alloc(d, Arena::Workspace, out.0, out.1)?;
    bufs.push(o);
    let ov = View::whole(o, out.1);
    b.upload(ov, &poison(out.0, out.1))?;
    let s = b.stream(d, 0)?;
    b.launch(s, make(&views, ov), &[])?.wait()?;
    let r = b.download(ov)?;
    for id in bufs {
        b.free(id)?;
    }
    Ok(r)
}

#[derive(Clone, Copy, PartialEq)]
enum Class {
    /// ≤ 1 bf16 ulp everywhere.
    Elementwise,
    /// max relative error ≤ 8e-3.
    Norm,
    /// ‖gpu−ref‖/‖ref‖ ≤ 1e-2 and allclose(rtol 1.6e-2, atol 1e-3).
    Matmul,
    /// Identical.
    Exact,
}

fn ordered(b: bf16) -> i32 {
    let u = b.to_bits() as i32;
    if u & 0x8000 != 0 {
        -(u & 0x7fff)
    } else {
        u
    }
}

/// (pass, metrics) of `gpu` against the CPU's `cpu`; a NaN where the CPU has none fails.
fn compare(class: Class, gpu: &HostData, cpu: &HostData) -> (bool, serde_json::Value) {
    let (g, c): (Vec<f64>, Vec<f64>) = match (gpu, cpu) {
        (HostData::Bf16(g), HostData::Bf16(c)) => {
            if class == Class::Elementwise {
                let mut max_ulp = 0;
                let mut nan = 0;
                for (a, b) in g.iter().zip(c) {
                    if a.is_nan() != b.is_nan() {
                        nan += 1;
                    } else if !a.is_nan() {
                        max_ulp = max_ulp.max((ordered(*a) - ordered(*b)).abs());
                    }
                }
                return (nan == 0 && max_ulp <= 1, json!({ "max_ulp": max_ulp, "nan_mismatch": nan }));
            }
            (g.iter().map(|v| v.to_f64()).collect(), c.iter().map(|v| v.to_f64()).collect())
        }
        (HostData::F32(g), HostData::F32(c)) => {
            (g.iter().map(|v| *v as f64).collect(), c.iter().map(|v| *v as f64).collect())
        }
        (HostData::I32(g), HostData::I32(c)) => {
            let diff = g.iter().zip(c).filter(|(a, b)| a != b).count();
            return (diff == 0, json!({ "mismatches": diff }));
        }
        _ => return (false, json!({ "error": "dtype mismatch" })),
    };
    let nan = g.iter().zip(&c).filter(|(a, b)| a.is_nan() && !b.is_nan()).count();
    let num: f64 = g.iter().zip(&c).map(|(a, b)| (a - b).powi(2)).sum();
    let den: f64 = c.iter().map(|b| b * b).sum();
    let rel = (num / den.max(1e-30)).sqrt();
    let max_rel = g.iter().zip(&c).map(|(a, b)| (a - b).abs() / b.abs().max(1e-6)).fold(0.0, f64::max);
    let close = g.iter().zip(&c).all(|(a, b)| (a - b).abs() <= 1e-3 + 1.6e-2 * b.abs());
    let ok = nan == 0
        && match class {
            Class::Norm => g.iter().zip(&c).all(|(a, b)| (a - b).abs() <= 8e-3 * b.abs().max(1e-2)),
            Class::Matmul => rel <= 1e-2 && close,
            _ => rel == 0.0,
        };
    (ok, json!({ "rel_norm": rel, "max_rel": max_rel, "allclose": close, "nan": nan }))
}

struct Dims {
    hidden: usize,
    inter: usize,
    heads: Heads,
    vocab: usize,
    tokens: &'static [usize],
}

fn dims(s: Shapes) -> Dims {
    match s {
        Shapes::Tiny => {
            Dims { hidden: 64, inter: 128, heads: Heads { q: 4, kv: 2, dim: 16 }, vocab: 96, tokens: &[1, 7, 33] }
        }
        // Llama-3-8B; the embedding and LM head use a 32k slice of the 128k vocab to keep
        // the CPU reference within the section's cap.
        Shapes::Llama8b => Dims {
            hidden: 4096,
            inter: 14336,
            heads: Heads { q: 32, kv: 8, dim: 128 },
            vocab: 32768,
            tokens: &[1, 7, 128, 1000],
        },
    }
}

pub fn ops(h: &mut Harness, gpu: &CudaBackend, s: Shapes) -> Result<(bool, String)> {
    let d = dims(s);
    let cpu = CpuBackend::new(&[CpuDeviceSpec { memory_bytes: 64 << 30, cores: 16 }]);
    let mut r = Rng64::seed_from_u64(11);
    let (mut pass, mut fail) = (0, Vec::new());
    let hd = d.heads;
    let row = hd.row();
    for &t in d.tokens {
        if h.over() {
            break;
        }
        let max_pos = 4096;
        let blocks = (t + 64).div_ceil(BLOCK_TOKENS) * 2;
        let cache_len = 2 * blocks * BLOCK_TOKENS * hd.kv * hd.dim;
        // Attention: two sequences, a prefill chunk of t-1 rows over a longer context and
        // one decode row (t = 1: one decode).
        let (q_lens, ctxs): (Vec<usize>, Vec<usize>) =
            if t == 1 { (vec![1], vec![40]) } else { (vec![t - 1, 1], vec![t - 1 + 17, 50]) };
        let seqs = q_lens.len();
        let max_blocks = blocks / 2;
        let mut perm: Vec<i32> = (0..blocks as i32).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, r.random_range(0..=i));
        }
        let tables = HostData::I32((0..seqs * max_blocks).map(|i| perm[i % perm.len()]).collect());
        let mut q_start = vec![0i32];
        for q in &q_lens {
            q_start.push(q_start.last().unwrap() + *q as i32);
        }
        // Distinct slots (a runner never writes two tokens to one slot: which write wins
        // would be up to the GPU), over shuffled blocks, with some tokens not cached.
        let slots: Vec<i32> =
            (0..t).map(|i| if i % 5 == 3 { -1 } else { perm[(i / 16) % perm.len()] * 16 + (i % 16) as i32 }).collect();
        let ids = HostData::I32((0..t).map(|_| r.random_range(0..d.vocab as i32)).collect());
        let pos = HostData::I32((0..t).map(|_| r.random_range(0..max_pos as i32)).collect());
        let lm_n = d.vocab;
        type Case = (&'static str, Class, Vec<HostData>, (Dtype, usize), Box<dyn Fn(&[View], View) -> Kernel>);
        let (hid, inter) = (d.hidden, d.inter);
        let mut cases: Vec<Case> = vec![
            (
                "embedding",
                Class::Elementwise,
                vec![ids.clone(), bf(&mut r, d.vocab * hid, 1.0)],
                (Dtype::Bf16, t * hid),
                Box::new(move |v, o| Kernel::Embedding { ids: v[0], table: v[1], out: o, hidden: hid, scale: None }),
            ),
            (
                "rmsnorm",
                Class::Norm,
                vec![bf(&mut r, t * hid, 2.0), bf(&mut r, hid, 1.0)],
                (Dtype::Bf16, t * hid),
                Box::new(move |v, o| Kernel::RmsNorm {
                    x: v[0],
                    weight: v[1],
                    out: o,
                    rows: t,
                    width: hid,
                    eps: 1e-5,
                    unit_offset: false,
                }),
            ),
            (
                "gather_rows",
                Class::Elementwise,
                vec![bf(&mut r, t * hid, 1.0), HostData::I32(vec![t as i32 - 1, 0])],
                (Dtype::Bf16, 2 * hid),
                Box::new(move |v, o| Kernel::GatherRows { x: v[0], rows: v[1], out: o, width: hid }),
            ),
            (
                "residual_add",
                Class::Elementwise,
                vec![bf(&mut r, t * hid, 4.0), bf(&mut r, t * hid, 4.0)],
                (Dtype::Bf16, t * hid),
                Box::new(|v, o| Kernel::Add { a: v[0], b: v[1], out: o }),
            ),
            (
                "silu_mul",
                Class::Elementwise,
                vec![bf(&mut r, t * 2 * inter, 4.0)],
                (Dtype::Bf16, t * inter),
                Box::new(move |v, o| Kernel::SiluMul { x: v[0], out: o, rows: t, inter }),
            ),
            (
                "sum4",
                Class::Elementwise,
                (0..4).map(|_| bf(&mut r, t * hid, 2.0)).collect(),
                (Dtype::Bf16, t * hid),
                Box::new(|v, o| Kernel::Sum { parts: v.to_vec(), out: o }),
            ),
            (
                "argmax",
                Class::Exact,
                vec![f32s(&mut r, 2 * t * lm_n, 8.0)],
                (Dtype::I32, t),
                Box::new(move |v, o| Kernel::Argmax { logits: v[0], out: o, rows: t, shards: 2, shard_n: lm_n }),
            ),
            (
                "cache_write",
                Class::Elementwise,
                vec![bf(&mut r, t * row, 1.0), HostData::I32(slots.clone()), bf(&mut r, cache_len, 1.0)],
                (Dtype::Bf16, 0),
                Box::new(move |v, _| Kernel::CacheWrite { qkv: v[0], slots: v[1], cache: v[2], tokens: t, heads: hd }),
            ),
            (
                "paged_attention",
                Class::Matmul,
                vec![
                    bf(&mut r, t * row, 1.0),
                    bf(&mut r, cache_len, 1.0),
                    tables.clone(),
                    HostData::I32(q_start.clone()),
                    HostData::I32(ctxs.iter().map(|c| *c as i32).collect()),
                ],
                (Dtype::Bf16, t * hd.q * hd.dim),
                Box::new(move |v, o| Kernel::Attention {
                    qkv: v[0],
                    cache: v[1],
                    block_tables: v[2],
                    q_start: v[3],
                    ctx_lens: v[4],
                    out: o,
                    seqs,
                    max_blocks,
                    heads: hd,
                    window: 0,
                    scores: Default::default(),
                }),
            ),
        ];
        for (name, n, k, f32_out) in [
            ("gemm_qkv", (hd.q + 2 * hd.kv) * hd.dim, hid, false),
            ("gemm_o", hid, hd.q * hd.dim, false),
            ("gemm_gate_up", 2 * inter, hid, false),
            ("gemm_down", hid, inter, false),
            ("gemm_lm_head_f32", lm_n, hid, true),
        ] {
            let out = if f32_out { (Dtype::F32, t * n) } else { (Dtype::Bf16, t * n) };
            cases.push((
                name,
                Class::Matmul,
                vec![bf(&mut r, t * k, 1.0), bf(&mut r, n * k, 0.05)],
                out,
                Box::new(move |v, o| Kernel::Gemm { bias: None, x: v[0], w: v[1], y: o, m: t, n, k }),
            ));
        }
        // Rope and cache_write change a tensor in place: compare the tensor itself.
        let rope_in = vec![bf(&mut r, t * row, 1.0), pos.clone(), f32s(&mut r, 2 * max_pos * hd.dim / 2, 1.0)];
        for (name, class, ins, out, make) in cases {
            if h.over() {
                break;
            }
            let (g, c) = if name == "cache_write" {
                (inplace(gpu, &ins, 2, &*make)?, inplace(&cpu, &ins, 2, &*make)?)
            } else {
                (run_on(gpu, &ins, out, &*make)?, run_on(&cpu, &ins, out, &*make)?)
            };
            let (ok, m) = compare(class, &g, &c);
            h.emit(json!({ "section": "b_ops", "op": name, "tokens": t, "ok": ok, "metrics": m }));
            if ok {
                pass += 1
            } else {
                fail.push(format!("{name}@{t}"))
            }
        }
        let rope = move |v: &[View], _o: View| Kernel::Rope {
            qkv: v[0],
            positions: v[1],
            table: v[2],
            tokens: t,
            heads: hd,
            max_pos,
            rotary: hd.dim,
        };
        let (g, c) = (inplace(gpu, &rope_in, 0, &rope)?, inplace(&cpu, &rope_in, 0, &rope)?);
        let (ok, m) = compare(Class::Elementwise, &g, &c);
        h.emit(json!({ "section": "b_ops", "op": "rope", "tokens": t, "ok": ok, "metrics": m }));
        if ok {
            pass += 1
        } else {
            fail.push(format!("rope@{t}"))
        }
    }
    Ok((fail.is_empty(), format!("{pass} op×shape pass, {} fail {:?}", fail.len(), fail)))
}

/// Runs a kernel that writes input `which` in place and returns that tensor.
fn inplace(
    b: &dyn Backend,
    ins: &[HostData],
    which: usize,
    make: &dyn Fn(&[View], View) -> Kernel,
) -> Result<HostData> {
    let d = DeviceId(0);
    let mut views = Vec::new();
    for h in ins {
        let id = b.alloc(d, Arena::Workspace, h.dtype(), h.len())?;
        let v = View::whole(id, h.len());
        b.upload(v, h)?;
        views.push(v);
    }
    let s = b.stream(d, 0)?;
    b.launch(s, make(&views, views[which]), &[])?.wait()?;
    let r = b.download(views[which])?;
    for v in views {
        b.free(v.buf)?;
    }
    Ok(r)
}

/// A 2-layer random model (tiny-2l): the GPU's logits against the CPU's, step by step
/// on the CPU's greedy tokens, and whether their argmaxes agree.
pub fn model(h: &mut Harness, gpu: &CudaBackend) -> Result<(bool, String)> {
    use slicesched_exec::model::{ExecModel, HostWeights};
    use slicesched_exec::runner::{ExecBatch, OpPlace, Runner, SeqWork};
    let m = ExecModel::new(slicesched_model::ModelConfig::preset("tiny-2l").context("tiny-2l")?);
    let w = HostWeights::random(&m, 7);
    let cpu = CpuBackend::new(&[CpuDeviceSpec { memory_bytes: 16 << 30, cores: 16 }]);
    let place = |_: u32, _: slicesched_model::OpKind, _: slicesched_model::Segment| OpPlace { group: 0, priority: 0 };
    let mut rc = Runner::new(&cpu);
    let mut rg = Runner::new(gpu);
    let tc = rc.load_tenant(m.clone(), &w, &[DeviceId(0)], 64)?;
    let tg = rg.load_tenant(m.clone(), &w, &[DeviceId(0)], 64)?;
    let mut r = Rng64::seed_from_u64(5);
    let (mut worst, mut agree, mut total) = (0.0f64, 0, 0);
    for seq in 0..8u64 {
        if h.over() {
            break;
        }
        let prompt: Vec<i32> = (0..(5 + 7 * seq as usize)).map(|_| r.random_range(0..m.vocab() as i32)).collect();
        let mut batch = ExecBatch {
            seqs: vec![SeqWork { seq, tokens: prompt.clone(), start_pos: 0, prefill: true, samples: true }],
        };
        for pos in prompt.len()..prompt.len() + 6 {
            let oc = rc.run(tc, &batch, &place, true)?;
            let og = rg.run(tg, &batch, &place, true)?;
            let (lc, lg) = (oc.logits.context("cpu logits")?.remove(0), og.logits.context("gpu logits")?.remove(0));
            let num: f64 = lg.iter().zip(&lc).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
            let den: f64 = lc.iter().map(|b| (*b as f64).powi(2)).sum();
            let nan = lg.iter().any(|v| v.is_nan());
            worst = worst.max(if nan { f64::INFINITY } else { (num / den.max(1e-30)).sqrt() });
            total += 1;
            if oc.tokens[0].1 == og.tokens[0].1 {
                agree += 1;
            }
            let t = oc.tokens[0].1;
            batch = ExecBatch {
                seqs: vec![SeqWork { seq, tokens: vec![t], start_pos: pos, prefill: false, samples: true }],
            };
        }
        rc.release(tc, seq);
        rg.release(tg, seq);
    }
    let frac = agree as f64 / total.max(1) as f64;
    let ok = total > 0 && worst <= 2e-2 && frac >= 0.99;
    h.emit(
        json!({ "section": "b_model", "steps": total, "worst_logits_rel": worst, "argmax_agreement": frac, "ok": ok }),
    );
    Ok((ok, format!("{total} steps: logits rel ≤ {worst:.2e}, argmax agreement {:.1}%", frac * 100.0)))
}

/// Batch invariance on the GPU: a sequence's logits alone and beside three others
/// (`bench::batch`; bit-identical on the CPU backend). cuBLAS may pick another kernel
/// for another row count, so this reports how far the logits moved and whether a
/// greedy token changed (the section passes when none did).
pub fn batch(h: &mut Harness, gpu: &CudaBackend) -> Result<(bool, String)> {
    let (mut ok, mut parts) = (true, Vec::new());
    for model in ["tiny-2l", "tiny-4l"] {
        if h.over() {
            break;
        }
        let r = slicesched_exec::bench::batch::batch_invariance(gpu, DeviceId(0), model, 8)?;
        h.emit(json!({ "section": "b_batch", "result": r }));
        ok &= r.same_tokens == r.steps;
        parts.push(format!(
            "{model}: {}/{} steps bit-identical, max |Δ logit| {:.2e}, {}/{} greedy tokens the same",
            r.identical_steps, r.steps, r.max_abs_diff, r.same_tokens, r.steps
        ));
    }
    Ok((ok, parts.join("; ")))
}
