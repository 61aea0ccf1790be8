//! The executor seam: a backend shaped like CUDA (devices with memory, prioritised
//! streams, events, arenas, asynchronous launches and copies), so the CPU backend
//! exercises exactly the logic the CUDA backend will run.
//!
//! Every call is `&self`: a backend is shared by the executor and its collector, as a
//! CUDA context is. Handles are plain ids; a backend resolves them.

use crate::kernels::Kernel;
use crate::ExecError;
use slicesched_gmg::{MemLedger, MemoryKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A device of one backend (`cpu:0`, later `cuda:0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u32);

/// A stream: an in-order queue of work on one device with one priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId {
    pub device: DeviceId,
    pub index: u32,
}

/// A device allocation (opaque; only its backend resolves it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u64);

/// Element type of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Bf16,
    F32,
    I32,
}

impl Dtype {
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 => 4,
        }
    }
}

/// Which arena an allocation is charged to. Weights and KV blocks are the GMG ledger's
/// weights and KV pool; workspace and the backend's own memory count as activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arena {
    Weights,
    KvBlocks,
    Workspace,
    /// What the backend takes for itself (scratch of its GEMMs, a CUDA context).
    Backend,
}

impl Arena {
    /// The kind of memory the GMG's ledger books this arena as.
    pub fn ledger_kind(self) -> MemoryKind {
        match self {
            Arena::Weights => MemoryKind::Weights,
            Arena::KvBlocks => MemoryKind::KvPool,
            Arena::Workspace | Arena::Backend => MemoryKind::Activations,
        }
    }
}

/// Books `bytes` of `arena` on a device's ledger at `now_ns`, or refuses them past its
/// capacity: the one admission rule every backend applies before it allocates.
pub(crate) fn charge(
    ledger: &Mutex<MemLedger>,
    device: &str,
    arena: Arena,
    bytes: u64,
    now_ns: u64,
) -> Result<(), ExecError> {
    let mut l = ledger.lock().unwrap_or_else(|e| e.into_inner());
    if l.used() + bytes > l.capacity {
        return Err(ExecError::OutOfMemory { device: device.to_string(), arena, requested: bytes, free: l.free() });
    }
    l.alloc(arena.ledger_kind(), bytes, now_ns);
    Ok(())
}

/// A range of elements of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    pub buf: BufId,
    pub offset: usize,
    pub len: usize,
}

impl View {
    pub fn whole(buf: BufId, len: usize) -> Self {
        Self { buf, offset: 0, len }
    }
    /// `len` elements starting `offset` elements into this view.
    pub fn sub(self, offset: usize, len: usize) -> Self {
        debug_assert!(offset + len <= self.len);
        Self { buf: self.buf, offset: self.offset + offset, len }
    }
}

/// Host-side data for uploads and downloads.
#[derive(Debug, Clone, PartialEq)]
pub enum HostData {
    Bf16(Vec<half::bf16>),
    F32(Vec<f32>),
    I32(Vec<i32>),
}

impl HostData {
    pub fn len(&self) -> usize {
        match self {
            HostData::Bf16(v) => v.len(),
            HostData::F32(v) => v.len(),
            HostData::I32(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> Dtype {
        match self {
            HostData::Bf16(_) => Dtype::Bf16,
            HostData::F32(_) => Dtype::F32,
            HostData::I32(_) => Dtype::I32,
        }
    }
}

/// What a device is and holds.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub id: DeviceId,
    /// `cpu:0`, `cuda:1`.
    pub name: String,
    pub memory_bytes: u64,
    /// Cores (CPU) or SMs (GPU) the device's kernels share.
    pub compute_units: u32,
}

/// When a piece of work ran, in ns since the backend's epoch (host clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timing {
    /// When the host handed it to the stream.
    pub submit_ns: u64,
    /// When the stream reached it, after its waits (as a CUDA start event reads).
    pub start_ns: u64,
    pub end_ns: u64,
    /// Time the device spent on the work. The CPU backend takes the smaller of the wall
    /// span and its stream thread's CPU time (read around it): the wall span where the
    /// thread kept its core, the CPU time where another process on the host took it
    /// away (a GPU kernel is never descheduled); a GPU backend reports `end − start`.
    pub busy_ns: u64,
}

impl Timing {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

#[derive(Debug, Default)]
struct EvState {
    done: Option<Result<Timing, String>>,
}

#[derive(Debug, Default)]
struct EvInner {
    /// Set after `state` holds the result: lets a waiter spin without the lock.
    ready: AtomicBool,
    state: Mutex<EvState>,
    cv: Condvar,
}

/// How long a waiter (the host on an event, a stream worker on its queue) spins before
/// it sleeps: `SLICESCHED_EXEC_SPIN_US`, default 0 (sleep at once), like CUDA's choice
/// between `cudaDeviceScheduleSpin` and `BlockingSync`. Measured with `slicesched bench
/// exec` on this 2-core machine under ~6 concurrent compilers: launch to completion seen
/// took 13 µs sleeping and 17 µs / 109 µs spinning 5 / 50 µs — a spinning thread spends
/// its scheduler share and is the one descheduled, while a woken sleeper preempts the
/// compilers at once. On dedicated cores a spin of tens of µs can win; measure first.
pub fn spin_limit() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("SLICESCHED_EXEC_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        Duration::from_micros(us)
    })
}

/// Spins on `done` for up to [`spin_limit`]; true once it held.
pub(crate) fn spin_until(mut done: impl FnMut() -> bool) -> bool {
    let limit = spin_limit();
    let t = Instant::now();
    loop {
        if done() {
            return true;
        }
        if t.elapsed() >= limit {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// Completion of one launch or copy: waited on by other streams (cross-stream and
/// cross-device dependencies) and by the host. Backend-neutral: a CUDA backend keeps its
/// `CUevent` beside it and completes this one from its collector thread.
#[derive(Debug, Clone)]
pub struct Event {
    id: u64,
    inner: Arc<EvInner>,
}

impl Event {
    pub fn new(id: u64) -> Self {
        Self { id, inner: Arc::new(EvInner::default()) }
    }
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Marks the work done (or failed). Only the backend calls this, once.
    pub fn complete(&self, r: Result<Timing, String>) {
        let mut s = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        s.done = Some(r);
        self.inner.ready.store(true, Ordering::Release);
        self.inner.cv.notify_all();
    }
    /// The timing if done, without blocking (`cuEventQuery`).
    pub fn query(&self) -> Option<Result<Timing, ExecError>> {
        let s = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        s.done.clone().map(|r| r.map_err(ExecError::Kernel))
    }
    /// Blocks until done (`cuEventSynchronize`). A failed launch is an error here, and in
    /// every launch that waited on it.
    pub fn wait(&self) -> Result<Timing, ExecError> {
        self.wait_timeout(Duration::from_secs(600))
    }
    pub fn wait_timeout(&self, limit: Duration) -> Result<Timing, ExecError> {
        spin_until(|| self.inner.ready.load(Ordering::Acquire));
        let s = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let (s, t) =
            self.inner.cv.wait_timeout_while(s, limit, |s| s.done.is_none()).unwrap_or_else(|e| e.into_inner());
        if t.timed_out() {
            return Err(ExecError::Timeout(self.id));
        }
        s.done.clone().expect("checked").map_err(ExecError::Kernel)
    }
}

/// One rank of a backend all-reduce: the rank's stream (on its device), its partial
/// sum, the view every rank's total goes to, and the events its part waits on.
#[derive(Debug, Clone)]
pub struct ReduceRank {
    pub stream: StreamId,
    pub src: View,
    pub dst: View,
    pub waits: Vec<Event>,
}

/// The seam the CPU and CUDA backends implement.
pub trait Backend: Send + Sync {
    /// `cpu` or `cuda`.
    fn kind(&self) -> &'static str;
    fn devices(&self) -> &[DeviceInfo];
    /// The stream of `device` with this priority (created on first use). Numerically
    /// lower is more urgent, as in CUDA.
    fn stream(&self, device: DeviceId, priority: i32) -> Result<StreamId, ExecError>;
    /// Allocates `len` elements charged to `arena`; refused when the device is full.
    fn alloc(&self, device: DeviceId, arena: Arena, dtype: Dtype, len: usize) -> Result<BufId, ExecError>;
    /// Frees a buffer once the work already queued on it is done (stream-ordered).
    fn free(&self, buf: BufId) -> Result<(), ExecError>;
    /// Copies host data into a buffer, synchronously.
    fn upload(&self, dst: View, data: &HostData) -> Result<(), ExecError>;
    /// Copies a view to the host, synchronously (after the caller waited on its events).
    fn download(&self, src: View) -> Result<HostData, ExecError>;
    /// Queues a kernel on a stream; it starts once every event in `waits` completed.
    fn launch(&self, stream: StreamId, kernel: Kernel, waits: &[Event]) -> Result<Event, ExecError>;
    /// Queues a copy between views of the same dtype (same or different devices).
    fn copy(&self, stream: StreamId, src: View, dst: View, waits: &[Event]) -> Result<Event, ExecError>;
    /// A snapshot of the device's memory ledger (every byte the backend holds there).
    fn ledger(&self, device: DeviceId) -> Result<MemLedger, ExecError>;
    /// Nanoseconds since the backend's epoch on the host clock (what timings are in).
    fn now_ns(&self) -> u64;
    /// Bytes moved by copies so far.
    fn bytes_copied(&self) -> u64;
    /// The device a buffer lives on.
    fn device_of(&self, buf: BufId) -> Result<DeviceId, ExecError>;
    /// Sums the bf16 `src` of every rank into every rank's `dst` with the backend's own
    /// collective library (NCCL), returning each rank's completion event in rank order;
    /// `None` when it has none for these ranks, and the runner then copies the parts and
    /// sums them in rank order with a Sum kernel per rank. The CPU backend always
    /// declines: its rank-order sum is what batch and placement invariance rest on.
    fn all_reduce(&self, _ranks: &[ReduceRank]) -> Result<Option<Vec<Event>>, ExecError> {
        Ok(None)
    }
    /// Which collective path `all_reduce` takes and why (for the executor's report).
    fn collectives(&self) -> String {
        "copies + Sum kernel (the backend has no collective library)".into()
    }
    /// Why this backend's kernel set cannot run `model`, if it cannot (checked before
    /// anything is loaded). By default the Llama layout only.
    fn refuses(&self, model: &slicesched_model::ModelConfig) -> Option<String> {
        model.departure_from_llama().map(|what| {
            format!(
                "{}: the {} backend runs the Llama layout (RMSNorm, RoPE, gated SiLU MLP, no biases); this model has {what}",
                model.name,
                self.kind()
            )
        })
    }
}
