//! `slicesched bench exec`: the executor's figures side by side in one run — GEMM
//! GFLOP/s of the backend against `matrixmultiply` used bare and against the machine's
//! measured peak, the executor's overhead per op beyond its kernel, and tokens/s of
//! tiny models end to end. Every figure is the best (GEMMs) or the median (overheads)
//! of repeated runs: the best is what the code can do, the spread is the machine's noise.
//! Work done on one thread is timed by that thread's CPU time (see [`Timer`]), so other
//! processes taking the core away do not count; overheads are wall time by definition.

pub mod batch;
pub mod peak;

use crate::backend::{Arena, Backend, DeviceId, Dtype, HostData, View};
use crate::cpu::math::{matmul, Scratch};
use crate::kernels::Kernel;
use crate::model::{ExecModel, HostWeights};
use crate::runner::{ExecBatch, OpPlace, Runner, SeqWork};
use crate::{CpuBackend, CpuDeviceSpec, ExecError};
use half::bf16;
use serde::Serialize;
use slicesched_model::ModelConfig;
use std::hint::black_box;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// GEMM shapes (m, n, k).
    pub gemms: Vec<(usize, usize, usize)>,
    pub reps: usize,
    /// Launches timed for the overhead figures.
    pub launches: usize,
    /// Tiny models for tokens/s, with (batch, prompt tokens, decode steps).
    pub models: Vec<String>,
    pub generate: (usize, usize, usize),
    /// Buffer read for the bandwidth figure.
    pub bandwidth_mib: usize,
}

impl BenchOptions {
    pub fn new(quick: bool) -> Self {
        let mut gemms = vec![(1, 384, 256), (1, 1536, 256), (1, 1536, 1024), (1, 5632, 1024), (1, 8192, 4096)];
        gemms.extend([1, 2, 4, 8, 16, 32, 128, 512].map(|m| (m, 1024, 1024)));
        Self {
            gemms,
            reps: if quick { 3 } else { 7 },
            launches: if quick { 500 } else { 3000 },
            models: if quick {
                vec!["tiny-2l".into()]
            } else {
                vec!["tiny-2l".into(), "tiny-4l".into(), "tiny-3l-1k".into()]
            },
            generate: (4, 128, if quick { 8 } else { 32 }),
            bandwidth_mib: if quick { 64 } else { 256 },
        }
    }
}

/// One GEMM shape, GFLOP/s of each way of running it.
#[derive(Debug, Clone, Serialize)]
pub struct GemmRow {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// A `Kernel::Gemm` launched on the CPU backend (its kernel time; bf16 in and out).
    pub backend: f64,
    /// The same math in-thread: the backend's batch-invariant kernel alone.
    pub kernel: f64,
    /// `matrixmultiply::sgemm` used bare on f32 operands already in memory.
    pub bare: f64,
    /// Weight bytes the backend streamed per second (GB/s).
    pub backend_weight_gbs: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Overhead {
    /// Host time from `launch` to the completed event seen, minus the kernel (µs).
    pub launch_to_seen_us_p50: f64,
    pub launch_to_seen_us_p90: f64,
    /// Back-to-back launches on one stream: per-op time beyond the kernels (µs).
    pub pipelined_us: f64,
    /// `slicesched run`'s unit: one op of a decode iteration through `Runner::step`
    /// (buffers, metadata, launches, wait), minus its kernels (µs).
    pub runner_step_us_p50: f64,
    pub runner_step_us_p90: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Tokens {
    pub model: String,
    pub batch: usize,
    pub prompt: usize,
    pub steps: usize,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// Wall time per decode step (ms).
    pub decode_step_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExecBench {
    /// The machine's measured peak: the better of the FMA loop and the best bare GEMM
    /// (a GEMM kernel tuned by hand can beat a simple FMA loop's issue rate).
    pub peak_gflops: f64,
    pub fma_peak_gflops: f64,
    pub fma_peak_kind: &'static str,
    /// The best bare `matrixmultiply` rate over the shapes (the attainable GEMM peak).
    pub bare_best_gflops: f64,
    pub read_gbs: f64,
    pub gemm: Vec<GemmRow>,
    pub overhead: Overhead,
    pub tokens: Vec<Tokens>,
}

/// Times work on the calling thread by its CPU time (the wall clock where that cannot
/// be read): a shared machine's other processes do not stretch the figure.
pub struct Timer {
    cpu: u64,
    wall: Instant,
}

impl Timer {
    pub fn start() -> Self {
        Self { cpu: crate::cpu::thread_cpu_ns(), wall: Instant::now() }
    }
    pub fn ns(&self) -> u64 {
        let cpu = crate::cpu::thread_cpu_ns().saturating_sub(self.cpu);
        let wall = self.wall.elapsed().as_nanos() as u64;
        if cpu == 0 {
            wall
        } else {
            cpu.min(wall)
        }
    }
}

/// Nearest-rank quantile (NaN of nothing); sorts `v`. What the executor's figures
/// (benchmarks, `run`'s fidelity) report.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(f64::NAN)
}

fn noise(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * 2654435761 + seed * 97) % 1999) as f32 / 1999.0 * 2.0 * scale - scale).collect()
}

fn best_ns(reps: usize, mut f: impl FnMut() -> u64) -> u64 {
    f();
    (0..reps.max(1)).map(|_| f()).min().unwrap_or(1).max(1)
}

fn gemm_row(b: &CpuBackend, (m, n, k): (usize, usize, usize), reps: usize) -> Result<GemmRow, ExecError> {
    let (xf, wf) = (noise(m * k, 1, 1.0), noise(n * k, 2, 0.05));
    let (xb, wb): (Vec<bf16>, Vec<bf16>) =
        (xf.iter().map(|v| bf16::from_f32(*v)).collect(), wf.iter().map(|v| bf16::from_f32(*v)).collect());
    let flops = 2.0 * (m * n * k) as f64;
    let dev = DeviceId(0);
    let alloc = |d: Dtype, len| b.alloc(dev, Arena::Workspace, d, len).map(|id| View::whole(id, len));
    let (x, w, y) = (alloc(Dtype::Bf16, m * k)?, alloc(Dtype::Bf16, n * k)?, alloc(Dtype::Bf16, m * n)?);
    b.upload(x, &HostData::Bf16(xb.clone()))?;
    b.upload(w, &HostData::Bf16(wb.clone()))?;
    let s = b.stream(dev, 0)?;
    let mut err = None;
    let backend = best_ns(reps, || {
        match b.launch(s, Kernel::Gemm { bias: None, x, w, y, m, n, k }, &[]).and_then(|e| e.wait()) {
            Ok(t) => {
                if t.busy_ns > 0 {
                    t.busy_ns
                } else {
                    t.duration_ns()
                }
            }
            Err(e) => {
                err = Some(e);
                1
            }
        }
    });
    for v in [x, w, y] {
        b.free(v.buf)?;
    }
    if let Some(e) = err {
        return Err(e);
    }
    let mut sc = Scratch::default();
    let kernel = best_ns(reps, || {
        let t = Timer::start();
        matmul(&xb, &wb, (m, n, k), &mut sc);
        black_box(&sc.y);
        t.ns()
    });
    let mut yf = vec![0f32; m * n];
    let bare = best_ns(reps, || {
        let t = Timer::start();
        // SAFETY: x is m×k row-major, w is n×k row-major read as k×n (strides 1, k),
        // y is m×n row-major; all sized exactly above.
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                xf.as_ptr(),
                k as isize,
                1,
                wf.as_ptr(),
                1,
                k as isize,
                0.0,
                yf.as_mut_ptr(),
                n as isize,
                1,
            )
        };
        black_box(&yf);
        t.ns()
    });
    let rate = |ns: u64| flops / ns as f64;
    Ok(GemmRow {
        m,
        n,
        k,
        backend: rate(backend),
        kernel: rate(kernel),
        bare: rate(bare),
        backend_weight_gbs: (2 * n * k) as f64 / backend as f64,
    })
}

fn overhead(b: &CpuBackend, launches: usize) -> Result<Overhead, ExecError> {
    let dev = DeviceId(0);
    let v = |b: &CpuBackend| b.alloc(dev, Arena::Workspace, Dtype::Bf16, 1).map(|id| View::whole(id, 1));
    let (a, c, out) = (v(b)?, v(b)?, v(b)?);
    let s = b.stream(dev, 0)?;
    let add = || Kernel::Add { a, b: c, out };
    let mut seen = Vec::with_capacity(launches);
    for i in 0..launches + 50 {
        let t0 = b.now_ns();
        let t = b.launch(s, add(), &[])?.wait()?;
        let t1 = b.now_ns();
        if i >= 50 {
            seen.push((t1 - t0).saturating_sub(t.duration_ns()) as f64 / 1e3);
        }
    }
    let t0 = b.now_ns();
    let evs = (0..launches).map(|_| b.launch(s, add(), &[])).collect::<Result<Vec<_>, _>>()?;
    let mut kernels = 0;
    for e in &evs {
        kernels += e.wait()?.duration_ns();
    }
    let pipelined = (b.now_ns() - t0).saturating_sub(kernels) as f64 / 1e3 / launches as f64;
    for x in [a, c, out] {
        b.free(x.buf)?;
    }
    let (p50, p90) = (quantile(&mut seen.clone(), 0.5), quantile(&mut seen, 0.9));
    let mut steps = runner_steps(b, launches / 30 + 1)?;
    Ok(Overhead {
        launch_to_seen_us_p50: p50,
        launch_to_seen_us_p90: p90,
        pipelined_us: pipelined,
        runner_step_us_p50: quantile(&mut steps.clone(), 0.5),
        runner_step_us_p90: quantile(&mut steps, 0.9),
    })
}

fn tiny(name: &str) -> Result<ExecModel, ExecError> {
    let c = ModelConfig::preset(name).map_err(|e| ExecError::Model(e.to_string()))?;
    let mut m = ExecModel::new(c);
    m.numerics.max_positions = m.numerics.max_positions.min(4096);
    Ok(m)
}

/// Decode iterations of tiny-2l stepped op by op, as `slicesched run` drives them.
fn runner_steps(b: &CpuBackend, iters: usize) -> Result<Vec<f64>, ExecError> {
    let model = tiny("tiny-2l")?;
    let w = HostWeights::random(&model, 3);
    let mut r = Runner::new(b);
    let t = r.load_tenant(model, &w, &[DeviceId(0)], 64)?;
    let mut out = Vec::new();
    for i in 0..iters + 2 {
        let batch = ExecBatch {
            seqs: vec![SeqWork { seq: 1, tokens: vec![7], start_pos: 100, prefill: false, samples: true }],
        };
        let mut st = r.begin(t, &batch)?;
        for op in 0..st.dag.len() {
            let t0 = b.now_ns();
            let o = r.step(&mut st, op, OpPlace { group: 0, priority: 0 })?;
            let wall = b.now_ns() - t0;
            if i >= 2 {
                out.push(wall.saturating_sub(o.kernel_ns) as f64 / 1e3);
            }
        }
        r.end(st, true);
    }
    Ok(out)
}

/// Tokens/s of one tiny model on one device of `b`: one prefill of `batch` prompts, then
/// `steps` decode steps of the batch (also the baseline `bench live` sets the server against).
pub fn tokens(b: &CpuBackend, name: &str, (batch, prompt, steps): (usize, usize, usize)) -> Result<Tokens, ExecError> {
    let model = tiny(name)?;
    let vocab = model.vocab() as i32;
    let w = HostWeights::random(&model, 5);
    let mut r = Runner::new(b);
    let blocks = batch * (prompt + steps + 1).div_ceil(16) + 1;
    let t = r.load_tenant(model, &w, &[DeviceId(0)], blocks)?;
    let home = |_: u32, _: slicesched_model::OpKind, _: slicesched_model::Segment| OpPlace { group: 0, priority: 0 };
    let seqs = (0..batch as u64)
        .map(|s| SeqWork {
            seq: s,
            tokens: (0..prompt as i32).map(|i| (i * 31 + s as i32 * 7) % vocab).collect(),
            start_pos: 0,
            prefill: true,
            samples: true,
        })
        .collect();
    let t0 = Instant::now();
    let mut last = r.run(t, &ExecBatch { seqs }, &home, false)?.tokens;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    for step in 0..steps {
        let seqs = last
            .iter()
            .map(|&(seq, tok)| SeqWork {
                seq,
                tokens: vec![tok],
                start_pos: prompt + step,
                prefill: false,
                samples: true,
            })
            .collect();
        last = r.run(t, &ExecBatch { seqs }, &home, false)?.tokens;
    }
    let decode_s = t0.elapsed().as_secs_f64();
    Ok(Tokens {
        model: name.into(),
        batch,
        prompt,
        steps,
        prefill_tok_s: (batch * prompt) as f64 / prefill_s,
        decode_tok_s: (batch * steps) as f64 / decode_s,
        decode_step_ms: decode_s * 1e3 / steps.max(1) as f64,
    })
}

/// Runs every measurement, reporting progress as (done, total, what).
pub fn run(opts: &BenchOptions, progress: &mut dyn FnMut(usize, usize, &str)) -> Result<ExecBench, ExecError> {
    let total = 3 + opts.gemms.len() + opts.models.len();
    let b = CpuBackend::new(&[CpuDeviceSpec { memory_bytes: 8 << 30, cores: 1 }]);
    progress(0, total, "FMA peak");
    let (fma, kind) = peak::fma_peak_gflops();
    progress(1, total, "memory bandwidth");
    let read = peak::read_bandwidth_gbs(opts.bandwidth_mib);
    let mut gemm = Vec::new();
    for (i, &shape) in opts.gemms.iter().enumerate() {
        progress(2 + i, total, &format!("GEMM {}×{}×{}", shape.0, shape.1, shape.2));
        gemm.push(gemm_row(&b, shape, opts.reps)?);
    }
    progress(2 + gemm.len(), total, "launch overhead");
    let overhead = overhead(&b, opts.launches)?;
    let mut toks = Vec::new();
    for (i, m) in opts.models.iter().enumerate() {
        progress(3 + gemm.len() + i, total, &format!("tokens/s of {m}"));
        toks.push(tokens(&b, m, opts.generate)?);
    }
    progress(total, total, "done");
    let bare_best = gemm.iter().map(|g| g.bare).fold(0.0, f64::max);
    Ok(ExecBench {
        peak_gflops: fma.max(bare_best),
        fma_peak_gflops: fma,
        fma_peak_kind: kind,
        bare_best_gflops: bare_best,
        read_gbs: read,
        gemm,
        overhead,
        tokens: toks,
    })
}
