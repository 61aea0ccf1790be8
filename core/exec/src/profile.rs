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
    /// Timed repetitions per point (after one warm-up pass).
    pub reps: usize,
    /// Untimed runs of a point just before each of its timed ones, for points of at most
    /// [`WARM_MAX_TOKENS`] tokens (decode-sized): see `profile`.
    pub warm_runs: u32,
}

/// The largest point (tokens, or decodes of a batch) `ProfileOptions::warm_runs` applies
/// to: past it the op is compute-bound and warm runs changed nothing measurable (`tiny-2l`,
/// 128–1,024 tokens, within the host's noise) while tripling the profile's time.
pub const WARM_MAX_TOKENS: u32 = 64;

impl Default for ProfileOptions {
    fn default() -> Self {
        // Up to a 1,024-token chunk: past the last point the cost model keeps its last
        // efficiency, and a CPU's GEMMs and attention lose some as their operands
        // outgrow the caches (with the grid ending at 512, `tiny-2t`'s 888-token prompt
        // ran 13–19% over its price in every run, and the request queued behind it
        // waited 2.4x its replay's wait). Every point runs every layer, so a chunk of
        // 2,048 would add minutes to a tiny model's profile; longer ones extrapolate.
        let tokens = vec![1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024];
        let mut prefills = Vec::new();
        for c in [16, 32, 64, 128, 256, 512, 1024] {
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
        Self { tokens, prefills, decodes, reps: 5, warm_runs: 3 }
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
    /// Memory bandwidth (GB/s): one core's read bandwidth on a CPU device, a
    /// device-to-device copy's (read + write) on a GPU.
    pub read_gbs: f64,
    /// The GPU profiled (None on CPU devices): set by the caller, which knows its name.
    pub gpu: Option<GpuFacts>,
}

/// What `device_config.yml` says about a profiled GPU beyond the measured figures.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuFacts {
    /// The driver's name, e.g. `NVIDIA H200`.
    pub name: String,
    pub memory_bytes: u64,
    pub sms: u32,
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
    // A GPU reaches its peak only on large GEMMs (executor.md §9(c): 8192³); a CPU
    // device would take minutes on one.
    let (m, n, k) = if b.kind() == "cuda" { (8192, 8192, 8192) } else { (512, 1024, 1024) };
    let alloc = |len| b.alloc(device, Arena::Workspace, Dtype::Bf16, len).map(|id| View::whole(id, len));
    let (x, w, y) = (alloc(m * k)?, alloc(n * k)?, alloc(m * n)?);
    b.upload(x, &HostData::Bf16(vec![half::bf16::from_f32(0.5); m * k]))?;
    b.upload(w, &HostData::Bf16(vec![half::bf16::from_f32(0.25); n * k]))?;
    let s = b.stream(device, 0)?;
    let mut best = 0.0f64;
    for _ in 0..if b.kind() == "cuda" { 8 } else { 4 } {
        let t = b.launch(s, Kernel::Gemm { bias: None, x, w, y, m, n, k }, &[])?.wait()?;
        let ns = if t.busy_ns > 0 { t.busy_ns } else { t.duration_ns() };
        best = best.max(2.0 * (m * n * k) as f64 / ns.max(1) as f64);
    }
    for v in [x, w, y] {
        b.free(v.buf)?;
    }
    Ok(best)
}

/// A device-to-device copy's bandwidth on `device` (GB/s, bytes read + written): what
/// a GPU's memory-bound ops can stream, the figure `hbm_gbps` stands for.
pub fn measure_copy_gbs(b: &dyn Backend, device: DeviceId) -> Result<f64, ExecError> {
    let n = 256 << 20; // bf16 elements: 512 MiB each way
    let (src, dst) =
        (b.alloc(device, Arena::Workspace, Dtype::Bf16, n)?, b.alloc(device, Arena::Workspace, Dtype::Bf16, n)?);
    let s = b.stream(device, 0)?;
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = b.copy(s, View::whole(src, n), View::whole(dst, n), &[])?.wait()?;
        best = best.max(2.0 * 2.0 * n as f64 / t.duration_ns().max(1) as f64);
    }
    b.free(src)?;
    b.free(dst)?;
    Ok(best)
}

/// Measures `model` on `devices` (one per tensor-parallel rank), reporting progress as
/// (steps done, steps in all, what): each point once per pass, a warm-up pass first.
pub fn profile(
    b: &dyn Backend,
    devices: &[DeviceId],
    model: &ExecModel,
    opts: &ProfileOptions,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Profile, ExecError> {
    let model = &profiled_model(model);
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
    let steps = (opts.reps + 1) * total;
    let vocab = model.vocab() as i32;
    // Op by op, as `slicesched run` drives them (each launched once its producer is
    // done, then waited for), so the profile times what `run` will measure.
    let run = |r: &mut Runner, batch: &ExecBatch| -> Result<Vec<OpTiming>, ExecError> {
        let mut st = r.begin(t, batch)?;
        let ops: Result<Vec<_>, _> =
            (0..st.dag.len()).map(|i| r.step(&mut st, i, OpPlace { group: 0, priority: 0 })).collect();
        r.end(st, true);
        ops
    };
    let tokens_of =
        |n: u32, seed: u64| (0..n as i64).map(|i| ((i * 7919 + seed as i64) % vocab as i64) as i32).collect::<Vec<_>>();
    let points: Vec<Point> = opts
        .tokens
        .iter()
        .map(|&n| Point::Mlp(n))
        .chain(opts.prefills.iter().map(|&(c, kv)| Point::Prefill(c, kv)))
        .chain(opts.decodes.iter().map(|&(n, kv)| Point::Decode(n, kv)))
        .collect();
    let seqs_of = |p: Point| -> Vec<SeqWork> {
        match p {
            Point::Mlp(n) => {
                vec![SeqWork { seq: 0, tokens: tokens_of(n, 1), start_pos: 0, prefill: true, samples: false }]
            }
            Point::Prefill(c, kv) => {
                vec![SeqWork { seq: 0, tokens: tokens_of(c, 2), start_pos: kv as usize, prefill: true, samples: false }]
            }
            Point::Decode(n, kv) => (0..n as u64)
                .map(|s| SeqWork {
                    seq: s,
                    tokens: vec![(s as i32 * 31) % vocab],
                    start_pos: kv as usize - 1,
                    prefill: false,
                    samples: true,
                })
                .collect(),
        }
    };
    // Every point once per pass, a warm-up pass first: a slow spell of a shared host
    // then costs one repetition of many points, which the median drops, instead of
    // every repetition of a few (three back-to-back profiles of tiny-2l here put its
    // QKV at 32 tokens at 94, 104 and 170 µs). But a decode-sized point timed once
    // after a whole pass of other points finds the model's weights gone from the caches,
    // which a serving loop, running that model step after step, never does: tiny-2l's
    // one-token GEMMs came out 1.5-2x what `run` measured (QKV 18-25 µs against 12), so
    // each such point runs `warm_runs` times untimed just before it is timed (QKV 10-11
    // µs with three or eight; one was not enough: 17).
    let batches: Vec<ExecBatch> = points.iter().map(|&p| ExecBatch { seqs: seqs_of(p) }).collect();
    let mut timings: Vec<Vec<Vec<OpTiming>>> = points.iter().map(|_| Vec::new()).collect();
    for pass in 0..=opts.reps {
        for (i, &p) in points.iter().enumerate() {
            progress(pass * total + i, steps, &format!("pass {pass}/{}: {}", opts.reps, p.what()));
            if pass > 0 && p.tokens() <= WARM_MAX_TOKENS {
                for _ in 0..opts.warm_runs {
                    run(&mut r, &batches[i])?;
                }
            }
            let ops = run(&mut r, &batches[i])?;
            if pass > 0 {
                timings[i].push(ops);
            }
        }
    }
    let med = |reps: &[Vec<OpTiming>], kind: OpKind| {
        let mut v: Vec<f64> = reps.iter().flatten().filter(|o| o.kind == kind).map(|o| op_ms(o, tp)).collect();
        median(&mut v)
    };
    let mut mlp = Vec::new();
    let mut attention = Vec::new();
    for (p, reps) in points.iter().zip(&timings) {
        match *p {
            Point::Mlp(n) => {
                let mut ms = [0.0; 10];
                for (i, (_, kind)) in MLP_COLUMNS.iter().enumerate() {
                    ms[i] = med(reps, *kind);
                }
                mlp.push(MlpPoint { tokens: n, ms });
            }
            Point::Prefill(c, kv) => {
                attention.push(AttnPoint { prefill: true, batch: 1, chunk: c, kv, ms: med(reps, OpKind::Attention) })
            }
            Point::Decode(n, kv) => {
                attention.push(AttnPoint { prefill: false, batch: n, chunk: 0, kv, ms: med(reps, OpKind::Attention) })
            }
        }
    }
    drop(r);
    progress(steps, steps, "peak GEMM rate");
    let peak_gflops = measure_peak(b, devices[0])?;
    progress(steps, steps, "done");
    let read_gbs =
        if b.kind() == "cuda" { measure_copy_gbs(b, devices[0])? } else { crate::bench::peak::read_bandwidth_gbs(256) };
    Ok(Profile { tp, mlp, attention, peak_gflops, read_gbs, gpu: None })
}

/// One profiled point: the MLP ops at a token count, a prefill chunk after some KV, or
/// a decode batch at a KV length.
#[derive(Debug, Clone, Copy)]
enum Point {
    Mlp(u32),
    Prefill(u32, u32),
    Decode(u32, u32),
}

impl Point {
    fn tokens(self) -> u32 {
        match self {
            Point::Mlp(n) | Point::Prefill(n, _) | Point::Decode(n, _) => n,
        }
    }

    fn what(self) -> String {
        match self {
            Point::Mlp(n) => format!("mlp ops at {n} tokens"),
            Point::Prefill(c, kv) => format!("prefill attention, chunk {c} after {kv}"),
            Point::Decode(n, kv) => format!("decode attention, {n} × {kv} KV"),
        }
    }
}

fn write_atomic(path: &Path, text: &str) -> Result<(), ExecError> {
    let e = |e: std::io::Error| ExecError::Checkpoint { path: path.display().to_string(), msg: e.to_string() };
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, text).map_err(e)?;
    std::fs::rename(&tmp, path).map_err(e)
}

/// What a profile measures of `model`: the model itself, or for a mixture of experts its
/// dense twin of one expert's width. Vidur's `mlp.csv` has one up and one down
/// projection per layer, and the cost model prices an expert GEMM as that class at its
/// routed token count (`OpKind::cost_class`), so the columns hold a dense MLP of the
/// expert's shape; the router and its top-k are left out (priced as a small GEMM).
pub fn profiled_model(model: &ExecModel) -> ExecModel {
    let mut m = model.clone();
    if let Some(moe) = m.config.moe.take() {
        m.config.intermediate_size = moe.expert_intermediate;
    }
    m
}

/// Writes `DIR/<model>/{mlp.csv, attention.csv, model_config.yml}` and
/// `DIR/device_config.yml` (the measured peak, memory, devices).
pub fn write(dir: &Path, model: &ExecModel, p: &Profile, memory_bytes: u64, devices: usize) -> Result<(), ExecError> {
    let model = &profiled_model(model);
    let c = &model.config;
    let folder = dir.join(&c.name);
    std::fs::create_dir_all(&folder)
        .map_err(|e| ExecError::Checkpoint { path: folder.display().to_string(), msg: e.to_string() })?;
    let mut mlp = MLP_COLUMNS.iter().map(|(n, _)| format!("time_stats.{n}.median")).collect::<Vec<_>>().join(",");
    mlp += ",n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers\n";
    for r in &p.mlp {
        let t: Vec<String> = r.ms.iter().map(|v| format!("{v:.6}")).collect();
        mlp += &format!(
            "{},{},{},{},{},{},{},{},{}\n",
            t.join(","),
            c.num_attention_heads,
            c.num_key_value_heads,
            c.hidden_size,
            c.intermediate_size,
            c.vocab_size,
            if c.gated_mlp { "True" } else { "False" },
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
    // The layout as Vidur's keys say it (what `ModelConfig::from_vidur_yaml` reads back).
    let act = match c.activation {
        slicesched_model::Act::Silu => "silu",
        slicesched_model::Act::Gelu => "gelu",
        slicesched_model::Act::GeluTanh => "gelu_new",
    };
    let norm = if c.norm == slicesched_model::Norm::Layer { "layer_norm" } else { "rms_norm" };
    let mut cfg = format!(
        "num_layers: {}\nnum_q_heads: {}\nnum_kv_heads: {}\nembedding_dim: {}\nmlp_hidden_dim: {}\nmax_position_embeddings: {}\nuse_gated_mlp: {}\nuse_bias: {}\nuse_qkv_bias: {}\nactivation: {act}\nnorm: {norm}\npost_attn_norm: {}\nrope_theta: {}\nvocab_size: {}\nis_neox_style: true\n",
        c.num_hidden_layers,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.hidden_size,
        c.intermediate_size,
        model.numerics.max_positions,
        c.gated_mlp,
        c.biases.o || c.biases.mlp,
        c.biases.qkv,
        !c.parallel_block,
        model.numerics.rope_theta,
        c.vocab_size
    );
    if let Some(r) = c.rotary_dim {
        cfg += &format!("partial_rotary_factor: {}\n", r as f64 / c.head_dim as f64);
    }
    write_atomic(&folder.join("mlp.csv"), &mlp)?;
    write_atomic(&folder.join("attention.csv"), &attn)?;
    write_atomic(&folder.join("model_config.yml"), &cfg)?;
    write_atomic(&dir.join("device_config.yml"), &device_config(p, memory_bytes, devices))
}

/// The catalog GPU a driver's device name is (`NVIDIA H100 80GB HBM3` → `H100-80GB`),
/// when its model number is a catalog entry's and its memory that entry's (an A100
/// 40GB is not the catalog's A100-80GB).
pub fn catalog_gpu(device_name: &str, memory_bytes: u64) -> Option<slicesched_hw::GpuSku> {
    let up = device_name.to_ascii_uppercase();
    let words: Vec<&str> = up.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
    slicesched_hw::catalog().into_iter().find(|s| {
        let model = s.name.split('-').next().unwrap_or(&s.name).to_ascii_uppercase();
        // The driver reports a little less than the marketing size (GiB, minus what
        // the firmware keeps): within 10 %.
        words.contains(&model.as_str()) && (memory_bytes as f64 / s.memory as f64 - 1.0).abs() < 0.1
    })
}

/// Ops are timed as `run` launches them, one at a time on an idle device: their launch
/// is in their time, which the cost model's fit then keeps as a floor.
const OP_TIMING: &str = "op_timing: launched\n";

/// `device_config.yml`: a catalog GPU by its name (with the catalog's datasheet peak,
/// which `cost validate` checks the name against) and what was measured beside it; a GPU
/// outside the catalog as a new one with its measured figures; a CPU device likewise.
pub fn device_config(p: &Profile, memory_bytes: u64, devices: usize) -> String {
    let gib = memory_bytes as f64 / (1u64 << 30) as f64;
    let measured =
        format!("measured_fp16_tflops: {:.4}\nmeasured_hbm_gbps: {:.2}\n{OP_TIMING}", p.peak_gflops / 1e3, p.read_gbs);
    let Some(g) = &p.gpu else {
        // A CPU device is in no GPU catalog: the file names it and gives its measured
        // memory bandwidth, which is what `cost validate --fit` needs to read it as a new device.
        return format!(
            "# Measured by slicesched profile: the best bf16 GEMM rate of one device and one core's read bandwidth.\nname: cpu-executor\nfp16_tflops: {:.4}\ntotal_memory_gb: {gib:.3}\nhbm_gbps: {:.2}\nnum_devices_per_node: {devices}\n{OP_TIMING}",
            p.peak_gflops / 1e3,
            p.read_gbs
        );
    };
    let head = format!(
        "# Measured by slicesched profile on {} ({} SMs, {gib:.1} GiB): best bf16 GEMM (8192³) and device-to-device copy.\n",
        g.name, g.sms
    );
    match catalog_gpu(&g.name, g.memory_bytes) {
        Some(s) => format!(
            "{head}name: {}\nfp16_tflops: {:.1}\ntotal_memory_gb: {}\nnum_devices_per_node: {devices}\n{measured}",
            s.name,
            s.peak_flops / 1e12,
            s.memory >> 30
        ),
        None => {
            let name: String =
                g.name.trim().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
            format!(
                "{head}name: {name}\nfp16_tflops: {:.4}\ntotal_memory_gb: {gib:.3}\nhbm_gbps: {:.2}\nsm_count: {}\nnum_devices_per_node: {devices}\n{measured}",
                p.peak_gflops / 1e3,
                p.read_gbs,
                g.sms
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn profile(gpu: Option<GpuFacts>) -> Profile {
        Profile { tp: 1, mlp: vec![], attention: vec![], peak_gflops: 790_500.0, read_gbs: 4100.0, gpu }
    }

    #[test]
    fn driver_names_map_to_the_catalog() {
        let name = |n: &str, gib: u64| catalog_gpu(n, gib * GIB - (500 << 20)).map(|s| s.name);
        assert_eq!(name("NVIDIA H200", 141).as_deref(), Some("H200-141GB"));
        assert_eq!(name("NVIDIA H100 80GB HBM3", 80).as_deref(), Some("H100-80GB"));
        assert_eq!(name("NVIDIA A100-SXM4-80GB", 80).as_deref(), Some("A100-80GB"));
        // The 40 GB A100 is not the catalog's, nor is a GPU it lacks.
        assert_eq!(name("NVIDIA A100-SXM4-40GB", 40), None);
        assert_eq!(name("NVIDIA GeForce RTX 4090", 24), None);
    }

    #[test]
    fn a_catalog_gpu_is_named_with_its_datasheet_peak_and_the_measure_beside_it() {
        let h200 = GpuFacts { name: "NVIDIA H200".into(), memory_bytes: 140 * GIB, sms: 132 };
        let text = device_config(&profile(Some(h200)), 140 * GIB, 1);
        let c = slicesched_hw::DeviceConfig::parse(&text, "d.yml").unwrap();
        assert_eq!(c.resolve(&[], "d.yml").unwrap().name, "H200-141GB", "{text}");
        assert_eq!((c.measured_fp16_tflops, c.measured_hbm_gbps), (Some(790.5), Some(4100.0)));
        assert!(text.contains("NVIDIA H200") && text.contains("132 SMs"), "{text}");
    }

    #[test]
    fn another_gpu_is_a_new_device_with_its_measured_figures() {
        let g = GpuFacts { name: "NVIDIA GeForce RTX 4090".into(), memory_bytes: 24 * GIB, sms: 128 };
        let text = device_config(&profile(Some(g)), 24 * GIB, 1);
        let sku = slicesched_hw::DeviceConfig::parse(&text, "d.yml").unwrap().resolve(&[], "d.yml").unwrap();
        assert_eq!(sku.name, "NVIDIA-GeForce-RTX-4090");
        assert!((sku.peak_flops / 1e12 - 790.5).abs() < 1e-6 && (sku.hbm_bw / 1e9 - 4100.0).abs() < 1e-6);
        assert_eq!(sku.sm_count, 128);
        // CPU devices keep their layout.
        assert!(device_config(&profile(None), 8 * GIB, 1).contains("name: cpu-executor"));
    }
}
