//! Uploads and downloads through page-locked host memory. A copy from pageable memory
//! is staged by the driver through its own small pinned buffer and is synchronous;
//! from pinned memory it is a DMA at the bus's rate. Two pinned chunks per device take
//! turns: the host fills (or drains) one while the other is in flight on the utility
//! stream. Without pinned memory (its allocation refused, e.g. under a low memlock
//! limit) or with staging switched off, copies go pageable, and `describe` says which.

use super::device::cu;
use crate::ExecError;
use cudarc::driver::{result, CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes per pinned chunk (two per device).
pub(super) const CHUNK: usize = 8 << 20;

struct Chunks {
    host: [PinnedHostSlice<u8>; 2],
    /// Recorded after the copy that last used each chunk.
    done: [CudaEvent; 2],
}

// SAFETY: page-locked host memory and events are usable from any thread; every use is
// under `Staging::chunks`' lock, with the device's context bound.
unsafe impl Send for Chunks {}

#[derive(Default)]
pub(crate) struct Staging {
    /// None until first use; Err when pinned memory was refused (then pageable).
    chunks: Mutex<Option<Result<Chunks, String>>>,
    /// Switched off by `CudaBackend::set_pinned_staging(false)` (the GPU check's
    /// pageable measurement).
    off: AtomicBool,
}

impl Staging {
    pub fn set_enabled(&self, on: bool) {
        self.off.store(!on, Ordering::Relaxed);
    }

    pub fn describe(&self) -> String {
        if self.off.load(Ordering::Relaxed) {
            return "pageable (pinned staging switched off)".into();
        }
        match &*self.chunks.lock().unwrap_or_else(|e| e.into_inner()) {
            None => format!("pinned, 2 × {} MiB (not yet allocated)", CHUNK >> 20),
            Some(Ok(_)) => format!("pinned, 2 × {} MiB", CHUNK >> 20),
            Some(Err(e)) => format!("pageable (pinned allocation refused: {e})"),
        }
    }

    /// Runs `f` with the pinned chunks, or returns None to copy pageable.
    fn with<T>(
        &self,
        ctx: &Arc<CudaContext>,
        f: impl FnOnce(&mut Chunks) -> Result<T, ExecError>,
    ) -> Option<Result<T, ExecError>> {
        if self.off.load(Ordering::Relaxed) {
            return None;
        }
        let mut g = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let c = g.get_or_insert_with(|| {
            let alloc = || -> Result<Chunks, result::DriverError> {
                // Flags 0, not cudarc's default write-combined: downloads read these
                // pages on the host, and write-combined memory is uncached there.
                // SAFETY: the bytes are written before any copy reads them.
                let host = unsafe {
                    [ctx.alloc_pinned_with_flags::<u8>(CHUNK, 0)?, ctx.alloc_pinned_with_flags::<u8>(CHUNK, 0)?]
                };
                let done = [ctx.new_event(None)?, ctx.new_event(None)?];
                Ok(Chunks { host, done })
            };
            alloc().map_err(|e| e.to_string())
        });
        match c {
            Ok(c) => Some(f(c)),
            Err(_) => None,
        }
    }

    /// Copies `src` to device address `dst` through the pinned chunks; None when
    /// staging is off or unavailable (the caller copies pageable). Synchronous.
    pub fn upload(
        &self,
        ctx: &Arc<CudaContext>,
        s: &CudaStream,
        dst: u64,
        src: &[u8],
    ) -> Option<Result<(), ExecError>> {
        self.with(ctx, |c| {
            for (i, part) in src.chunks(CHUNK).enumerate() {
                let k = i % 2;
                // The chunk's previous copy must have left it before it is refilled.
                c.done[k].synchronize().map_err(cu("staging event"))?;
                let host = c.host[k].as_mut_slice().map_err(cu("pinned chunk"))?;
                host[..part.len()].copy_from_slice(part);
                // SAFETY: `dst + i·CHUNK` lies inside the checked view; the chunk stays
                // untouched until its event (recorded next) completes.
                unsafe { result::memcpy_htod_async(dst + (i * CHUNK) as u64, &host[..part.len()], s.cu_stream()) }
                    .map_err(cu("upload (pinned)"))?;
                c.done[k].record(s).map_err(cu("staging event"))?;
            }
            s.synchronize().map_err(cu("upload (pinned)"))
        })
    }

    /// Copies device address `src` into `dst` through the pinned chunks (see upload).
    pub fn download(
        &self,
        ctx: &Arc<CudaContext>,
        s: &CudaStream,
        src: u64,
        dst: &mut [u8],
    ) -> Option<Result<(), ExecError>> {
        self.with(ctx, |c| {
            let total = dst.len();
            let n = total.div_ceil(CHUNK);
            let range = |i: usize| i * CHUNK..((i + 1) * CHUNK).min(total);
            // Chunk i is queued, then chunk i−1 (already queued) is drained on the host.
            for i in 0..=n {
                if i < n {
                    let k = i % 2;
                    let len = range(i).len();
                    let host = c.host[k].as_mut_slice().map_err(cu("pinned chunk"))?;
                    // SAFETY: the source range lies inside the checked view; chunk k was
                    // drained at step i−1 before being reused here.
                    unsafe { result::memcpy_dtoh_async(&mut host[..len], src + (i * CHUNK) as u64, s.cu_stream()) }
                        .map_err(cu("download (pinned)"))?;
                    c.done[k].record(s).map_err(cu("staging event"))?;
                }
                if i > 0 {
                    let (k, r) = ((i - 1) % 2, range(i - 1));
                    c.done[k].synchronize().map_err(cu("download (pinned)"))?;
                    let host = c.host[k].as_slice().map_err(cu("pinned chunk"))?;
                    dst[r.clone()].copy_from_slice(&host[..r.len()]);
                }
            }
            Ok(())
        })
    }
}
