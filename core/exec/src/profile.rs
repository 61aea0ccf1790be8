//! Profiling a device: every op of a model over token counts and KV lengths, measured by
//! running real iterations on the executor, written in Vidur's layout so that
//! `slicesched cost validate --fit DIR --test DIR` fits the cost model to this hardware.

use crate::backend::{Arena, Backend, DeviceId, Dtype, HostData, View};
use crate::kernels::Kernel;
use crate::model::{ExecModel, HostWeights};
use crate::runner::{ExecBatch, OpPlace, OpTiming, Runner, SeqWork};
use crate::ExecError;
use slicesched_model::OpKind;
use std::path::Path;

/// The ops of Vidur's `mlp.csv`, in its column order, with the DAG op each one is.
pub const MLP_COLUMNS: [(&str, OpKind); 10] = [
    ("emb", OpKind::Embedding),
    ("input_layernorm", OpKind::InputNorm),
    ("attn_pre_proj", OpKind::QkvProj),
    ("attn_rope", OpKind::Rope),
    ("attn_post_proj", OpKind::OProj),
    ("post_attention_layernorm", OpKind::PostAttnNorm),
    ("mlp_up_proj", OpKind::GateUpProj),
    ("mlp_act", OpKind::Activation),
    ("mlp_down_proj", OpKind::DownProj),
    ("add", OpKind::ResidualAdd),
];

/// What to measure.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    pub tokens: Vec<u32>,
    /// Prefill chunks as (chunk, KV tokens before it).
    pub prefills: Vec<(u32, u32)>,
    /// Decodes as (batch, KV length of each).
    pub decodes: Vec<(u32, u32)>,
    /// Timed repetitions per point (after one warm-up).
    pub reps: usize,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        let tokens = vec![1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512];
        let mut prefills = Vec::new();
        for c in [16, 32, 64, 128, 256, 512] {
            for kv in [0, 128, 512] {
                prefills.push((c, kv));
            }
        }
        let mut decodes = Vec::new();
        for b in [1, 2, 4, 8, 16, 32] {
            for kv in [16, 64, 256, 1024] {
                decodes.push((b, kv));
            }
        }
        Self { tokens, prefills, decodes, reps: 5 }
    }
}

/// One `mlp.csv` row: median ms per column.
#[derive(Debug, Clone)]
pub struct MlpPoint {
    pub tokens: u32,
    pub ms: [f64; 10],
}

/// One `attention.csv` row.
#[derive(Debug, Clone)]
pub struct AttnPoint {
    pub prefill: bool,
    pub batch: u32,
    pub chunk: u32,
    pub kv: u32,
    pub ms: f64,
}

/// A device's profile of one model.
#[derive(Debug, Clone)]
pub struct Profile {
    pub tp: usize,
    pub mlp: Vec<MlpPoint>,
    pub attention: Vec<AttnPoint>,
    /// The best GEMM rate measured on one device (GFLOP/s).
    pub peak_gflops: f64,
    /// One core's read bandwidth from memory (GB/s): a CPU device's "HBM".
    pub read_gbs: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

/// One op's device time in ms, as `slicesched run` takes it (see `OpTiming::busy_ns`).
fn op_ms(o: &OpTiming, _tp: usize) -> f64 {
    o.busy_ns as f64 / 1e6
}

/// The best rate of square-ish bf16 GEMMs on `device` (GFLOP/s): the peak the cost
/// model's rooflines are scaled by.
pub fn measure_peak(b: &dyn Backend, device: DeviceId) -> Result<f64, ExecError> {
    let (m, n, k) = (512, 1024, 1024);
    let alloc = |len| b.alloc(device, Arena::Workspace, Dtype::Bf16, len).map(|id| View::whole(id, len));
    let (x, w, y) = (alloc(m * k)?, alloc(n * k)?, alloc(m * n)?);
    b.upload(x, &HostData::Bf16(vec![half::bf16::from_f32(0.5); m * k]))?;
    b.upload(w, &HostData::Bf16(vec![half::bf16::from_f32(0.25); n * k]))?;
    let s = b.stream(device, 0)?;
    let mut best = 0.0f64;
    for _ in 0..4 {
        let t = b.launch(s, Kernel::Gemm { x, w, y, m, n, k }, &[])?.wait()?;
        let ns = if t.busy_ns > 0 { t.busy_ns } else { t.duration_ns() };
        best = best.max(2.0 * (m * n * k) as f64 / ns.max(1) as f64);
    }
    for v in [x, w, y] {
        b.free(v.buf)?;
    }
    Ok(best)
}

/// Measures `model` on `devices` (one per tensor-parallel rank), reporting progress as
/// (points done, points in all, what).
pub fn profile(
    b: &dyn Backend,
    devices: &[DeviceId],
    model: &ExecModel,
    opts: &ProfileOptions,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Profile, ExecError> {
    let tp = devices.len();
    let weights = HostWeights::random(model, 1);
    let max_tokens = opts.tokens.iter().chain(opts.prefills.iter().map(|p| &p.0)).copied().max().unwrap_or(1) as usize;
    let kv_tokens = opts
        .prefills
        .iter()
        .map(|&(c, kv)| (c + kv) as usize)
        .chain(opts.decodes.iter().map(|&(n, kv)| n as usize * (kv as usize).div_ceil(16) * 16))
        .chain([max_tokens])
        .max()
        .unwrap_or(1);
    let mut r = Runner::new(b);
    let t = r.load_tenant(model.clone(), &weights, devices, kv_tokens.div_ceil(16) + 1)?;
    let total = opts.tokens.len() + opts.prefills.len() + opts.decodes.len();
    let vocab = model.vocab() as i32;
    // Op by op, as `slicesched run` drives them (each launched once its producer is
    // done, then waited for), so the profile times what `run` will measure.
    let run = |r: &mut Runner, seqs: Vec<SeqWork>| -> Result<Vec<Vec<OpTiming>>, ExecError> {
        let batch = ExecBatch { seqs };
        let mut out = Vec::new();
        for rep in 0..=opts.reps {
            let mut st = r.begin(t, &batch)?;
            let ops: Result<Vec<_>, _> =
                (0..st.dag.len()).map(|i| r.step(&mut st, i, OpPlace { group: 0, priority: 0 })).collect();
            r.end(st, true);
            if rep > 0 {
                out.push(ops?);
            }
        }
        Ok(out)
    };
    let tokens_of =
        |n: u32, seed: u64| (0..n as i64).map(|i| ((i * 7919 + seed as i64) % vocab as i64) as i32).collect::<Vec<_>>();
    let mut done = 0;
    let mut mlp = Vec::new();
    for &n in &opts.tokens {
        progress(done, total, &format!("mlp ops at {n} tokens"));
        let reps = run(
            &mut r,
            vec![SeqWork { seq: 0, tokens: tokens_of(n, 1), start_pos: 0, prefill: true, samples: false }],
        )?;
        let mut ms = [0.0; 10];
        for (i, (_, kind)) in MLP_COLUMNS.iter().enumerate() {
            let mut v: Vec<f64> = reps.iter().flatten().filter(|o| o.kind == *kind).map(|o| op_ms(o, tp)).collect();
            ms[i] = median(&mut v);
        }
        mlp.push(MlpPoint { tokens: n, ms });
        done += 1;
    }
    let mut attention = Vec::new();
    for &(c, kv) in &opts.prefills {
        progress(done, total, &format!("prefill attention, chunk {c} after {kv}"));
        let reps = run(
            &mut r,
            vec![SeqWork { seq: 0, tokens: tokens_of(c, 2), start_pos: kv as usize, prefill: true, samples: false }],
        )?;
        let mut v: Vec<f64> =
            reps.iter().flatten().filter(|o| o.kind == OpKind::Attention).map(|o| op_ms(o, tp)).collect();
        attention.push(AttnPoint { prefill: true, batch: 1, chunk: c, kv, ms: median(&mut v) });
        done += 1;
    }
    for &(n, kv) in &opts.decodes {
        progress(done, total, &format!("decode attention, {n} × {kv} KV"));
        let seqs = (0..n as u64)
            .map(|s| SeqWork {
                seq: s,
                tokens: vec![(s as i32 * 31) % vocab],
                start_pos: kv as usize - 1,
                prefill: false,
                samples: true,
            })
            .collect();
        let reps = run(&mut r, seqs)?;
        let mut v: Vec<f64> =
            reps.iter().flatten().filter(|o| o.kind == OpKind::Attention).map(|o| op_ms(o, tp)).collect();
        attention.push(AttnPoint { prefill: false, batch: n, chunk: 0, kv, ms: median(&mut v) });
        done += 1;
    }
    drop(r);
    progress(done, total, "peak GEMM rate");
    let peak_gflops = measure_peak(b, devices[0])?;
    progress(total, total, "done");
    let read_gbs = crate::bench::peak::read_bandwidth_gbs(256);
    Ok(Profile { tp, mlp, attention, peak_gflops, read_gbs })
}

fn write_atomic(path: &Path, text: &str) -> Result<(), ExecError> {
    let e = |e: std::io::Error| ExecError::Checkpoint { path: path.display().to_string(), msg: e.to_string() };
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, text).map_err(e)?;
    std::fs::rename(&tmp, path).map_err(e)
}

/// Writes `DIR/<model>/{mlp.csv, attention.csv, model_config.yml}` and
/// `DIR/device_config.yml` (the measured peak, memory, devices).
pub fn write(dir: &Path, model: &ExecModel, p: &Profile, memory_bytes: u64, devices: usize) -> Result<(), ExecError> {
    let c = &model.config;
    let folder = dir.join(&c.name);
    std::fs::create_dir_all(&folder)
        .map_err(|e| ExecError::Checkpoint { path: folder.display().to_string(), msg: e.to_string() })?;
    let mut mlp = MLP_COLUMNS.iter().map(|(n, _)| format!("time_stats.{n}.median")).collect::<Vec<_>>().join(",");
    mlp += ",n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers\n";
    for r in &p.mlp {
        let t: Vec<String> = r.ms.iter().map(|v| format!("{v:.6}")).collect();
        mlp += &format!(
            "{},{},{},{},{},{},True,{},{}\n",
            t.join(","),
            c.num_attention_heads,
            c.num_key_value_heads,
            c.hidden_size,
            c.intermediate_size,
            c.vocab_size,
            r.tokens,
            p.tp
        );
    }
    let mut attn = String::from("time_stats.attn_decode.median,time_stats.attn_prefill.median,n_embd,n_q_head,n_kv_head,block_size,num_tensor_parallel_workers,max_model_len,batch_size,prefill_chunk_size,kv_cache_size,is_prefill\n");
    for a in &p.attention {
        let (dec, pre) =
            if a.prefill { (String::new(), format!("{:.6}", a.ms)) } else { (format!("{:.6}", a.ms), String::new()) };
        attn += &format!(
            "{dec},{pre},{},{},{},16,{},{},{},{},{},{}\n",
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            p.tp,
            model.numerics.max_positions,
            a.batch,
            a.chunk,
            a.kv,
            if a.prefill { "True" } else { "False" }
        );
    }
    let cfg = format!(
        "num_layers: {}\nnum_q_heads: {}\nnum_kv_heads: {}\nembedding_dim: {}\nmlp_hidden_dim: {}\nmax_position_embeddings: {}\nuse_gated_mlp: true\nuse_bias: false\nuse_qkv_bias: false\nactivation: silu\nnorm: rms_norm\npost_attn_norm: true\nrope_theta: {}\nvocab_size: {}\nis_neox_style: true\n",
        c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size, c.intermediate_size,
        model.numerics.max_positions, model.numerics.rope_theta, c.vocab_size
    );
    write_atomic(&folder.join("mlp.csv"), &mlp)?;
    write_atomic(&folder.join("attention.csv"), &attn)?;
    write_atomic(&folder.join("model_config.yml"), &cfg)?;
    // A CPU device is in no GPU catalog: the file names it and gives its measured memory
    // bandwidth, which is what `cost validate --fit` needs to read it as a new device.
    let dev = format!(
        "# Measured by slicesched profile: the best bf16 GEMM rate of one device and one core's read bandwidth.\nname: cpu-executor\nfp16_tflops: {:.4}\ntotal_memory_gb: {:.3}\nhbm_gbps: {:.2}\nnum_devices_per_node: {devices}\n",
        p.peak_gflops / 1e3,
        memory_bytes as f64 / (1u64 << 30) as f64,
        p.read_gbs
    );
    write_atomic(&dir.join("device_config.yml"), &dev)
}
