//! The CPU backend's CUDA semantics: streams in order, events across streams and
//! devices, priorities between kernels, the memory ledger, typed refusals.

mod common;

use common::*;
use slicesched_exec::kernels::Kernel;
use slicesched_exec::*;

fn gemm_work(b: &CpuBackend, dev: DeviceId, n: usize) -> (View, View, View) {
    let x = b.alloc(dev, Arena::Workspace, Dtype::Bf16, n * n).unwrap();
    let w = b.alloc(dev, Arena::Workspace, Dtype::Bf16, n * n).unwrap();
    let y = b.alloc(dev, Arena::Workspace, Dtype::Bf16, n * n).unwrap();
    (View::whole(x, n * n), View::whole(w, n * n), View::whole(y, n * n))
}

#[test]
fn cross_device_copy_waits_for_its_producer() {
    let b = backend(2);
    let (s0, s1) = (b.stream(DeviceId(0), 0).unwrap(), b.stream(DeviceId(1), 0).unwrap());
    let n = 64;
    let (x, w, y) = gemm_work(&b, DeviceId(0), n);
    b.upload(x, &HostData::Bf16(random_bf16(n * n, 1, 1.0))).unwrap();
    b.upload(w, &HostData::Bf16(random_bf16(n * n, 2, 1.0))).unwrap();
    let g = b.launch(s0, Kernel::Gemm { bias: None, x, w, y, m: n, n, k: n }, &[]).unwrap();
    let dst = View::whole(b.alloc(DeviceId(1), Arena::Workspace, Dtype::Bf16, n * n).unwrap(), n * n);
    let c = b.copy(s1, y, dst, std::slice::from_ref(&g)).unwrap();
    let (tg, tc) = (g.wait().unwrap(), c.wait().unwrap());
    assert!(tc.start_ns >= tg.end_ns, "the copy started after the GEMM ended");
    assert_eq!(b.download(dst).unwrap(), b.download(y).unwrap());
    assert_eq!(b.bytes_copied(), (n * n * 2) as u64);
    assert_eq!(b.device_of(dst.buf).unwrap(), DeviceId(1));
}

#[test]
fn kernels_refuse_buffers_of_another_device_and_failures_propagate() {
    let b = backend(2);
    let s0 = b.stream(DeviceId(0), 0).unwrap();
    let (x, w, _) = gemm_work(&b, DeviceId(0), 8);
    let y1 = View::whole(b.alloc(DeviceId(1), Arena::Workspace, Dtype::Bf16, 64).unwrap(), 64);
    let e = b.launch(s0, Kernel::Gemm { bias: None, x, w, y: y1, m: 8, n: 8, k: 8 }, &[]).unwrap_err().to_string();
    assert!(e.contains("cpu:1") && e.contains("copy it first"), "{e}");
    // A kernel that fails (bad id) fails the work that waits on it, with the cause.
    let ids = View::whole(b.alloc(DeviceId(0), Arena::Workspace, Dtype::I32, 1).unwrap(), 1);
    b.upload(ids, &HostData::I32(vec![1000])).unwrap();
    let out = View::whole(b.alloc(DeviceId(0), Arena::Workspace, Dtype::Bf16, 8).unwrap(), 8);
    let bad = b.launch(s0, Kernel::Embedding { ids, table: x, out, hidden: 8, scale: None }, &[]).unwrap();
    let s1 = b.stream(DeviceId(0), 5).unwrap();
    let after = b.launch(s1, Kernel::Add { a: x, b: w, out: View { len: 64, ..x } }, std::slice::from_ref(&bad));
    assert!(after.is_err(), "an input aliasing the output is refused");
    let y = View::whole(b.alloc(DeviceId(0), Arena::Workspace, Dtype::Bf16, 64).unwrap(), 64);
    let after = b.launch(s1, Kernel::Add { a: x, b: w, out: y }, std::slice::from_ref(&bad)).unwrap();
    assert!(bad.wait().unwrap_err().to_string().contains("token id 1000"));
    assert!(after.wait().unwrap_err().to_string().contains("an input failed"));
    assert!(matches!(b.stream(DeviceId(7), 0), Err(ExecError::UnknownDevice(_))));
    let e = b.upload(y, &HostData::F32(vec![0.0; 64])).unwrap_err().to_string();
    assert!(e.contains("bf16"), "{e}");
}

#[test]
fn a_waiting_urgent_kernel_goes_before_queued_background_work() {
    // One core, held by a long GEMM while a background stream queues 20 GEMMs and an
    // urgent stream one: when the core frees, the urgent one goes first (priority acts
    // between kernels, never preempting one — as at a GPU's block boundaries).
    let b = backend(1);
    let (blk, lo, hi) =
        (b.stream(DeviceId(0), 0).unwrap(), b.stream(DeviceId(0), 5).unwrap(), b.stream(DeviceId(0), -5).unwrap());
    let (bx, bw, by) = gemm_work(&b, DeviceId(0), 1024);
    let blocker =
        b.launch(blk, Kernel::Gemm { bias: None, x: bx, w: bw, y: by, m: 1024, n: 1024, k: 1024 }, &[]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let n = 64;
    let (x, w, _) = gemm_work(&b, DeviceId(0), n);
    let outs: Vec<View> = (0..20)
        .map(|_| View::whole(b.alloc(DeviceId(0), Arena::Workspace, Dtype::Bf16, n * n).unwrap(), n * n))
        .collect();
    let lo_evs: Vec<Event> =
        outs.iter().map(|&y| b.launch(lo, Kernel::Gemm { bias: None, x, w, y, m: n, n, k: n }, &[]).unwrap()).collect();
    let (x2, w2, y2) = gemm_work(&b, DeviceId(0), n);
    let urgent = b.launch(hi, Kernel::Gemm { bias: None, x: x2, w: w2, y: y2, m: n, n, k: n }, &[]).unwrap();
    let blocked = blocker.wait().unwrap();
    let urgent = urgent.wait().unwrap();
    let lo_t: Vec<Timing> = lo_evs.iter().map(|e| e.wait().unwrap()).collect();
    assert!(urgent.submit_ns < blocked.end_ns, "the blocker was too short to test anything");
    let after = lo_t.iter().filter(|t| t.start_ns >= urgent.end_ns).count();
    assert!(after >= 19, "only {after} of 20 background kernels ran after the urgent one");
    // One core: kernels never overlap.
    let mut spans: Vec<(u64, u64)> = lo_t
        .iter()
        .map(|t| (t.start_ns, t.end_ns))
        .chain([(urgent.start_ns, urgent.end_ns), (blocked.start_ns, blocked.end_ns)])
        .collect();
    spans.sort();
    assert!(spans.windows(2).all(|p| p[0].1 <= p[1].0), "kernels overlapped on a one-core device");
}

#[test]
fn the_ledger_counts_arenas_and_refuses_beyond_capacity() {
    let b = CpuBackend::new(&[CpuDeviceSpec { memory_bytes: 1 << 20, cores: 1 }]);
    let d = DeviceId(0);
    let w = b.alloc(d, Arena::Weights, Dtype::Bf16, 100_000).unwrap();
    let kv = b.alloc(d, Arena::KvBlocks, Dtype::Bf16, 50_000).unwrap();
    let l = b.ledger(d).unwrap();
    assert_eq!((l.weights, l.kv_pool, l.capacity), (200_000, 100_000, 1 << 20));
    let e = b.alloc(d, Arena::Workspace, Dtype::F32, 200_000).unwrap_err();
    match &e {
        ExecError::OutOfMemory { device, requested, free, .. } => {
            assert_eq!((device.as_str(), *requested, *free), ("cpu:0", 800_000, (1 << 20) - 300_000));
        }
        e => panic!("{e}"),
    }
    assert_eq!(b.ledger(d).unwrap().oom_events, 0, "refused, so never over capacity");
    b.free(w).unwrap();
    b.free(kv).unwrap();
    assert_eq!(b.ledger(d).unwrap().used(), 0);
    assert!(matches!(b.free(w), Err(ExecError::UnknownBuffer(_))));
}
