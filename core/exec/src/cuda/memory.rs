//! Device buffers: stream-ordered pool allocations charged to the ledger by arena,
//! zeroed as the CPU backend's are, and freed only after the last op that used them
//! (event tracking is off, so the buffer remembers that op's end event per stream).

use super::device::cu;
use super::timing::OpEvents;
use super::Shared;
use crate::backend::{Arena, BufId, DeviceId, Dtype, HostData, View};
use crate::ExecError;
use cudarc::driver::result;
use half::bf16;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// (device, stream index).
pub(super) type StreamKey = (u32, u32);

pub(crate) struct Buffer {
    pub device: DeviceId,
    pub arena: Arena,
    pub dtype: Dtype,
    pub len: usize,
    /// 0 for an empty buffer (the pool refuses zero-byte allocations).
    pub ptr: u64,
    /// The end events of the last op on each stream that touched it.
    pub last_use: Mutex<Vec<(StreamKey, Arc<OpEvents>)>>,
    /// The contents of a small i32 buffer as the host last wrote it (zeros, then
    /// uploads), so launches can check ids, positions and KV metadata before reading
    /// them (`meta`); None once a kernel or copy wrote it on the device.
    pub shadow: Mutex<Option<Vec<i32>>>,
}

/// The largest i32 buffer kept on the host too (4 MiB): an iteration's metadata is a
/// few entries per token.
const SHADOW_MAX: usize = 1 << 20;

impl Buffer {
    /// The host copy of `v`'s elements, when the host knows them.
    pub(super) fn shadow_of(&self, v: View) -> Option<Vec<i32>> {
        let s = self.shadow.lock().unwrap_or_else(|e| e.into_inner());
        s.as_ref()?.get(v.offset..v.offset + v.len).map(<[i32]>::to_vec)
    }

    /// The device wrote the buffer: its host copy is no longer known.
    pub(super) fn forget_shadow(&self) {
        *self.shadow.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn bytes(&self) -> u64 {
        self.len as u64 * self.dtype.bytes()
    }

    /// The device address of `v`, checked to lie inside this buffer.
    pub(super) fn ptr_of(&self, v: View) -> Result<u64, ExecError> {
        if v.offset + v.len > self.len {
            return Err(ExecError::Launch(format!("view {v:?} outside a buffer of {}", self.len)));
        }
        Ok(self.ptr + v.offset as u64 * self.dtype.bytes())
    }

    pub(super) fn used_by(&self, stream: StreamKey, ev: &Arc<OpEvents>) {
        let mut l = self.last_use.lock().unwrap_or_else(|e| e.into_inner());
        match l.iter_mut().find(|(s, _)| *s == stream) {
            Some(e) => e.1 = ev.clone(),
            None => l.push((stream, ev.clone())),
        }
    }

    /// Makes `stream` wait for every op that touched the buffer so far.
    fn wait_uses(&self, stream: &cudarc::driver::CudaStream) -> Result<(), ExecError> {
        for (_, ev) in self.last_use.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            stream.wait(&ev.end).map_err(cu("waiting on a buffer's last use"))?;
        }
        Ok(())
    }
}

pub(super) fn alloc(sh: &Shared, device: DeviceId, arena: Arena, dtype: Dtype, len: usize) -> Result<BufId, ExecError> {
    let dev = sh.dev(device)?;
    let bytes = len as u64 * dtype.bytes();
    crate::backend::charge(&dev.ledger, &dev.info.name, arena, bytes, sh.now_ns())?;
    let refund = |e: ExecError| {
        dev.ledger.lock().unwrap_or_else(|e| e.into_inner()).release(arena.ledger_kind(), bytes);
        e
    };
    let ptr = if bytes == 0 {
        0
    } else {
        dev.bind().map_err(refund)?;
        let util = dev.util.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a fresh pool allocation on the utility stream, zeroed there and
        // synchronised before any other stream can be handed the buffer.
        unsafe {
            let p = match result::malloc_async(util.cu_stream(), bytes as usize) {
                Ok(p) => p,
                Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                    let free = result::mem_get_info().map(|(f, _)| f as u64).unwrap_or(0);
                    return Err(refund(ExecError::OutOfMemory {
                        device: dev.info.name.clone(),
                        arena,
                        requested: bytes,
                        free,
                    }));
                }
                Err(e) => return Err(refund(ExecError::Cuda(format!("cuMemAllocAsync of {bytes} bytes: {e}")))),
            };
            result::memset_d8_async(p, 0, bytes as usize, util.cu_stream())
                .and_then(|_| util.synchronize())
                .map_err(|e| refund(ExecError::Cuda(format!("zeroing a new buffer: {e}"))))?;
            p
        }
    };
    let id = BufId(sh.next_id.fetch_add(1, Ordering::Relaxed));
    let shadow = (dtype == Dtype::I32 && len <= SHADOW_MAX).then(|| vec![0; len]);
    let b = Buffer { device, arena, dtype, len, ptr, last_use: Mutex::new(Vec::new()), shadow: Mutex::new(shadow) };
    sh.bufs.write().unwrap_or_else(|e| e.into_inner()).insert(id, Arc::new(b));
    Ok(id)
}

pub(super) fn free(sh: &Shared, buf: BufId) -> Result<(), ExecError> {
    let b = sh.bufs.write().unwrap_or_else(|e| e.into_inner()).remove(&buf).ok_or(ExecError::UnknownBuffer(buf.0))?;
    let dev = sh.dev(b.device)?;
    dev.ledger.lock().unwrap_or_else(|e| e.into_inner()).release(b.arena.ledger_kind(), b.bytes());
    if b.ptr == 0 {
        return Ok(());
    }
    dev.bind()?;
    let util = dev.util.lock().unwrap_or_else(|e| e.into_inner());
    b.wait_uses(&util)?;
    // SAFETY: removed from the table above, so no later launch can name it; the free is
    // ordered after every op that used it.
    unsafe { result::free_async(b.ptr, util.cu_stream()) }.map_err(cu("cuMemFreeAsync"))
}

fn mismatch(v: View, what: &str, b: &Buffer) -> ExecError {
    ExecError::Launch(format!("{what} {v:?} of a {:?} buffer of {}", b.dtype, b.len))
}

pub(super) fn upload(sh: &Shared, dst: View, data: &HostData) -> Result<(), ExecError> {
    let b = sh.buf(dst.buf)?;
    if b.dtype != data.dtype() || data.len() != dst.len {
        return Err(mismatch(dst, &format!("upload of {} {:?} into", data.len(), data.dtype()), &b));
    }
    let at = b.ptr_of(dst)?;
    if dst.len == 0 {
        return Ok(());
    }
    let dev = sh.dev(b.device)?;
    dev.bind()?;
    let util = dev.util.lock().unwrap_or_else(|e| e.into_inner());
    b.wait_uses(&util)?;
    if let HostData::I32(v) = data {
        if let Some(sh) = b.shadow.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            sh[dst.offset..dst.offset + dst.len].copy_from_slice(v);
        }
    }
    let bytes: &[u8] = match data {
        HostData::Bf16(v) => bytemuck::cast_slice(v),
        HostData::F32(v) => bytemuck::cast_slice(v),
        HostData::I32(v) => bytemuck::cast_slice(v),
    };
    if let Some(r) = dev.staging.upload(&dev.ctx, &util, at, bytes) {
        return r;
    }
    // SAFETY: `at` addresses dst.len elements of the buffer's dtype (checked above); the
    // host slice outlives the copy, which is synchronised before returning.
    unsafe { result::memcpy_htod_async(at, bytes, util.cu_stream()) }
        .and_then(|_| util.synchronize())
        .map_err(cu("upload"))
}

pub(super) fn download(sh: &Shared, src: View) -> Result<HostData, ExecError> {
    let b = sh.buf(src.buf)?;
    let at = b.ptr_of(src)?;
    let dev = sh.dev(b.device)?;
    let mut out = match b.dtype {
        Dtype::Bf16 => HostData::Bf16(vec![bf16::ZERO; src.len]),
        Dtype::F32 => HostData::F32(vec![0.0; src.len]),
        Dtype::I32 => HostData::I32(vec![0; src.len]),
    };
    if src.len == 0 {
        return Ok(out);
    }
    dev.bind()?;
    let util = dev.util.lock().unwrap_or_else(|e| e.into_inner());
    b.wait_uses(&util)?;
    let bytes: &mut [u8] = match &mut out {
        HostData::Bf16(v) => bytemuck::cast_slice_mut(v),
        HostData::F32(v) => bytemuck::cast_slice_mut(v),
        HostData::I32(v) => bytemuck::cast_slice_mut(v),
    };
    if let Some(r) = dev.staging.download(&dev.ctx, &util, at, bytes) {
        return r.map(|_| out);
    }
    // SAFETY: as in upload; the host vector is sized to the view and lives until the
    // stream is synchronised.
    unsafe { result::memcpy_dtoh_async(bytes, at, util.cu_stream()) }
        .and_then(|_| util.synchronize())
        .map_err(cu("download"))?;
    Ok(out)
}
