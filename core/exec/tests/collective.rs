//! The runner's choice between a backend's collective library (NCCL on CUDA) and its
//! own copies + Sum path, tested on CPU: the CPU backend declines, and a backend that
//! offers an all-reduce (here a CPU backend wrapped to emulate a library) gets every
//! tensor-parallel all-reduce, with the same tokens.

mod common;

use common::*;
use slicesched_exec::kernels::Kernel;
use slicesched_exec::runner::Runner;
use slicesched_exec::*;
use slicesched_gmg::MemLedger;
use std::sync::atomic::{AtomicU64, Ordering};

/// A CPU backend that answers `all_reduce` itself, as a library would: each rank gets
/// the other ranks' parts and sums them in rank order (so the bits equal the runner's).
struct Library {
    cpu: CpuBackend,
    calls: AtomicU64,
}

impl Backend for Library {
    fn kind(&self) -> &'static str {
        "cpu"
    }
    fn devices(&self) -> &[DeviceInfo] {
        self.cpu.devices()
    }
    fn stream(&self, device: DeviceId, priority: i32) -> Result<StreamId, ExecError> {
        self.cpu.stream(device, priority)
    }
    fn alloc(&self, device: DeviceId, arena: Arena, dtype: Dtype, len: usize) -> Result<BufId, ExecError> {
        self.cpu.alloc(device, arena, dtype, len)
    }
    fn free(&self, buf: BufId) -> Result<(), ExecError> {
        self.cpu.free(buf)
    }
    fn upload(&self, dst: View, data: &HostData) -> Result<(), ExecError> {
        self.cpu.upload(dst, data)
    }
    fn download(&self, src: View) -> Result<HostData, ExecError> {
        self.cpu.download(src)
    }
    fn launch(&self, stream: StreamId, kernel: Kernel, waits: &[Event]) -> Result<Event, ExecError> {
        self.cpu.launch(stream, kernel, waits)
    }
    fn copy(&self, stream: StreamId, src: View, dst: View, waits: &[Event]) -> Result<Event, ExecError> {
        self.cpu.copy(stream, src, dst, waits)
    }
    fn ledger(&self, device: DeviceId) -> Result<MemLedger, ExecError> {
        self.cpu.ledger(device)
    }
    fn now_ns(&self) -> u64 {
        self.cpu.now_ns()
    }
    fn bytes_copied(&self) -> u64 {
        self.cpu.bytes_copied()
    }
    fn device_of(&self, buf: BufId) -> Result<DeviceId, ExecError> {
        self.cpu.device_of(buf)
    }
    fn all_reduce(&self, ranks: &[ReduceRank]) -> Result<Option<Vec<Event>>, ExecError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::new();
        for r in ranks {
            let dev = r.stream.device;
            let mut parts = Vec::new();
            let mut waits = Vec::new();
            let mut tmp = Vec::new();
            for q in ranks {
                if q.stream.device == dev {
                    parts.push(q.src);
                    waits.extend(q.waits.iter().cloned());
                    continue;
                }
                let t = View::whole(self.cpu.alloc(dev, Arena::Workspace, Dtype::Bf16, q.src.len)?, q.src.len);
                waits.push(self.cpu.copy(r.stream, q.src, t, &q.waits)?);
                parts.push(t);
                tmp.push(t.buf);
            }
            out.push(self.cpu.launch(r.stream, Kernel::Sum { parts, out: r.dst }, &waits)?);
            for b in tmp {
                self.cpu.free(b)?; // stream-ordered: after the Sum read it
            }
        }
        Ok(Some(out))
    }
    fn collectives(&self) -> String {
        "an emulated library".into()
    }
}

#[test]
fn the_cpu_backend_declines_and_the_runner_counts_copy_sum_all_reduces() {
    let b = backend(2);
    let m = micro();
    let w = weights(&m);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0, 1]), 16).unwrap();
    let p = prompt(9, m.vocab(), 2);
    generate(&mut r, t, 1, &p, 2, &home);
    let c = r.collective_report();
    // Two all-reduces per layer (after attention and after the MLP) per iteration.
    assert_eq!(c.copy_sum_all_reduces, 2 * 2 * m.layers() as u64, "{c:?}");
    assert_eq!(c.library_all_reduces, 0);
    assert!(c.backend.contains("copies + Sum"), "{c:?}");
}

#[test]
fn a_backend_that_offers_an_all_reduce_gets_every_one_with_the_same_tokens() {
    let m = micro();
    let w = weights(&m);
    let p = prompt(11, m.vocab(), 3);
    let plain = backend(2);
    let mut r = Runner::new(&plain);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0, 1]), 16).unwrap();
    let (want, want_logits) = generate(&mut r, t, 1, &p, 4, &home);
    drop(r);
    let lib = Library { cpu: backend(2), calls: AtomicU64::new(0) };
    let mut r = Runner::new(&lib);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0, 1]), 16).unwrap();
    let (got, got_logits) = generate(&mut r, t, 1, &p, 4, &home);
    assert_eq!(got, want);
    assert_eq!(got_logits, want_logits, "rank-order sums either way: the same bits");
    let c = r.collective_report();
    assert_eq!(c.library_all_reduces, 4 * 2 * m.layers() as u64, "{c:?}");
    assert_eq!((c.copy_sum_all_reduces, c.backend.as_str()), (0, "an emulated library"));
    assert_eq!(lib.calls.load(Ordering::Relaxed), c.library_all_reduces);
}
