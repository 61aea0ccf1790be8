//! The CPU backend: each device is a memory budget and a number of cores; each stream a
//! worker thread with a priority; events are host condition variables. Kernels compete
//! for the device's cores through a gate that always serves the most urgent waiting
//! stream first (priority acts between kernels, never preempting one — as on a GPU,
//! where it acts at block boundaries).

mod attention;
mod gemm;
pub(crate) mod math;
mod stream;

use crate::backend::*;
use crate::kernels::Kernel;
use crate::ExecError;
use half::bf16;
use slicesched_gmg::MemLedger;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;
pub(crate) use stream::thread_cpu_ns;
use stream::{worker, Gate};

/// Device memory as the CPU backend stores it.
#[derive(Debug)]
pub(crate) enum Data {
    Bf16(Vec<bf16>),
    F32(Vec<f32>),
    I32(Vec<i32>),
}

impl Data {
    fn kind(&self) -> &'static str {
        match self {
            Data::Bf16(_) => "bf16",
            Data::F32(_) => "f32",
            Data::I32(_) => "i32",
        }
    }
    fn dtype(&self) -> Dtype {
        match self {
            Data::Bf16(_) => Dtype::Bf16,
            Data::F32(_) => Dtype::F32,
            Data::I32(_) => Dtype::I32,
        }
    }
    fn len(&self) -> usize {
        match self {
            Data::Bf16(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
        }
    }
}

struct Buffer {
    device: DeviceId,
    arena: Arena,
    bytes: u64,
    data: RwLock<Data>,
}

/// What one device's workers share.
struct DevRt {
    info: DeviceInfo,
    ledger: Mutex<MemLedger>,
    gate: Gate,
}

enum Work {
    Kernel(Kernel),
    Copy { src: View, dst: View },
}

struct Task {
    waits: Vec<Event>,
    work: Work,
    /// Every buffer the work touches, with whether it writes it.
    bufs: Vec<(BufId, Arc<Buffer>, bool)>,
    done: Event,
    submit_ns: u64,
}

struct StreamRt {
    priority: i32,
    tx: mpsc::Sender<Task>,
}

/// Sizes of the CPU devices to create.
#[derive(Debug, Clone, Copy)]
pub struct CpuDeviceSpec {
    pub memory_bytes: u64,
    pub cores: u32,
}

/// The CPU backend.
pub struct CpuBackend {
    epoch: Instant,
    infos: Vec<DeviceInfo>,
    devs: Vec<Arc<DevRt>>,
    streams: Mutex<Vec<Vec<StreamRt>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    bufs: RwLock<HashMap<BufId, Arc<Buffer>>>,
    next_id: AtomicU64,
    copied: Arc<AtomicU64>,
}

impl CpuBackend {
    pub fn new(specs: &[CpuDeviceSpec]) -> Self {
        let infos: Vec<DeviceInfo> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| DeviceInfo {
                id: DeviceId(i as u32),
                name: format!("cpu:{i}"),
                memory_bytes: s.memory_bytes,
                compute_units: s.cores.max(1),
            })
            .collect();
        let devs = infos
            .iter()
            .map(|i| {
                Arc::new(DevRt {
                    info: i.clone(),
                    ledger: Mutex::new(MemLedger::new(i.memory_bytes)),
                    gate: Gate::new(i.compute_units),
                })
            })
            .collect();
        Self {
            epoch: Instant::now(),
            streams: Mutex::new(infos.iter().map(|_| Vec::new()).collect()),
            infos,
            devs,
            workers: Mutex::new(Vec::new()),
            bufs: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            copied: Arc::new(AtomicU64::new(0)),
        }
    }

    fn dev(&self, d: DeviceId) -> Result<&Arc<DevRt>, ExecError> {
        self.devs.get(d.0 as usize).ok_or_else(|| ExecError::UnknownDevice(format!("cpu:{}", d.0)))
    }

    fn buf(&self, id: BufId) -> Result<Arc<Buffer>, ExecError> {
        self.bufs.read().unwrap_or_else(|e| e.into_inner()).get(&id).cloned().ok_or(ExecError::UnknownBuffer(id.0))
    }

    fn submit(&self, stream: StreamId, work: Work, waits: &[Event]) -> Result<Event, ExecError> {
        let (reads, write) = match &work {
            Work::Kernel(k) => (k.inputs(), k.output()),
            Work::Copy { src, dst } => (vec![*src], *dst),
        };
        let mut bufs: Vec<(BufId, Arc<Buffer>, bool)> = Vec::with_capacity(reads.len() + 1);
        for (v, w) in reads.iter().map(|v| (v, false)).chain([(&write, true)]) {
            match bufs.iter_mut().find(|b| b.0 == v.buf) {
                Some(b) => b.2 |= w,
                None => bufs.push((v.buf, self.buf(v.buf)?, w)),
            }
        }
        if let Work::Kernel(k) = &work {
            if reads.iter().any(|r| r.buf == write.buf) {
                return Err(ExecError::Launch(format!("{}: an input aliases the output buffer", k.name())));
            }
            for (_, b, _) in &bufs {
                if b.device != stream.device {
                    return Err(ExecError::Launch(format!(
                        "{} on cpu:{} reads a buffer on cpu:{} (copy it first)",
                        k.name(),
                        stream.device.0,
                        b.device.0
                    )));
                }
            }
        }
        // A fixed order of locks: no two workers can deadlock on them.
        bufs.sort_by_key(|b| b.0);
        let streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let s = streams
            .get(stream.device.0 as usize)
            .and_then(|v| v.get(stream.index as usize))
            .ok_or_else(|| ExecError::Launch(format!("no stream {stream:?}")))?;
        let done = Event::new(self.next_id.fetch_add(1, Ordering::Relaxed));
        let task = Task { waits: waits.to_vec(), work, bufs, done: done.clone(), submit_ns: self.now_ns() };
        s.tx.send(task).map_err(|_| ExecError::Launch("stream worker is gone".into()))?;
        Ok(done)
    }
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        // Closing the channels ends the workers after the work already queued.
        self.streams.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for h in self.workers.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = h.join();
        }
    }
}

impl Backend for CpuBackend {
    fn kind(&self) -> &'static str {
        "cpu"
    }
    fn refuses(&self, model: &slicesched_model::ModelConfig) -> Option<String> {
        crate::model::cpu_departure(model)
            .map(|what| format!("{}: the CPU backend does not run {what} yet", model.name))
    }
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }
    fn stream(&self, device: DeviceId, priority: i32) -> Result<StreamId, ExecError> {
        let dev = self.dev(device)?.clone();
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let list = &mut streams[device.0 as usize];
        if let Some(i) = list.iter().position(|s| s.priority == priority) {
            return Ok(StreamId { device, index: i as u32 });
        }
        let (tx, rx) = mpsc::channel();
        let (epoch, copied) = (self.epoch, self.copied.clone());
        let h = std::thread::Builder::new()
            .name(format!("{}-prio{priority}", dev.info.name))
            .spawn(move || worker(rx, dev, priority, epoch, copied))
            .map_err(|e| ExecError::Launch(format!("cannot start a stream thread: {e}")))?;
        self.workers.lock().unwrap_or_else(|e| e.into_inner()).push(h);
        list.push(StreamRt { priority, tx });
        Ok(StreamId { device, index: list.len() as u32 - 1 })
    }
    fn alloc(&self, device: DeviceId, arena: Arena, dtype: Dtype, len: usize) -> Result<BufId, ExecError> {
        let dev = self.dev(device)?;
        let bytes = len as u64 * dtype.bytes();
        crate::backend::charge(&dev.ledger, &dev.info.name, arena, bytes, self.now_ns())?;
        let data = match dtype {
            Dtype::Bf16 => Data::Bf16(vec![bf16::ZERO; len]),
            Dtype::F32 => Data::F32(vec![0.0; len]),
            Dtype::I32 => Data::I32(vec![0; len]),
        };
        let id = BufId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let b = Arc::new(Buffer { device, arena, bytes, data: RwLock::new(data) });
        self.bufs.write().unwrap_or_else(|e| e.into_inner()).insert(id, b);
        Ok(id)
    }
    fn free(&self, buf: BufId) -> Result<(), ExecError> {
        let b =
            self.bufs.write().unwrap_or_else(|e| e.into_inner()).remove(&buf).ok_or(ExecError::UnknownBuffer(buf.0))?;
        self.dev(b.device)?.ledger.lock().unwrap_or_else(|e| e.into_inner()).release(b.arena.ledger_kind(), b.bytes);
        Ok(())
    }
    fn upload(&self, dst: View, data: &HostData) -> Result<(), ExecError> {
        let b = self.buf(dst.buf)?;
        let mut d = b.data.write().unwrap_or_else(|e| e.into_inner());
        if d.dtype() != data.dtype() || data.len() != dst.len || dst.offset + dst.len > d.len() {
            return Err(ExecError::Launch(format!(
                "upload of {} {:?} into {dst:?} of a {} buffer of {}",
                data.len(),
                data.dtype(),
                d.kind(),
                d.len()
            )));
        }
        let r = dst.offset..dst.offset + dst.len;
        match (&mut *d, data) {
            (Data::Bf16(o), HostData::Bf16(s)) => o[r].copy_from_slice(s),
            (Data::F32(o), HostData::F32(s)) => o[r].copy_from_slice(s),
            (Data::I32(o), HostData::I32(s)) => o[r].copy_from_slice(s),
            _ => unreachable!("dtypes checked above"),
        }
        Ok(())
    }
    fn download(&self, src: View) -> Result<HostData, ExecError> {
        let b = self.buf(src.buf)?;
        let d = b.data.read().unwrap_or_else(|e| e.into_inner());
        let r = src.offset..src.offset + src.len;
        let bad = || ExecError::Launch(format!("download {src:?} outside a buffer of {}", d.len()));
        Ok(match &*d {
            Data::Bf16(v) => HostData::Bf16(v.get(r).ok_or_else(bad)?.to_vec()),
            Data::F32(v) => HostData::F32(v.get(r).ok_or_else(bad)?.to_vec()),
            Data::I32(v) => HostData::I32(v.get(r).ok_or_else(bad)?.to_vec()),
        })
    }
    fn launch(&self, stream: StreamId, kernel: Kernel, waits: &[Event]) -> Result<Event, ExecError> {
        self.submit(stream, Work::Kernel(kernel), waits)
    }
    fn copy(&self, stream: StreamId, src: View, dst: View, waits: &[Event]) -> Result<Event, ExecError> {
        self.submit(stream, Work::Copy { src, dst }, waits)
    }
    fn ledger(&self, device: DeviceId) -> Result<MemLedger, ExecError> {
        Ok(self.dev(device)?.ledger.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    fn bytes_copied(&self) -> u64 {
        self.copied.load(Ordering::Relaxed)
    }
    fn device_of(&self, buf: BufId) -> Result<DeviceId, ExecError> {
        Ok(self.buf(buf)?.device)
    }
}

/// Parses `cpu` or `cpu:N` (the device ordinal). Anything else is an unknown device; a
/// `cuda:N` says the CUDA backend is not in this build.
pub fn parse_device(s: &str) -> Result<u32, ExecError> {
    match s.split_once(':') {
        None if s == "cpu" => Ok(0),
        Some(("cpu", n)) => {
            n.parse().map_err(|_| ExecError::UnknownDevice(format!("{s} (the ordinal must be a number)")))
        }
        Some(("cuda", _)) => {
            Err(ExecError::UnknownDevice(format!("{s}: the CUDA backend is not part of this build; use cpu or cpu:N")))
        }
        _ => Err(ExecError::UnknownDevice(format!("{s} (known: cpu, cpu:N)"))),
    }
}
