//! Submitting one op: its views resolved and checked on the host (the shape errors the
//! CPU backend gives, before anything is queued), its waits turned into stream waits on
//! the producers' end events, then start event, the work, end event.

use super::device::{cu, Dev, Module, StreamRt};
use super::memory::Buffer;
use super::timing::{OpEvents, Pending};
use super::{CudaBackend, Shared};
use crate::backend::{Dtype, Event, StreamId, View};
use crate::kernels::{Kernel, Scores, BLOCK_TOKENS};
use crate::ExecError;
use cudarc::driver::{result, CudaStream};
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) enum Work {
    Kernel(Kernel),
    Copy {
        src: View,
        dst: View,
    },
    /// `repeat` launches of the spin kernel inside one op (one pair of timing events):
    /// the GPU check's measure of what the events cost.
    Spin {
        ns: u64,
        blocks: u32,
        repeat: u32,
    },
}

/// The most parts one Sum kernel adds (its fixed argument list; tensor parallelism is at
/// most 8 GPUs a node).
const MAX_SUM_PARTS: usize = 8;
const BLOCK: u32 = 256;

/// A kernel argument, passed to cuLaunchKernel by address.
enum Arg {
    P(u64),
    I(i32),
    L(i64),
    F(f32),
}

impl Arg {
    fn addr(&mut self) -> *mut c_void {
        match self {
            Arg::P(v) => v as *mut u64 as *mut c_void,
            Arg::I(v) => v as *mut i32 as *mut c_void,
            Arg::L(v) => v as *mut i64 as *mut c_void,
            Arg::F(v) => v as *mut f32 as *mut c_void,
        }
    }
}

/// What one op does once its waits are queued.
enum Plan {
    Nothing,
    Launch { module: Arc<Module>, func: &'static str, grid: (u32, u32), block: u32, args: Vec<Arg>, repeat: u32 },
    Gemm { x: u64, w: u64, y: u64, y_f32: bool, mnk: (usize, usize, usize) },
    Copy { src: u64, dst: u64, bytes: usize, peer: Option<(usize, usize)> },
}

fn need(what: &str, have: usize, want: usize) -> Result<(), ExecError> {
    if have < want {
        return Err(ExecError::Launch(format!("{what}: view of {have} elements, shape needs {want}")));
    }
    Ok(())
}

fn int(v: usize) -> Result<i32, ExecError> {
    i32::try_from(v).map_err(|_| ExecError::Launch(format!("{v} exceeds a kernel's i32 argument")))
}

fn grid_stride(dev: &Dev, n: usize) -> u32 {
    (n.div_ceil(BLOCK as usize) as u64).clamp(1, dev.info.compute_units as u64 * 8) as u32
}

/// The buffers an op touches, resolved once.
struct Views<'a> {
    bk: &'a CudaBackend,
    dev: &'a Dev,
    bufs: Vec<Arc<Buffer>>,
}

impl Views<'_> {
    /// The address of `v`, which must hold `dtype` and live on the op's device.
    fn ptr(&mut self, v: View, dtype: Dtype) -> Result<u64, ExecError> {
        let b = self.bk.shared.buf(v.buf)?;
        if b.dtype != dtype {
            return Err(ExecError::Launch(format!("buffer {:?} holds {:?}, kernel wants {dtype:?}", v.buf, b.dtype)));
        }
        if b.device != self.dev.id {
            return Err(ExecError::Launch(format!(
                "a kernel on {} reads a buffer on cuda device {} (copy it first)",
                self.dev.info.name, b.device.0
            )));
        }
        let p = b.ptr_of(v)?;
        self.bufs.push(b);
        Ok(p)
    }
}

/// A kernel (or a feature of one) the CUDA kernel set does not have yet: the models that
/// need it run on the CPU backend (`Backend::refuses` stops them at load; this guards a
/// direct launch).
fn unsupported(what: &str) -> ExecError {
    ExecError::Launch(format!("{what}: not in the CUDA backend's kernel set (the CPU backend runs it)"))
}

fn plan_kernel(v: &mut Views, k: &Kernel) -> Result<Plan, ExecError> {
    use Arg::*;
    use Dtype::*;
    let out = k.output();
    if k.inputs().iter().any(|r| r.buf == out.buf) {
        return Err(ExecError::Launch(format!("{}: an input aliases the output buffer", k.name())));
    }
    let launch = |module: Arc<Module>, func: &'static str, grid: (u32, u32), args: Vec<Arg>| Plan::Launch {
        module,
        func,
        grid,
        block: BLOCK,
        args,
        repeat: 1,
    };
    Ok(match k {
        Kernel::Embedding { ids, table, out, hidden, scale } => {
            if scale.is_some() {
                return Err(unsupported("a scaled embedding"));
            }
            let t = ids.len;
            need("embedding out", out.len, t * hidden)?;
            if *hidden == 0 || t == 0 {
                return Ok(Plan::Nothing);
            }
            let args = vec![
                P(v.ptr(*ids, I32)?),
                P(v.ptr(*table, Bf16)?),
                P(v.ptr(*out, Bf16)?),
                I(int(*hidden)?),
                I(int(table.len / hidden)?),
            ];
            launch(v.dev.any_module()?, "embedding", (t as u32, 1), args)
        }
        Kernel::RmsNorm { x, weight, out, rows, width, eps, unit_offset } => {
            if *unit_offset {
                return Err(unsupported("RMSNorm with (1 + w) weights"));
            }
            need("rmsnorm x", x.len, rows * width)?;
            need("rmsnorm out", out.len, rows * width)?;
            need("rmsnorm weight", weight.len, *width)?;
            if *rows == 0 || *width == 0 {
                return Ok(Plan::Nothing);
            }
            let args =
                vec![P(v.ptr(*x, Bf16)?), P(v.ptr(*weight, Bf16)?), P(v.ptr(*out, Bf16)?), I(int(*width)?), F(*eps)];
            launch(v.dev.any_module()?, "rmsnorm", (int(*rows)? as u32, 1), args)
        }
        Kernel::GatherRows { x, rows, out, width } => {
            need("gather out", out.len, rows.len * width)?;
            if rows.len == 0 || *width == 0 {
                return Ok(Plan::Nothing);
            }
            let args = vec![
                P(v.ptr(*x, Bf16)?),
                P(v.ptr(*rows, I32)?),
                P(v.ptr(*out, Bf16)?),
                I(int(*width)?),
                I(int(x.len / width)?),
            ];
            launch(v.dev.any_module()?, "gather_rows", (int(rows.len)? as u32, 1), args)
        }
        Kernel::Gemm { x, w, bias, y, m, n, k } => {
            if bias.is_some() {
                return Err(unsupported("gemm with a bias"));
            }
            need("gemm x", x.len, m * k)?;
            need("gemm w", w.len, n * k)?;
            need("gemm y", y.len, m * n)?;
            let b = v.bk.shared.buf(y.buf)?;
            let y_f32 = match b.dtype {
                Bf16 => false,
                F32 => true,
                I32 => return Err(ExecError::Launch("gemm cannot write i32".into())),
            };
            let (xp, wp, yp) = (v.ptr(*x, Bf16)?, v.ptr(*w, Bf16)?, v.ptr(*y, b.dtype)?);
            Plan::Gemm { x: xp, w: wp, y: yp, y_f32, mnk: (*m, *n, *k) }
        }
        Kernel::Rope { qkv, positions, table, tokens, heads, max_pos, rotary } => {
            if *rotary != heads.dim {
                return Err(unsupported("partial rotary"));
            }
            need("rope qkv", qkv.len, tokens * heads.row())?;
            need("rope table", table.len, 2 * max_pos * (heads.dim / 2))?;
            need("rope positions", positions.len, *tokens)?;
            if *tokens == 0 {
                return Ok(Plan::Nothing);
            }
            let args = vec![
                P(v.ptr(*qkv, Bf16)?),
                P(v.ptr(*positions, I32)?),
                P(v.ptr(*table, F32)?),
                I(int(heads.q)?),
                I(int(heads.kv)?),
                I(int(*max_pos)?),
            ];
            launch(v.dev.module(heads.dim)?, "rope", (int(*tokens)? as u32, 1), args)
        }
        Kernel::CacheWrite { qkv, slots, cache, tokens, heads } => {
            need("cache_write qkv", qkv.len, tokens * heads.row())?;
            need("cache_write slots", slots.len, *tokens)?;
            if *tokens == 0 {
                return Ok(Plan::Nothing);
            }
            let args = vec![
                P(v.ptr(*qkv, Bf16)?),
                P(v.ptr(*slots, I32)?),
                P(v.ptr(*cache, Bf16)?),
                I(int(heads.q)?),
                I(int(heads.kv)?),
                L((cache.len / 2) as i64),
            ];
            launch(v.dev.module(heads.dim)?, "cache_write", (int(*tokens)? as u32, 1), args)
        }
        Kernel::Attention {
            qkv,
            cache,
            block_tables,
            q_start,
            ctx_lens,
            out,
            seqs,
            max_blocks,
            heads,
            window,
            scores,
        } => {
            if *window != 0 {
                return Err(unsupported("sliding-window attention"));
            }
            if *scores != Scores::default() {
                return Err(unsupported("attention with a query scale, soft-cap or ALiBi"));
            }
            need("attention q_start", q_start.len, seqs + 1)?;
            need("attention ctx_lens", ctx_lens.len, *seqs)?;
            need("attention block_tables", block_tables.len, seqs * max_blocks)?;
            int(max_blocks * BLOCK_TOKENS)?;
            // Rows live on the device (q_start); the grid covers every row both the qkv
            // and the out views can hold, and rows outside every sequence return at once.
            let rows = (qkv.len / heads.row().max(1)).min(out.len / (heads.q * heads.dim).max(1));
            if *seqs == 0 || rows == 0 || heads.q == 0 {
                return Ok(Plan::Nothing);
            }
            let args = vec![
                P(v.ptr(*qkv, Bf16)?),
                P(v.ptr(*cache, Bf16)?),
                P(v.ptr(*block_tables, I32)?),
                P(v.ptr(*q_start, I32)?),
                P(v.ptr(*ctx_lens, I32)?),
                P(v.ptr(*out, Bf16)?),
                I(int(*seqs)?),
                I(int(*max_blocks)?),
                I(int(heads.q)?),
                I(int(heads.kv)?),
                L((cache.len / 2) as i64),
            ];
            let m = v.dev.module(heads.dim)?;
            Plan::Launch {
                module: m,
                func: "paged_attention",
                grid: (int(rows)? as u32, int(heads.q)? as u32),
                // 32 · ATTN_WARPS of kernels.cu.
                block: 256,
                args,
                repeat: 1,
            }
        }
        Kernel::Add { a, b, out } => {
            need("add", a.len.min(b.len), out.len)?;
            if out.len == 0 {
                return Ok(Plan::Nothing);
            }
            let args = vec![P(v.ptr(*a, Bf16)?), P(v.ptr(*b, Bf16)?), P(v.ptr(*out, Bf16)?), L(out.len as i64)];
            launch(v.dev.any_module()?, "residual_add", (grid_stride(v.dev, out.len), 1), args)
        }
        Kernel::SiluMul { x, out, rows, inter } => {
            need("silu_mul x", x.len, rows * 2 * inter)?;
            need("silu_mul out", out.len, rows * inter)?;
            if rows * inter == 0 {
                return Ok(Plan::Nothing);
            }
            let args = vec![P(v.ptr(*x, Bf16)?), P(v.ptr(*out, Bf16)?), L(*rows as i64), I(int(*inter)?)];
            launch(v.dev.any_module()?, "silu_mul", (grid_stride(v.dev, rows * inter), 1), args)
        }
        Kernel::LayerNorm { .. }
        | Kernel::HeadNorm { .. }
        | Kernel::Act { .. }
        | Kernel::TopK { .. }
        | Kernel::ExpertUp { .. }
        | Kernel::ExpertDown { .. }
        | Kernel::Softcap { .. } => {
            return Err(unsupported(k.name()));
        }
        Kernel::Sum { parts, out } => {
            if parts.len() > MAX_SUM_PARTS {
                return Err(ExecError::Launch(format!(
                    "sum of {} parts (the CUDA kernel adds at most {MAX_SUM_PARTS})",
                    parts.len()
                )));
            }
            for p in parts {
                need("sum part", p.len, out.len)?;
            }
            if out.len == 0 {
                return Ok(Plan::Nothing);
            }
            let mut args = vec![P(v.ptr(*out, Bf16)?), L(out.len as i64), I(parts.len() as i32)];
            for i in 0..MAX_SUM_PARTS {
                args.push(P(match parts.get(i) {
                    Some(p) => v.ptr(*p, Bf16)?,
                    None => 0,
                }));
            }
            launch(v.dev.any_module()?, "sum_parts", (grid_stride(v.dev, out.len), 1), args)
        }
        Kernel::Argmax { logits, out, rows, shards, shard_n } => {
            need("argmax logits", logits.len, rows * shards * shard_n)?;
            need("argmax out", out.len, *rows)?;
            int(shards * shard_n)?;
            if *rows == 0 {
                return Ok(Plan::Nothing);
            }
            let args = vec![
                P(v.ptr(*logits, F32)?),
                P(v.ptr(*out, I32)?),
                I(int(*rows)?),
                I(int(*shards)?),
                I(int(*shard_n)?),
            ];
            launch(v.dev.any_module()?, "argmax", (int(*rows)? as u32, 1), args)
        }
    })
}

fn plan_copy(v: &mut Views, src: View, dst: View) -> Result<Plan, ExecError> {
    let (s, d) = (v.bk.shared.buf(src.buf)?, v.bk.shared.buf(dst.buf)?);
    if s.dtype != d.dtype || src.len != dst.len {
        return Err(ExecError::Launch(format!(
            "copy of {} {:?} into a view of {} {:?}",
            src.len, s.dtype, dst.len, d.dtype
        )));
    }
    let (sp, dp) = (s.ptr_of(src)?, d.ptr_of(dst)?);
    d.forget_shadow();
    let peer = (s.device != d.device).then_some((s.device.0 as usize, d.device.0 as usize));
    let bytes = src.len * s.dtype.bytes() as usize;
    v.bufs.push(s);
    v.bufs.push(d);
    Ok(if bytes == 0 { Plan::Nothing } else { Plan::Copy { src: sp, dst: dp, bytes, peer } })
}

pub(super) fn submit(bk: &CudaBackend, sid: StreamId, work: Work, waits: &[Event]) -> Result<Event, ExecError> {
    let sh = bk.shared();
    let dev = sh.dev(sid.device)?;
    let srt: Arc<StreamRt> = dev.stream_rt(sid.index)?;
    let mut views = Views { bk, dev, bufs: Vec::new() };
    let plan = match &work {
        Work::Kernel(k) => {
            let plan = plan_kernel(&mut views, k).map_err(|e| match e {
                ExecError::Launch(m) if !m.starts_with(k.name()) => ExecError::Launch(format!("{}: {m}", k.name())),
                e => e,
            })?;
            // Ids and KV metadata are checked on the host, as the CPU kernels check them.
            super::meta::check(k, &|v| sh.buf(v.buf).ok().and_then(|b| b.shadow_of(v)))?;
            if let Ok(out) = sh.buf(k.output().buf) {
                out.forget_shadow();
            }
            plan
        }
        Work::Copy { src, dst } => plan_copy(&mut views, *src, *dst)?,
        Work::Spin { ns, blocks, repeat } => Plan::Launch {
            module: dev.any_module()?,
            func: "spin",
            grid: ((*blocks).max(1), 1),
            block: 32,
            args: vec![Arg::L(*ns as i64)],
            repeat: (*repeat).max(1),
        },
    };
    let seam = Event::new(sh.next_id.fetch_add(1, Ordering::Relaxed));
    let submit_ns = sh.now_ns();
    // A producer that already failed fails this op too, without queueing it (as on CPU).
    if let Some(e) = waits.iter().find_map(|w| w.query().and_then(|r| r.err())) {
        seam.complete(Err(format!("an input failed: {e}")));
        return Ok(seam);
    }
    dev.bind()?;
    let ev = dev.events.take(&dev.ctx)?;
    {
        let blas = srt.blas.lock().unwrap_or_else(|e| e.into_inner());
        let s = &srt.stream;
        wait_events(sh, s, waits)?;
        // Raw records: cudarc's `record` binds the context again before each (a driver
        // call per event on the per-op path); it is bound above and the events and the
        // stream are this device's.
        // SAFETY: both handles belong to the context bound on this thread.
        unsafe { result::event::record(ev.start.cu_event(), s.cu_stream()) }.map_err(cu("recording a start event"))?;
        match plan {
            Plan::Nothing => {}
            Plan::Launch { module, func, grid, block, mut args, repeat } => {
                let f = module.funcs.get(func).ok_or_else(|| ExecError::Launch(format!("no kernel {func}")))?;
                let mut params: Vec<*mut c_void> = args.iter_mut().map(Arg::addr).collect();
                for _ in 0..repeat {
                    // SAFETY: the function comes from a module this context loaded and
                    // holds; every pointer argument addresses a checked view of a live
                    // buffer, and the argument list matches the kernel in kernels.cu.
                    unsafe {
                        result::launch_kernel(
                            f.cu_function(),
                            (grid.0, grid.1, 1),
                            (block, 1, 1),
                            0,
                            s.cu_stream(),
                            &mut params,
                        )
                    }
                    .map_err(cu(format!("launching {func}")))?;
                }
            }
            Plan::Gemm { x, w, y, y_f32, mnk } => blas.gemm(x, w, y, y_f32, mnk)?,
            Plan::Copy { src, dst, bytes, peer } => {
                // SAFETY: both ranges were checked inside live buffers of equal dtype;
                // the producers' events were waited on above.
                unsafe {
                    match peer {
                        None => result::memcpy_dtod_async(dst, src, bytes, s.cu_stream()),
                        Some((from, to)) => result::memcpy_peer_async(
                            sh.devs[to].ctx.cu_ctx(),
                            dst,
                            sh.devs[from].ctx.cu_ctx(),
                            src,
                            bytes,
                            s.cu_stream(),
                        ),
                    }
                }
                .map_err(cu("copy"))?;
                sh.copied.fetch_add(bytes as u64, Ordering::Relaxed);
            }
        }
        // SAFETY: as for the start event.
        unsafe { result::event::record(ev.end.cu_event(), s.cu_stream()) }.map_err(cu("recording an end event"))?;
    }
    register(bk, sid, ev, &views.bufs, &seam, submit_ns)?;
    Ok(seam)
}

/// Makes stream `s` wait on the GPU end events of `waits` (ops of this backend; one
/// already complete needs no wait).
pub(super) fn wait_events(sh: &Shared, s: &CudaStream, waits: &[Event]) -> Result<(), ExecError> {
    // Under the pending lock: an event found here cannot be completed and recycled
    // before the stream wait below has captured it.
    let pending = sh.pending.lock().unwrap_or_else(|e| e.into_inner());
    for w in waits {
        match pending.get(&w.id()) {
            Some(p) => s.wait(&p.end).map_err(cu("cuStreamWaitEvent"))?,
            None if w.query().is_some() => {}
            None => return Err(ExecError::Launch(format!("waits on event {} of another backend", w.id()))),
        }
    }
    Ok(())
}

/// Hands a queued op (its start and end recorded) to the collector, which completes
/// `seam`; its buffers remember it as their last use on this stream.
pub(super) fn register(
    bk: &CudaBackend,
    sid: StreamId,
    ev: Arc<OpEvents>,
    bufs: &[Arc<Buffer>],
    seam: &Event,
    submit_ns: u64,
) -> Result<(), ExecError> {
    let key = (sid.device.0, sid.index);
    for b in bufs {
        b.used_by(key, &ev);
    }
    bk.shared.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(seam.id(), ev.clone());
    bk.send(Pending { seam: seam.clone(), ev, dev: sid.device.0 as usize, stream: sid.index, submit_ns })
}

/// Host microseconds per op of the launch path's layers, each over `n` empty kernels on
/// `sid` (the GPU check's breakdown of the submit cost): the bare `cuLaunchKernel`, the
/// same with a start and an end timing event around it, and the backend's whole submit
/// (checks, waits, bookkeeping, the collector's queue). Returns the last op's event,
/// not waited for: the caller may have paused the collector that completes it.
pub(super) fn submit_breakdown(bk: &CudaBackend, sid: StreamId, n: usize) -> Result<([f64; 3], Event), ExecError> {
    let sh = bk.shared();
    let dev = sh.dev(sid.device)?;
    let srt = dev.stream_rt(sid.index)?;
    let module = dev.any_module()?;
    let f = module.funcs.get("spin").ok_or_else(|| ExecError::Launch("no kernel spin".into()))?;
    let s = &srt.stream;
    dev.bind()?;
    let mut ns = 0i64;
    let mut params: Vec<*mut c_void> = vec![&mut ns as *mut i64 as *mut c_void];
    let mut launch = || {
        // SAFETY: `spin` takes one i64 and touches no memory.
        unsafe { result::launch_kernel(f.cu_function(), (1, 1, 1), (32, 1, 1), 0, s.cu_stream(), &mut params) }
            .map_err(cu("launching spin"))
    };
    let sync = || s.synchronize().map_err(cu("synchronize"));
    sync()?;
    let t = std::time::Instant::now();
    for _ in 0..n {
        launch()?;
    }
    let bare = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    sync()?;
    let ev = dev.events.take(&dev.ctx)?;
    let t = std::time::Instant::now();
    for _ in 0..n {
        // SAFETY: both events and the stream belong to this bound context.
        unsafe { result::event::record(ev.start.cu_event(), s.cu_stream()) }.map_err(cu("cuEventRecord"))?;
        launch()?;
        unsafe { result::event::record(ev.end.cu_event(), s.cu_stream()) }.map_err(cu("cuEventRecord"))?;
    }
    let with_events = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    sync()?;
    let t = std::time::Instant::now();
    let mut last = submit(bk, sid, Work::Spin { ns: 0, blocks: 1, repeat: 1 }, &[])?;
    for _ in 1..n {
        last = submit(bk, sid, Work::Spin { ns: 0, blocks: 1, repeat: 1 }, &[])?;
    }
    let whole = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    Ok(([bare, with_events, whole], last))
}
