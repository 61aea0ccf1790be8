//! The CUDA backend (cudarc 0.19, libraries loaded at run time; executor.md).
//!
//! - `device`: one primary context per GPU, streams per priority class, the memory pool.
//! - `memory`: allocations charged to the ledger by arena, uploads and downloads
//!   (through pinned host chunks, `staging`).
//! - `nvrtc` + `kernels.cu`: every op but the GEMMs, compiled at run time and cached.
//! - `blas`: cuBLAS for every GEMM (one handle per stream, workspace in our arena).
//! - `launch`: a [`Kernel`] checked and turned into one launch; copies (peer included).
//! - `meta`: host copies of uploaded i32 metadata, checked before a launch reads it.
//! - `nccl`: NCCL for the tensor-parallel all-reduce when libnccl is present.
//! - `timing`: start/end events per op from a pool, read by a collector thread that
//!   completes the backend-neutral [`Event`]s.
//!
//! Event tracking is off: the executor owns every dependency through the events it
//! passes to `launch` and `copy`, and a buffer is freed after the last work that used it.
//! Without a driver, a GPU or a library every entry point returns
//! [`ExecError::NoCuda`] naming it: cudarc panics on a missing library or symbol, so
//! each is probed first and every call into it runs under `catch_unwind`.

mod blas;
mod device;
mod launch;
mod memory;
mod meta;
mod nccl;
pub mod nvrtc;
mod staging;
mod timing;

use crate::backend::*;
use crate::kernels::Kernel;
use crate::ExecError;
use device::Dev;
use memory::Buffer;
use slicesched_gmg::MemLedger;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::time::Instant;
use timing::{OpEvents, Pending};

pub use nccl::{choose as choose_collective, Choice as CollectiveChoice, NcclMode};

/// Runs `f`, turning a panic inside cudarc (a library or symbol it could not load) into
/// a typed error naming `what`.
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> Result<T, ExecError>) -> Result<T, ExecError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic inside cudarc".into());
            Err(ExecError::NoCuda { missing: format!("{what}: {msg}") })
        }
    }
}

/// What the libraries of this machine are, checked without touching a GPU.
#[derive(Debug, Clone, Default)]
pub struct Libraries {
    pub driver: bool,
    pub cublas: bool,
    pub nvrtc: bool,
    pub nccl: bool,
}

/// Which CUDA libraries can be loaded here (never panics).
pub fn libraries() -> Libraries {
    let probe = |f: fn() -> bool| std::panic::catch_unwind(f).unwrap_or(false);
    Libraries {
        // SAFETY: each only tries to dlopen its library under its candidate names.
        driver: probe(|| unsafe { cudarc::driver::sys::is_culib_present() }),
        cublas: probe(|| unsafe { cudarc::cublas::sys::is_culib_present() }),
        nvrtc: probe(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }),
        nccl: probe(|| unsafe { cudarc::nccl::sys::is_culib_present() }),
    }
}

/// Every library the backend needs, or the first one missing.
pub fn require_libraries() -> Result<(), ExecError> {
    let l = libraries();
    let missing = [
        (l.driver, "libcuda (the NVIDIA driver)", "cuda"),
        (l.cublas, "cuBLAS", "cublas"),
        (l.nvrtc, "NVRTC", "nvrtc"),
    ]
    .into_iter()
    .filter(|(ok, ..)| !ok)
    .map(|(_, name, lib)| format!("{name} (tried {})", nvrtc::lib_names(lib)))
    .collect::<Vec<_>>();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ExecError::NoCuda { missing: format!("{} not found", missing.join("; ")) })
    }
}

/// What the collector and the submitting threads share.
pub(crate) struct Shared {
    epoch: Instant,
    devs: Vec<Arc<Dev>>,
    bufs: RwLock<HashMap<BufId, Arc<Buffer>>>,
    /// The GPU events of every launched op not yet seen complete, by seam event id: a
    /// later launch that waits on one makes its stream wait on the GPU event.
    pending: Mutex<HashMap<u64, Arc<OpEvents>>>,
    next_id: AtomicU64,
    copied: AtomicU64,
    collector_paused: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    fn dev(&self, d: DeviceId) -> Result<&Arc<Dev>, ExecError> {
        self.devs.get(d.0 as usize).ok_or_else(|| ExecError::UnknownDevice(format!("cuda:{}", d.0)))
    }
    fn buf(&self, id: BufId) -> Result<Arc<Buffer>, ExecError> {
        self.bufs.read().unwrap_or_else(|e| e.into_inner()).get(&id).cloned().ok_or(ExecError::UnknownBuffer(id.0))
    }
}

/// The CUDA backend: one device per GPU ordinal given to [`CudaBackend::try_new`].
pub struct CudaBackend {
    shared: Arc<Shared>,
    infos: Vec<DeviceInfo>,
    tx: Mutex<Option<mpsc::Sender<Pending>>>,
    collector: Mutex<Option<std::thread::JoinHandle<()>>>,
    nccl: nccl::Nccl,
}

impl CudaBackend {
    /// Opens the GPUs `ordinals` (`cuda:N` is device N of this backend's list order).
    /// Errors, never panics: [`ExecError::NoCuda`] when the driver, cuBLAS or NVRTC is
    /// missing or there is no such GPU. NCCL as `SLICESCHED_NCCL` says ([`NcclMode`]).
    pub fn try_new(ordinals: &[usize]) -> Result<Self, ExecError> {
        Self::try_new_with(ordinals, NcclMode::from_env()?)
    }

    /// [`CudaBackend::try_new`] with the NCCL mode given.
    pub fn try_new_with(ordinals: &[usize], nccl_mode: NcclMode) -> Result<Self, ExecError> {
        require_libraries()?;
        let nccl = nccl::Nccl::new(nccl_mode, libraries().nccl)?;
        let count = guard("libcuda", || {
            cudarc::driver::result::init().map_err(|e| ExecError::NoCuda { missing: format!("cuInit failed: {e}") })?;
            cudarc::driver::result::device::get_count().map_err(|e| ExecError::Cuda(format!("cuDeviceGetCount: {e}")))
        })?;
        if count == 0 {
            return Err(ExecError::NoCuda { missing: "no CUDA device (the driver sees 0 GPUs)".into() });
        }
        if let Some(o) = ordinals.iter().find(|&&o| o >= count as usize) {
            return Err(ExecError::UnknownDevice(format!("cuda:{o} (this machine has {count} GPUs)")));
        }
        let epoch = Instant::now();
        let devs = ordinals
            .iter()
            .enumerate()
            .map(|(i, &o)| guard("CUDA device setup", || Dev::open(DeviceId(i as u32), o, epoch).map(Arc::new)))
            .collect::<Result<Vec<_>, _>>()?;
        guard("peer access", || device::enable_peers(&devs))?;
        let infos = devs.iter().map(|d| d.info.clone()).collect();
        let shared = Arc::new(Shared {
            epoch,
            devs,
            bufs: RwLock::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            copied: AtomicU64::new(0),
            collector_paused: Default::default(),
        });
        let (tx, rx) = mpsc::channel();
        let sh = shared.clone();
        let h = std::thread::Builder::new()
            .name("cuda-collector".into())
            .spawn(move || timing::collector(sh, rx))
            .map_err(|e| ExecError::Cuda(format!("cannot start the collector thread: {e}")))?;
        Ok(Self { shared, infos, tx: Mutex::new(Some(tx)), collector: Mutex::new(Some(h)), nccl })
    }

    /// Facts about device `d` for reports: name, compute capability, priority range,
    /// what the context, cuBLAS and modules took (bytes, from `cuMemGetInfo`).
    pub fn describe(&self, d: DeviceId) -> Result<serde_json::Value, ExecError> {
        let dev = self.shared.dev(d)?;
        guard("describe", || dev.describe())
    }

    /// Queues `blocks` blocks of the spin kernel (each spins `ns` of the GPU clock; 0 is
    /// an empty kernel): the load and the launch probe of the GPU check.
    /// `repeat` launches inside one op (one pair of timing events).
    pub fn launch_spin(
        &self,
        stream: StreamId,
        ns: u64,
        blocks: u32,
        repeat: u32,
        waits: &[Event],
    ) -> Result<Event, ExecError> {
        guard("launch", || launch::submit(self, stream, launch::Work::Spin { ns, blocks, repeat }, waits))
    }

    /// Host µs per op of the bare launch, the launch between its two timing events, and
    /// the whole submit, each over `n` empty kernels (the GPU check's breakdown), and
    /// the last op's event (not waited for: wait after releasing a paused collector).
    pub fn submit_breakdown(&self, stream: StreamId, n: usize) -> Result<([f64; 3], Event), ExecError> {
        guard("launch", || launch::submit_breakdown(self, stream, n))
    }

    /// Holds the collector's polling while `on` (the GPU check measures what its polling
    /// costs the submitting thread); completions are seen once it is released.
    pub fn pause_collector(&self, on: bool) {
        self.shared.collector_paused.store(on, Ordering::Relaxed);
    }

    /// Uploads and downloads through pinned host chunks (the default) or pageable
    /// memory: the GPU check measures both.
    pub fn set_pinned_staging(&self, on: bool) {
        for d in &self.shared.devs {
            d.staging.set_enabled(on);
        }
    }

    /// Blocks until every stream of every device is idle.
    pub fn synchronize(&self) -> Result<(), ExecError> {
        guard("synchronize", || {
            for d in &self.shared.devs {
                d.ctx.synchronize().map_err(|e| ExecError::Cuda(format!("{}: synchronize: {e}", d.info.name)))?;
            }
            Ok(())
        })
    }

    /// The raw device pointer of a view (for the GPU check's own cuBLAS calls).
    pub fn device_ptr(&self, v: View) -> Result<u64, ExecError> {
        let b = self.shared.buf(v.buf)?;
        b.ptr_of(v)
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub(crate) fn send(&self, p: Pending) -> Result<(), ExecError> {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.as_ref()
            .ok_or_else(|| ExecError::Launch("the backend is shutting down".into()))?
            .send(p)
            .map_err(|_| ExecError::Launch("the collector thread is gone".into()))
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Work still queued completes before buffers and contexts go: the collector
        // drains every pending op once its channel closes.
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = self.collector.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
        let _ = self.synchronize();
        let bufs: Vec<BufId> = self.shared.bufs.read().unwrap_or_else(|e| e.into_inner()).keys().copied().collect();
        for b in bufs {
            let _ = memory::free(&self.shared, b);
        }
        let _ = self.synchronize();
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> &'static str {
        "cuda"
    }
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }
    fn stream(&self, device: DeviceId, priority: i32) -> Result<StreamId, ExecError> {
        let dev = self.shared.dev(device)?;
        guard("stream", || dev.stream(priority)).map(|index| StreamId { device, index })
    }
    fn alloc(&self, device: DeviceId, arena: Arena, dtype: Dtype, len: usize) -> Result<BufId, ExecError> {
        guard("alloc", || memory::alloc(&self.shared, device, arena, dtype, len))
    }
    fn free(&self, buf: BufId) -> Result<(), ExecError> {
        guard("free", || memory::free(&self.shared, buf))
    }
    fn upload(&self, dst: View, data: &HostData) -> Result<(), ExecError> {
        guard("upload", || memory::upload(&self.shared, dst, data))
    }
    fn download(&self, src: View) -> Result<HostData, ExecError> {
        guard("download", || memory::download(&self.shared, src))
    }
    fn launch(&self, stream: StreamId, kernel: Kernel, waits: &[Event]) -> Result<Event, ExecError> {
        guard("launch", || launch::submit(self, stream, launch::Work::Kernel(kernel), waits))
    }
    fn copy(&self, stream: StreamId, src: View, dst: View, waits: &[Event]) -> Result<Event, ExecError> {
        guard("copy", || launch::submit(self, stream, launch::Work::Copy { src, dst }, waits))
    }
    fn ledger(&self, device: DeviceId) -> Result<MemLedger, ExecError> {
        Ok(self.shared.dev(device)?.ledger.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
    fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }
    fn bytes_copied(&self) -> u64 {
        self.shared.copied.load(Ordering::Relaxed)
    }
    fn device_of(&self, buf: BufId) -> Result<DeviceId, ExecError> {
        Ok(self.shared.buf(buf)?.device)
    }
    fn all_reduce(&self, ranks: &[ReduceRank]) -> Result<Option<Vec<Event>>, ExecError> {
        guard("all-reduce", || nccl::all_reduce(self, ranks))
    }
    fn collectives(&self) -> String {
        self.nccl.describe()
    }
}

/// Parses `cuda` or `cuda:N` into a GPU ordinal.
pub fn parse_device(s: &str) -> Result<usize, ExecError> {
    match s.split_once(':') {
        None if s == "cuda" => Ok(0),
        Some(("cuda", n)) => {
            n.parse().map_err(|_| ExecError::UnknownDevice(format!("{s} (the ordinal must be a number)")))
        }
        _ => Err(ExecError::UnknownDevice(format!("{s} (known: cuda, cuda:N)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_typed_error() {
        let r: Result<(), _> = guard("libfoo", || panic!("Missing symbol cuFoo"));
        match r {
            Err(ExecError::NoCuda { missing }) => assert!(missing.contains("libfoo") && missing.contains("cuFoo")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_cuda_devices() {
        assert_eq!(parse_device("cuda").unwrap(), 0);
        assert_eq!(parse_device("cuda:3").unwrap(), 3);
        assert!(parse_device("cuda:x").is_err());
        assert!(parse_device("cpu:0").is_err());
    }
}
