//! Sections (a) probe, (c) GEMM throughput, (d) launch overhead and event cost,
//! (e) priority streams, (f) copies, (g) memory.

use crate::harness::Harness;
use anyhow::Result;
use half::bf16;
use serde_json::json;
use slicesched_exec::cuda::{self, CudaBackend};
use slicesched_exec::kernels::Kernel;
use slicesched_exec::*;
use std::time::Instant;

pub fn probe(h: &mut Harness) -> Result<(bool, String)> {
    let l = cuda::libraries();
    let nv = cuda::nvrtc::version().ok();
    // Which libraries the dynamic loader actually mapped.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut libs: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| ["libcuda", "libcublas", "libnvrtc", "libnccl"].iter().any(|n| p.contains(n)))
        .collect();
    libs.sort();
    libs.dedup();
    // cuda_bf16.h without and with the toolkit's include folder (NVRTC ships no headers).
    let src =
        "#include <cuda_bf16.h>\nextern \"C\" __global__ void k(__nv_bfloat16* x) { x[0] = __float2bfloat16(1.0f); }\n";
    let base = vec!["--gpu-architecture=compute_90".to_string()];
    let no_inc = cuda::nvrtc::compile_source(src, &base).map(|_| "ok").unwrap_or("fails");
    let home = std::env::var("CUDA_HOME").unwrap_or_else(|_| "/usr/local/cuda".into());
    let mut with = base.clone();
    with.push(format!("-I{home}/include"));
    let with_inc = cuda::nvrtc::compile_source(src, &with).map(|_| "ok").unwrap_or("fails");
    h.emit(json!({
        "section": "a_probe", "libraries": { "driver": l.driver, "cublas": l.cublas, "nvrtc": l.nvrtc, "nccl": l.nccl },
        "nvrtc_version": nv, "loaded": libs, "cuda_bf16_h": { "no_include": no_inc, "with_include": with_inc, "cuda_home": home },
    }));
    let ok = l.driver && l.cublas && l.nvrtc;
    Ok((ok, format!("driver {} cublas {} nvrtc {:?}; bf16 header {no_inc}/{with_inc} (-I)", l.driver, l.cublas, nv)))
}

pub fn memory(h: &mut Harness, g: &CudaBackend) -> Result<(bool, String)> {
    let before = g.describe(DeviceId(0))?;
    // A stream brings its cuBLAS handle and workspace: measure what that adds.
    g.stream(DeviceId(0), 7)?;
    let after = g.describe(DeviceId(0))?;
    let delta =
        after["used_bytes_now"].as_u64().unwrap_or(0) as i64 - before["used_bytes_now"].as_u64().unwrap_or(0) as i64;
    h.emit(json!({ "section": "g_memory", "device": before, "after_one_stream": after, "stream_with_cublas_bytes": delta }));
    let mib = |v: &serde_json::Value| v.as_u64().unwrap_or(0) as f64 / (1 << 20) as f64;
    Ok((
        true,
        format!(
            "{} {}: used {:.0} MiB after setup, +{:.1} MiB per stream (cuBLAS), pool high {:.0} MiB; modules {}",
            after["name"].as_str().unwrap_or("?"),
            after["compute_capability"].as_str().unwrap_or("?"),
            mib(&before["used_bytes_now"]),
            delta as f64 / (1 << 20) as f64,
            mib(&after["pool_used_high_bytes"]),
            after["modules"]
        ),
    ))
}

fn alloc_rand(g: &CudaBackend, dtype: Dtype, n: usize, seed: u64) -> Result<View> {
    let id = g.alloc(DeviceId(0), Arena::Workspace, dtype, n)?;
    let v = View::whole(id, n);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let data = match dtype {
        Dtype::Bf16 => HostData::Bf16((0..n).map(|_| bf16::from_f32(next())).collect()),
        Dtype::F32 => HostData::F32((0..n).map(|_| next()).collect()),
        Dtype::I32 => HostData::I32(vec![0; n]),
    };
    g.upload(v, &data)?;
    Ok(v)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Median TFLOP/s of `reps` timed GEMMs (after 5 warm-ups), rotating 3 inputs.
#[allow(clippy::too_many_arguments)]
fn gemm_tflops(
    h: &Harness,
    g: &CudaBackend,
    s: StreamId,
    m: usize,
    n: usize,
    k: usize,
    f32_out: bool,
    reps: usize,
) -> Result<f64> {
    let xs = (0..3).map(|i| alloc_rand(g, Dtype::Bf16, m * k, i)).collect::<Result<Vec<_>>>()?;
    let w = alloc_rand(g, Dtype::Bf16, n * k, 9)?;
    let y = g.alloc(DeviceId(0), Arena::Workspace, if f32_out { Dtype::F32 } else { Dtype::Bf16 }, m * n)?;
    let mut times = Vec::new();
    for i in 0..5 + reps {
        if h.over() {
            break;
        }
        let e = g.launch(s, Kernel::Gemm { bias: None, x: xs[i % 3], w, y: View::whole(y, m * n), m, n, k }, &[])?;
        let t = e.wait()?;
        if i >= 5 {
            times.push(t.busy_ns as f64);
        }
    }
    for v in xs.iter().chain([&w]) {
        g.free(v.buf)?;
    }
    g.free(y)?;
    let med = pct(&mut times, 0.5);
    Ok(2.0 * (m * n * k) as f64 / med / 1e3)
}

pub fn gemm(h: &mut Harness, g: &CudaBackend) -> Result<(bool, String)> {
    let s = g.stream(DeviceId(0), 0)?;
    let peak = gemm_tflops(h, g, s, 8192, 8192, 8192, false, 20)?;
    h.emit(json!({ "section": "c_gemm", "shape": [8192, 8192, 8192], "tflops": peak, "peak": true }));
    let shapes = [
        ("qkv", 6144, 4096, false),
        ("o", 4096, 4096, false),
        ("gate_up", 28672, 4096, false),
        ("down", 4096, 14336, false),
        ("lm_head", 128256, 4096, true),
    ];
    let mut low = Vec::new();
    for t in [1usize, 16, 128, 1024, 4096] {
        for (name, n, k, f) in shapes {
            if h.over() {
                break;
            }
            let tf = gemm_tflops(h, g, s, t, n, k, f, 20)?;
            h.emit(
                json!({ "section": "c_gemm", "op": name, "m": t, "n": n, "k": k, "tflops": tf, "of_peak": tf / peak }),
            );
            if t >= 1024 && tf < 0.7 * peak {
                low.push(format!("{name}@{t} {:.0}%", 100.0 * tf / peak));
            }
        }
    }
    Ok((low.is_empty(), format!("peak (8192³) {peak:.0} TFLOP/s; large-T shapes under 70%: {low:?}")))
}

pub fn launch(h: &mut Harness, g: &CudaBackend) -> Result<(bool, String)> {
    let s = g.stream(DeviceId(0), 0)?;
    let n = 10_000;
    // Host cost of submitting one empty kernel with its two timing events.
    let t = Instant::now();
    let mut evs = Vec::with_capacity(n);
    for _ in 0..n {
        evs.push(g.launch_spin(s, 0, 1, 1, &[])?);
    }
    let submit_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let times: Vec<Timing> = evs.iter().map(|e| e.wait()).collect::<Result<_, _>>()?;
    let gpu_period_us = (times[n - 1].end_ns - times[0].start_ns) as f64 / 1e3 / n as f64;
    // The same kernels 100 to an op (one event pair per 100): the events' share.
    let batch = 100;
    let e = g.launch_spin(s, 0, 1, batch as u32, &[])?;
    let tb = e.wait()?;
    let bare_us = tb.duration_ns() as f64 / 1e3 / batch as f64;
    // Completion seen by the host (collector latency).
    let mut lat = Vec::new();
    for _ in 0..200 {
        let e = g.launch_spin(s, 0, 1, 1, &[])?;
        let t = e.wait()?;
        lat.push((g.now_ns().saturating_sub(t.end_ns)) as f64 / 1e3);
    }
    let lat50 = pct(&mut lat, 0.5);
    // Where the host's submit time goes: the bare launch, the launch between its timing
    // events, the whole submit, and the whole submit while the collector does not poll.
    let ([raw, raw_ev, whole], last) = g.submit_breakdown(s, n)?;
    last.wait()?;
    g.pause_collector(true);
    let quiet = g.submit_breakdown(s, n);
    // Released before any wait: a paused collector completes nothing.
    g.pause_collector(false);
    let ([_, _, quiet], last) = quiet?;
    last.wait()?;
    h.emit(json!({ "section": "d_launch", "submit_us_per_op": submit_us, "gpu_period_us_per_op": gpu_period_us,
        "gpu_period_us_per_kernel_without_events": bare_us, "event_cost_us": gpu_period_us - bare_us, "completion_seen_p50_us": lat50,
        "host_us_bare_launch": raw, "host_us_launch_with_events": raw_ev, "host_us_submit": whole, "host_us_submit_collector_paused": quiet }));
    Ok((submit_us <= 10.0, format!(
        "submit {submit_us:.1} µs/op, GPU {gpu_period_us:.1} µs/op vs {bare_us:.1} without events, host sees completion after {lat50:.0} µs (p50); host µs/op: bare launch {raw:.1}, with events {raw_ev:.1}, submit {whole:.1}, submit with the collector paused {quiet:.1}"
    )))
}

pub fn priority(h: &mut Harness, g: &CudaBackend) -> Result<(bool, String)> {
    let d = DeviceId(0);
    let sms = g.devices()[0].compute_units;
    let (lo, hi, eq) = (g.stream(d, 1)?, g.stream(d, -1)?, g.stream(d, 2)?);
    let x = alloc_rand(g, Dtype::Bf16, 4096, 1)?;
    let wn = alloc_rand(g, Dtype::Bf16, 4096, 2)?;
    let xn = g.alloc(d, Arena::Workspace, Dtype::Bf16, 4096)?;
    let w = alloc_rand(g, Dtype::Bf16, 4096 * 4096, 3)?;
    let y = g.alloc(d, Arena::Workspace, Dtype::Bf16, 4096)?;
    let big = 8192;
    let (bx, bw) = (alloc_rand(g, Dtype::Bf16, big * big, 4)?, alloc_rand(g, Dtype::Bf16, big * big, 5)?);
    let by = g.alloc(d, Arena::Workspace, Dtype::Bf16, big * big)?;
    let mut summary = Vec::new();
    for (load, probe_stream, label) in
        [("spin", hi, "spin/hi"), ("spin", eq, "spin/equal"), ("gemm", hi, "gemm/hi"), ("gemm", eq, "gemm/equal")]
    {
        if h.over() {
            break;
        }
        // Saturate the low stream for ~0.5 s: 50 µs spin blocks, 64 per SM, or long GEMMs.
        let mut last = None;
        let t0 = Instant::now();
        for _ in 0..if load == "spin" { 5000 } else { 350 } {
            last = Some(if load == "spin" {
                g.launch_spin(lo, 50_000, sms * 64, 1, &[])?
            } else {
                g.launch(
                    lo,
                    Kernel::Gemm { bias: None, x: bx, w: bw, y: View::whole(by, big * big), m: big, n: big, k: big },
                    &[],
                )?
            });
        }
        let mut durs = Vec::new();
        while durs.len() < 150 && t0.elapsed().as_secs_f64() < 4.0 && !h.over() {
            let a = g.launch(
                probe_stream,
                Kernel::RmsNorm {
                    x,
                    weight: wn,
                    out: View::whole(xn, 4096),
                    rows: 1,
                    width: 4096,
                    eps: 1e-5,
                    unit_offset: false,
                },
                &[],
            )?;
            let b = g.launch(
                probe_stream,
                Kernel::Gemm {
                    bias: None,
                    x: View::whole(xn, 4096),
                    w,
                    y: View::whole(y, 4096),
                    m: 1,
                    n: 4096,
                    k: 4096,
                },
                std::slice::from_ref(&a),
            )?;
            let (ta, tb) = (a.wait()?, b.wait()?);
            durs.push((tb.end_ns - ta.start_ns) as f64 / 1e3);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if let Some(l) = last {
            l.wait()?;
        }
        let (p50, p99) = (pct(&mut durs, 0.5), pct(&mut durs, 0.99));
        h.emit(json!({ "section": "e_priority", "load": load, "probe": label, "samples": durs.len(), "p50_us": p50, "p99_us": p99 }));
        summary.push(format!("{label} p50 {p50:.0} / p99 {p99:.0} µs"));
    }
    for v in [x, wn, w, bx, bw] {
        g.free(v.buf)?;
    }
    for b in [xn, y, by] {
        g.free(b)?;
    }
    Ok((true, summary.join("; ")))
}

pub fn copies(h: &mut Harness, g: &CudaBackend) -> Result<(bool, String)> {
    let d = DeviceId(0);
    let n = 128 << 20; // bf16 elements: 256 MiB
    let bytes = (2 * n) as f64;
    let a = alloc_rand(g, Dtype::Bf16, n, 1)?;
    let b = g.alloc(d, Arena::Workspace, Dtype::Bf16, n)?;
    let host = HostData::Bf16(vec![bf16::ONE; n]);
    // The backend's uploads and downloads, through its pinned chunks and pageable
    // (best of 3 each: the first pinned copy also allocates the chunks).
    let rate = |pinned: bool| -> Result<(f64, f64)> {
        g.set_pinned_staging(pinned);
        let (mut up, mut down) = (0.0f64, 0.0f64);
        for _ in 0..3 {
            let t = Instant::now();
            g.upload(a, &host)?;
            up = up.max(bytes / t.elapsed().as_secs_f64() / 1e9);
            let t = Instant::now();
            let back = g.download(a)?;
            down = down.max(bytes / t.elapsed().as_secs_f64() / 1e9);
            anyhow::ensure!(back == host, "a download differs from the upload (pinned {pinned})");
        }
        Ok((up, down))
    };
    let (h2d, d2h) = rate(false)?;
    let (h2d_pin, d2h_pin) = rate(true)?;
    let staging = g.describe(d)?["host_copies"].clone();
    let s = g.stream(d, 0)?;
    let e = g.copy(s, a, View::whole(b, n), &[])?.wait()?;
    let d2d = 2.0 * bytes / e.duration_ns() as f64; // read + write, GB/s
    g.free(a.buf)?;
    g.free(b)?;
    // The cross-context path on one GPU: the same ordinal opened twice, copied with
    // cuMemcpyPeerAsync. A real P2P/NVLink number needs two GPUs.
    let peer = match CudaBackend::try_new(&[0, 0]) {
        Ok(p) => {
            let src = p.alloc(DeviceId(0), Arena::Workspace, Dtype::Bf16, n)?;
            let dst = p.alloc(DeviceId(1), Arena::Workspace, Dtype::Bf16, n)?;
            let s = p.stream(DeviceId(1), 0)?;
            let t = p.copy(s, View::whole(src, n), View::whole(dst, n), &[])?.wait()?;
            Some(bytes / t.duration_ns() as f64)
        }
        Err(_) => None,
    };
    h.emit(json!({ "section": "f_copies", "bytes": bytes, "h2d_pageable_gbs": h2d, "d2h_pageable_gbs": d2h,
        "h2d_pinned_gbs": h2d_pin, "d2h_pinned_gbs": d2h_pin, "staging": staging,
        "d2d_gbs_read_plus_write": d2d, "peer_same_gpu_gbs": peer }));
    Ok((
        true,
        format!(
            "H2D {h2d_pin:.1} / D2H {d2h_pin:.1} GB/s pinned vs {h2d:.1} / {d2h:.1} pageable, D2D {d2d:.0} GB/s, peer path (same GPU) {:?} GB/s",
            peer.map(|p| p.round())
        ),
    ))
}

/// NCCL on one GPU: a 1-rank all-reduce through the backend (the library loads, a
/// communicator is made, the sum of one part is that part). Bandwidth needs two GPUs.
pub fn nccl(h: &mut Harness) -> Result<(bool, String)> {
    if !cuda::libraries().nccl {
        h.emit(json!({ "section": "f_nccl", "present": false }));
        return Ok((true, "skipped: no libnccl on the path (the runner's copies + Sum path is used)".into()));
    }
    let g = CudaBackend::try_new_with(&[0], cuda::NcclMode::Require)?;
    let d = DeviceId(0);
    let n = 16 << 20;
    let src = alloc_rand(&g, Dtype::Bf16, n, 3)?;
    let dst = View::whole(g.alloc(d, Arena::Workspace, Dtype::Bf16, n)?, n);
    let stream = g.stream(d, 0)?;
    let mut times = Vec::new();
    for _ in 0..6 {
        let r = ReduceRank { stream, src, dst, waits: vec![] };
        let ev = g.all_reduce(&[r])?.ok_or_else(|| anyhow::anyhow!("the backend declined NCCL"))?;
        times.push(ev[0].wait()?.duration_ns() as f64 / 1e3);
    }
    let same = g.download(src)? == g.download(dst)?;
    let us = pct(&mut times[1..].to_vec(), 0.5);
    let about = g.collectives();
    h.emit(json!({ "section": "f_nccl", "present": true, "elements": n, "us_p50": us, "sum_of_one_is_itself": same, "backend": about }));
    Ok((
        same,
        format!(
            "{about}: 1-rank all-reduce of {} MiB in {us:.0} µs, result {}",
            (2 * n) >> 20,
            if same { "exact" } else { "WRONG" }
        ),
    ))
}
