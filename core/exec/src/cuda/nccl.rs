//! NCCL for the tensor-parallel all-reduce (cudarc feature `nccl`, loaded at run time
//! like every CUDA library: the build links without NCCL anywhere).
//!
//! `SLICESCHED_NCCL` chooses: `auto` (default) uses NCCL when libnccl loads and the
//! group's ranks are distinct GPUs, and otherwise declines silently, so the runner takes
//! its copies + Sum path (the executor's report says which ran and why); `off` never
//! uses it; `require` makes a missing libnccl a typed error at backend start and a group
//! NCCL cannot serve (two ranks on one GPU) an error at launch.
//!
//! One communicator set per group of streams (`Comm::from_devices`, i.e.
//! `ncclCommInitAll`), created on first use and cached: the key is the ranks' streams,
//! because a communicator is bound to the streams it was made with. All ranks are
//! driven from this one thread, so their calls go inside one `ncclGroupStart/End`
//! (without it the first rank's call would wait for ranks not yet issued).
//!
//! Numerics: for two ranks NCCL's bf16 sum is one correctly rounded add, the same bits
//! as the Sum kernel; for more ranks its ring order and per-step bf16 rounding may
//! differ from the Sum kernel's f32 rank-order sum by an ulp (NCCL still gives every
//! rank the same bits).

use super::launch::{register, wait_events};
use super::memory::Buffer;
use super::nvrtc::lib_names;
use super::{guard, CudaBackend};
use crate::backend::{Dtype, Event, ReduceRank, StreamId};
use crate::ExecError;
use cudarc::nccl::{group_end, group_start, Comm, ReduceOp};
use half::bf16;
use std::collections::{BTreeSet, HashMap};
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// When NCCL runs the all-reduce (`SLICESCHED_NCCL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcclMode {
    /// When libnccl loads and the ranks are distinct GPUs; else copies + Sum.
    Auto,
    /// Never: always copies + Sum.
    Off,
    /// Always: a missing libnccl or a group it cannot serve is an error.
    Require,
}

impl NcclMode {
    pub fn parse(s: &str) -> Result<Self, ExecError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "off" | "0" | "false" | "no" => Ok(Self::Off),
            "require" | "required" | "on" | "1" | "true" | "yes" => Ok(Self::Require),
            v => Err(ExecError::Cuda(format!("SLICESCHED_NCCL={v}: expected auto, off or require"))),
        }
    }

    /// `SLICESCHED_NCCL`, `auto` when unset.
    pub fn from_env() -> Result<Self, ExecError> {
        Self::parse(&std::env::var("SLICESCHED_NCCL").unwrap_or_default())
    }

    fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Off => "off",
            Self::Require => "require",
        }
    }
}

/// What one all-reduce over a group does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    Nccl,
    /// Copies + Sum, and why.
    Fallback(String),
}

/// The error a required but missing libnccl is: one line naming the library.
pub fn missing_nccl() -> ExecError {
    ExecError::NoCuda {
        missing: format!("libnccl (NCCL, required by SLICESCHED_NCCL=require) not found (tried {})", lib_names("nccl")),
    }
}

/// Chooses the path of an all-reduce over GPUs `ordinals` (one per rank): pure, so the
/// rules are tested without NCCL or a GPU.
pub fn choose(mode: NcclMode, nccl_present: bool, ordinals: &[usize]) -> Result<Choice, ExecError> {
    if mode == NcclMode::Off {
        return Ok(Choice::Fallback("SLICESCHED_NCCL=off".into()));
    }
    if !nccl_present {
        return match mode {
            NcclMode::Require => Err(missing_nccl()),
            _ => Ok(Choice::Fallback(format!("libnccl not found (tried {})", lib_names("nccl")))),
        };
    }
    let distinct: BTreeSet<usize> = ordinals.iter().copied().collect();
    if distinct.len() < ordinals.len() {
        // ncclCommInitAll refuses a device listed twice.
        let why = format!("ranks share a GPU (ordinals {ordinals:?}): NCCL needs one rank per GPU");
        return match mode {
            NcclMode::Require => Err(ExecError::Launch(format!("all-reduce with SLICESCHED_NCCL=require: {why}"))),
            _ => Ok(Choice::Fallback(why)),
        };
    }
    Ok(Choice::Nccl)
}

/// NCCL's communicators, one set per group of streams.
struct Comms(Vec<Comm>);

// SAFETY: an NCCL communicator may be used from any thread, one call at a time: every
// use happens under `Nccl::comms`' lock.
unsafe impl Send for Comms {}
unsafe impl Sync for Comms {}

pub(crate) struct Nccl {
    pub mode: NcclMode,
    pub present: bool,
    comms: Mutex<HashMap<Vec<StreamId>, Comms>>,
    /// Why all-reduces fell back, once each (for the report).
    fallbacks: Mutex<BTreeSet<String>>,
}

impl Nccl {
    /// Checks the library once; a required one that is missing refuses the backend.
    pub fn new(mode: NcclMode, present: bool) -> Result<Self, ExecError> {
        if mode == NcclMode::Require && !present {
            return Err(missing_nccl());
        }
        Ok(Self { mode, present, comms: Mutex::new(HashMap::new()), fallbacks: Mutex::new(BTreeSet::new()) })
    }

    pub fn describe(&self) -> String {
        let version = if self.present {
            guard("libnccl", || {
                cudarc::nccl::result::get_nccl_version().map_err(|e| ExecError::Cuda(format!("ncclGetVersion: {e:?}")))
            })
            .map(|v| format!("NCCL {}.{}.{}", v / 10000, v / 100 % 100, v % 100))
            .unwrap_or_else(|e| format!("NCCL present, version unknown ({e})"))
        } else {
            "no libnccl".into()
        };
        let fb = self.fallbacks.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = format!("SLICESCHED_NCCL={}; {version}", self.mode.name());
        if !fb.is_empty() {
            s += &format!("; copies + Sum where: {}", fb.iter().cloned().collect::<Vec<_>>().join("; "));
        }
        s
    }
}

fn nccl_err(what: &str) -> impl FnOnce(cudarc::nccl::result::NcclError) -> ExecError + '_ {
    // NcclError implements neither Display nor std::error::Error: its code is the message.
    move |e| ExecError::Cuda(format!("{what}: {:?}", e.0))
}

/// The all-reduce of [`crate::Backend::all_reduce`] on the CUDA backend.
pub(super) fn all_reduce(bk: &CudaBackend, ranks: &[ReduceRank]) -> Result<Option<Vec<Event>>, ExecError> {
    let sh = bk.shared();
    let nccl = &bk.nccl;
    let ordinals: Vec<usize> =
        ranks.iter().map(|r| sh.dev(r.stream.device).map(|d| d.ctx.ordinal())).collect::<Result<_, _>>()?;
    match choose(nccl.mode, nccl.present, &ordinals)? {
        Choice::Fallback(why) => {
            nccl.fallbacks.lock().unwrap_or_else(|e| e.into_inner()).insert(why);
            return Ok(None);
        }
        Choice::Nccl => {}
    }
    // Every view is checked before anything is queued: one bad rank would otherwise
    // leave the others waiting inside NCCL for ever.
    let mut bufs: Vec<Vec<Arc<Buffer>>> = Vec::new();
    let mut ptrs = Vec::new();
    let len = ranks.first().map_or(0, |r| r.src.len);
    for r in ranks {
        let (s, d) = (sh.buf(r.src.buf)?, sh.buf(r.dst.buf)?);
        for b in [&s, &d] {
            if b.dtype != Dtype::Bf16 || b.device != r.stream.device {
                return Err(ExecError::Launch(format!(
                    "all-reduce: a {:?} buffer on cuda device {} for a rank on device {}",
                    b.dtype, b.device.0, r.stream.device.0
                )));
            }
        }
        if r.src.len != len || r.dst.len != len {
            return Err(ExecError::Launch(format!("all-reduce: ranks of {} and {len} elements", r.src.len)));
        }
        ptrs.push((s.ptr_of(r.src)?, d.ptr_of(r.dst)?));
        bufs.push(vec![s, d]);
    }
    let seams: Vec<Event> = ranks.iter().map(|_| Event::new(sh.next_id.fetch_add(1, Ordering::Relaxed))).collect();
    let submit_ns = sh.now_ns();
    if let Some(e) = ranks.iter().flat_map(|r| &r.waits).find_map(|w| w.query().and_then(|r| r.err())) {
        for s in &seams {
            s.complete(Err(format!("an input failed: {e}")));
        }
        return Ok(Some(seams));
    }
    let key: Vec<StreamId> = ranks.iter().map(|r| r.stream).collect();
    let mut comms = nccl.comms.lock().unwrap_or_else(|e| e.into_inner());
    let mut rts = Vec::new();
    for r in ranks {
        rts.push(sh.dev(r.stream.device)?.stream_rt(r.stream.index)?);
    }
    if !comms.contains_key(&key) {
        let streams = rts.iter().map(|rt| rt.stream.clone()).collect();
        let c = guard("libnccl", || Comm::from_devices(streams).map_err(nccl_err("ncclCommInitAll")))?;
        comms.insert(key.clone(), Comms(c));
    }
    let group = &comms[&key].0;
    // Each rank's stream is held from its waits to its end event, as in `submit`.
    let locks: Vec<_> = rts.iter().map(|rt| rt.blas.lock().unwrap_or_else(|e| e.into_inner())).collect();
    let mut evs = Vec::new();
    for (r, rt) in ranks.iter().zip(&rts) {
        let dev = sh.dev(r.stream.device)?;
        dev.bind()?;
        let ev = dev.events.take(&dev.ctx)?;
        wait_events(sh, &rt.stream, &r.waits)?;
        ev.start.record(&rt.stream).map_err(super::device::cu("recording a start event"))?;
        evs.push(ev);
    }
    guard("libnccl", || {
        group_start().map_err(nccl_err("ncclGroupStart"))?;
        let mut first_err = None;
        for (comm, &(src, dst)) in group.iter().zip(&ptrs) {
            let stream = comm.stream();
            // SAFETY: both addresses were checked inside live bf16 buffers of `len`
            // elements on this rank's device. The slices only lend the addresses to
            // NCCL: ManuallyDrop keeps cudarc from freeing memory our buffers own.
            let (s, mut d) = unsafe {
                (
                    ManuallyDrop::new(stream.upgrade_device_ptr::<bf16>(src, len)),
                    ManuallyDrop::new(stream.upgrade_device_ptr::<bf16>(dst, len)),
                )
            };
            if let Err(e) = comm.all_reduce(&*s, &mut *d, &ReduceOp::Sum) {
                first_err.get_or_insert(nccl_err("ncclAllReduce")(e));
            }
        }
        // The group is closed even after an error, or NCCL would stay inside it.
        let end = group_end().map_err(nccl_err("ncclGroupEnd"));
        first_err.map_or(end.map(|_| ()), Err)
    })?;
    for (ev, rt) in evs.iter().zip(&rts) {
        ev.end.record(&rt.stream).map_err(super::device::cu("recording an end event"))?;
    }
    drop(locks);
    drop(comms);
    for (((r, ev), b), seam) in ranks.iter().zip(evs).zip(&bufs).zip(&seams) {
        register(bk, r.stream, ev, b, seam, submit_ns)?;
        sh.copied.fetch_add(2 * len as u64, Ordering::Relaxed);
    }
    Ok(Some(seams))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_refuse_typos() {
        assert_eq!(NcclMode::parse("").unwrap(), NcclMode::Auto);
        assert_eq!(NcclMode::parse("OFF").unwrap(), NcclMode::Off);
        assert_eq!(NcclMode::parse("require").unwrap(), NcclMode::Require);
        assert!(NcclMode::parse("sometimes").unwrap_err().to_string().contains("auto, off or require"));
    }

    #[test]
    fn without_nccl_auto_falls_back_and_require_names_libnccl() {
        match choose(NcclMode::Auto, false, &[0, 1]).unwrap() {
            Choice::Fallback(why) => assert!(why.contains("libnccl"), "{why}"),
            c => panic!("{c:?}"),
        }
        let e = choose(NcclMode::Require, false, &[0, 1]).unwrap_err();
        assert!(matches!(e, ExecError::NoCuda { .. }), "{e:?}");
        let line = e.to_string();
        assert!(line.contains("libnccl") && line.contains("libnccl.so") && !line.contains('\n'), "{line}");
        assert!(Nccl::new(NcclMode::Require, false).is_err());
        assert!(Nccl::new(NcclMode::Auto, false).is_ok());
    }

    #[test]
    fn off_and_shared_gpus_fall_back_and_distinct_gpus_take_nccl() {
        assert!(matches!(choose(NcclMode::Off, true, &[0, 1]).unwrap(), Choice::Fallback(_)));
        match choose(NcclMode::Auto, true, &[0, 0]).unwrap() {
            Choice::Fallback(why) => assert!(why.contains("share a GPU"), "{why}"),
            c => panic!("{c:?}"),
        }
        assert!(choose(NcclMode::Require, true, &[1, 1]).is_err());
        assert_eq!(choose(NcclMode::Auto, true, &[0, 1, 2, 3]).unwrap(), Choice::Nccl);
        assert_eq!(choose(NcclMode::Require, true, &[2, 3]).unwrap(), Choice::Nccl);
    }
}
