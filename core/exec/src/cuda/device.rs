//! One GPU: its primary context (event tracking off), its streams by priority class,
//! each with its own cuBLAS handle, the memory pool kept warm, the kernel modules and
//! the clock anchor the collector converts GPU event times with.

use super::blas::Blas;
use super::nvrtc::{self, Image, KERNELS};
use super::timing::{Anchor, EventPool};
use crate::backend::{Arena, DeviceId, DeviceInfo};
use crate::ExecError;
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use slicesched_gmg::MemLedger;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

pub(super) fn cu(what: impl std::fmt::Display) -> impl FnOnce(result::DriverError) -> ExecError {
    move |e| ExecError::Cuda(format!("{what}: {e}"))
}

/// A stream of one priority and the cuBLAS handle bound to it. The mutex is held from
/// the first wait to the end event of one op, so an op's events bracket exactly it.
pub(crate) struct StreamRt {
    pub priority: i32,
    pub stream: Arc<CudaStream>,
    pub blas: Mutex<Blas>,
}

/// The kernels compiled for one head dimension.
pub(crate) struct Module {
    _module: Arc<CudaModule>,
    pub funcs: HashMap<&'static str, CudaFunction>,
    /// `cubin sm_90` or `ptx compute_90 (JIT)`: what the driver loaded.
    pub kind: String,
}

pub(crate) struct Dev {
    pub id: DeviceId,
    pub info: DeviceInfo,
    pub ctx: Arc<CudaContext>,
    pub cc: (i32, i32),
    /// (least, greatest) as the driver reports it: numerically lower is more urgent.
    pub prio_range: (i32, i32),
    /// Allocations, frees, uploads and downloads: never a stream the executor launches on.
    pub util: Mutex<Arc<CudaStream>>,
    pub streams: RwLock<Vec<Arc<StreamRt>>>,
    pub pool: sys::CUmemoryPool,
    pub ledger: Mutex<MemLedger>,
    pub modules: Mutex<HashMap<usize, Arc<Module>>>,
    pub events: EventPool,
    pub anchor: Mutex<Anchor>,
    pub anchor_stream: Arc<CudaStream>,
    /// Bytes the driver reported used after each setup step (context, modules).
    pub setup_bytes: Mutex<Vec<(String, u64)>>,
    /// Pinned host chunks for uploads and downloads.
    pub staging: super::staging::Staging,
}

// SAFETY: the pool handle is a driver handle valid for the context's life; every use
// binds the context first.
unsafe impl Send for Dev {}
unsafe impl Sync for Dev {}

/// The head dimension of the module compiled at startup (Llama's); others on demand.
pub(super) const DEFAULT_HEAD_DIM: usize = 128;

impl Dev {
    pub(super) fn open(id: DeviceId, ordinal: usize, epoch: Instant) -> Result<Self, ExecError> {
        let ctx = CudaContext::new(ordinal).map_err(cu(format!("cuda:{ordinal}: creating the context")))?;
        // SAFETY: called before any allocation or stream of this context exists; from
        // here on the executor's events are the only cross-stream dependencies.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(cu("device name"))?;
        let cc = ctx.compute_capability().map_err(cu("compute capability"))?;
        let sms =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(cu("SM count"))?;
        let total = ctx.total_mem().map_err(cu("total memory"))? as u64;
        let prio_range = result::stream::get_priority_range().map_err(cu("stream priority range"))?;
        if !ctx.has_async_alloc() {
            return Err(ExecError::Cuda(format!("cuda:{ordinal} ({name}) has no stream-ordered memory pools")));
        }
        // SAFETY: cu_device is this context's device; the attribute takes a u64.
        let pool = unsafe {
            let pool = result::device::get_default_mem_pool(ctx.cu_device()).map_err(cu("default memory pool"))?;
            // Freed memory stays in the pool: the executor frees and reallocates
            // workspace every iteration, and a release to the driver costs a sync.
            let mut keep = u64::MAX;
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut keep as *mut u64 as *mut _,
            )
            .map_err(cu("pool release threshold"))?;
            pool
        };
        let util = ctx.new_stream().map_err(cu("utility stream"))?;
        let anchor_stream = ctx.new_stream().map_err(cu("anchor stream"))?;
        let anchor = Anchor::take(&ctx, &anchor_stream, epoch)?;
        let info = DeviceInfo { id, name: format!("cuda:{ordinal}"), memory_bytes: total, compute_units: sms as u32 };
        let dev = Self {
            id,
            info,
            cc,
            prio_range,
            util: Mutex::new(util),
            streams: RwLock::new(Vec::new()),
            pool,
            ledger: Mutex::new(MemLedger::new(total)),
            modules: Mutex::new(HashMap::new()),
            events: EventPool::default(),
            anchor: Mutex::new(anchor),
            anchor_stream,
            setup_bytes: Mutex::new(Vec::new()),
            staging: Default::default(),
            ctx,
        };
        dev.note("context", dev.used_bytes()?);
        dev.module(DEFAULT_HEAD_DIM)?;
        let used = dev.used_bytes()?;
        dev.note("kernel module", used);
        // What is in use before our first allocation (this context, its modules, other
        // processes' memory): the ledger must see it, or the no-OOM property would count
        // on memory that is not there. (cuMemGetInfo needs a context, so there is no
        // reading before ours.)
        dev.charge(Arena::Backend, used);
        Ok(dev)
    }

    fn note(&self, what: &str, used: u64) {
        self.setup_bytes.lock().unwrap_or_else(|e| e.into_inner()).push((what.into(), used));
    }

    /// Charges bytes the backend took for itself (context, cuBLAS workspaces).
    pub(super) fn charge(&self, arena: Arena, bytes: u64) {
        let mut l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        l.alloc(arena.ledger_kind(), bytes, 0);
    }

    pub(super) fn used_bytes(&self) -> Result<u64, ExecError> {
        self.ctx.bind_to_thread().map_err(cu("bind"))?;
        let (free, total) = result::mem_get_info().map_err(cu("cuMemGetInfo"))?;
        Ok((total - free) as u64)
    }

    pub(super) fn bind(&self) -> Result<(), ExecError> {
        self.ctx.bind_to_thread().map_err(cu(format!("{}: binding the context", self.info.name)))
    }

    /// The CUDA priority of the executor's priority `p`: urgent (< 0) gets the device's
    /// greatest, background (> 0) its least, 0 the middle. Distinct executor priorities
    /// keep distinct streams even when they share a CUDA priority.
    pub(super) fn cuda_priority(&self, p: i32) -> i32 {
        let (least, greatest) = self.prio_range;
        match p {
            p if p < 0 => greatest,
            0 => (least + greatest) / 2,
            _ => least,
        }
    }

    /// The stream of priority `p`, created with its cuBLAS handle on first use.
    pub(super) fn stream(&self, p: i32) -> Result<u32, ExecError> {
        if let Some(i) = self.streams.read().unwrap_or_else(|e| e.into_inner()).iter().position(|s| s.priority == p) {
            return Ok(i as u32);
        }
        let mut list = self.streams.write().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = list.iter().position(|s| s.priority == p) {
            return Ok(i as u32);
        }
        self.bind()?;
        let stream = self.ctx.new_stream_with_priority(self.cuda_priority(p)).map_err(cu("creating a stream"))?;
        let blas = Blas::new(self, stream.clone())?;
        list.push(Arc::new(StreamRt { priority: p, stream, blas: Mutex::new(blas) }));
        Ok(list.len() as u32 - 1)
    }

    pub(super) fn stream_rt(&self, index: u32) -> Result<Arc<StreamRt>, ExecError> {
        self.streams
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(index as usize)
            .cloned()
            .ok_or_else(|| ExecError::Launch(format!("no stream {index} on {}", self.info.name)))
    }

    /// The kernels for head dimension `d`: compiled (or read from the disk cache) and
    /// loaded on first use, CUBIN for this device's architecture, else PTX.
    pub(super) fn module(&self, d: usize) -> Result<Arc<Module>, ExecError> {
        if let Some(m) = self.modules.lock().unwrap_or_else(|e| e.into_inner()).get(&d) {
            return Ok(m.clone());
        }
        self.bind()?;
        let (major, minor) = self.cc;
        let sm = format!("sm_{major}{minor}");
        let (module, kind) = match nvrtc::compile(&sm, d, false).and_then(|c| self.load(c.image)) {
            Ok(m) => (m, format!("cubin {sm}")),
            Err(cubin_err) => {
                let arch = format!("compute_{major}{minor}");
                let m = nvrtc::compile(&arch, d, false)
                    .and_then(|c| self.load(c.image))
                    .map_err(|e| ExecError::Cuda(format!("kernels for head dim {d}: CUBIN: {cubin_err}; PTX: {e}")))?;
                (m, format!("ptx {arch} (JIT)"))
            }
        };
        let mut funcs = HashMap::new();
        for k in KERNELS {
            funcs.insert(*k, module.load_function(k).map_err(cu(format!("loading kernel {k}")))?);
        }
        let m = Arc::new(Module { _module: module, funcs, kind });
        self.modules.lock().unwrap_or_else(|e| e.into_inner()).insert(d, m.clone());
        Ok(m)
    }

    /// Any loaded module (the kernels that do not depend on the head dimension).
    pub(super) fn any_module(&self) -> Result<Arc<Module>, ExecError> {
        let first = self.modules.lock().unwrap_or_else(|e| e.into_inner()).values().next().cloned();
        match first {
            Some(m) => Ok(m),
            None => self.module(DEFAULT_HEAD_DIM),
        }
    }

    fn load(&self, image: Image) -> Result<Arc<CudaModule>, ExecError> {
        let ptx = match image {
            Image::Cubin(b) => Ptx::from_binary(b),
            Image::Ptx(s) => Ptx::from_src(s),
        };
        self.ctx.load_module(ptx).map_err(cu("loading the kernel module"))
    }

    pub(super) fn describe(&self) -> Result<serde_json::Value, ExecError> {
        self.bind()?;
        let mut driver = 0;
        // SAFETY: an out-pointer to a live local.
        unsafe { sys::cuDriverGetVersion(&mut driver) }.result().map_err(cu("cuDriverGetVersion"))?;
        let nvrtc = nvrtc::version().ok();
        let mut high = 0u64;
        // SAFETY: the pool is this device's; USED_MEM_HIGH is a u64.
        unsafe {
            result::mem_pool::get_attribute(
                self.pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                &mut high as *mut u64 as *mut _,
            )
        }
        .map_err(cu("pool high-water mark"))?;
        let modules: Vec<String> = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(d, m)| format!("head_dim {d}: {}", m.kind))
            .collect();
        let l = self.ledger.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Ok(serde_json::json!({
            "device": self.info.name,
            "name": self.ctx.name().unwrap_or_default(),
            "compute_capability": format!("{}.{}", self.cc.0, self.cc.1),
            "sms": self.info.compute_units,
            "memory_bytes": self.info.memory_bytes,
            "driver_version": driver,
            "nvrtc_version": nvrtc.map(|(a, b)| format!("{a}.{b}")),
            "priority_range": { "least": self.prio_range.0, "greatest": self.prio_range.1 },
            "modules": modules,
            "host_copies": self.staging.describe(),
            "setup_used_bytes": *self.setup_bytes.lock().unwrap_or_else(|e| e.into_inner()),
            "used_bytes_now": self.used_bytes()?,
            "pool_used_high_bytes": high,
            "ledger": {
                "weights": l.weights,
                "kv_pool": l.kv_pool,
                "activations": l.activations,
            },
        }))
    }
}

/// Lets every pair of GPUs that can reach each other copy and read directly: context
/// peer access, and access to each other's default pool (pool memory is private to its
/// device otherwise; executor.md §2).
pub(super) fn enable_peers(devs: &[Arc<Dev>]) -> Result<(), ExecError> {
    for a in devs {
        for b in devs {
            if a.id == b.id || a.ctx.cu_device() == b.ctx.cu_device() {
                continue;
            }
            let mut can = 0;
            // SAFETY: two valid devices and an out-pointer to a live local.
            unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.ctx.cu_device(), b.ctx.cu_device()) }
                .result()
                .map_err(cu("cuDeviceCanAccessPeer"))?;
            if can == 0 {
                continue;
            }
            a.bind()?;
            // SAFETY: a's context is current; b's context lives as long as b.
            let r = unsafe { sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0) };
            if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                r.result().map_err(cu(format!("peer access {} -> {}", a.info.name, b.info.name)))?;
            }
            pool_access(b, a)?;
        }
    }
    Ok(())
}

/// Gives device `to` read-write access to `owner`'s default pool.
fn pool_access(owner: &Dev, to: &Dev) -> Result<(), ExecError> {
    let desc = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: to.ctx.ordinal() as i32,
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    owner.bind()?;
    // SAFETY: one valid descriptor; the pool is owner's.
    unsafe { sys::cuMemPoolSetAccess(owner.pool, &desc, 1) }.result().map_err(cu("cuMemPoolSetAccess"))
}
