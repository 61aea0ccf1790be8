//! A stream of the CPU backend: the worker thread that runs its tasks in order, after
//! their input events, holding one of the device's cores (the gate) while a kernel
//! runs, and timing each by the host clock and by the thread's CPU time.

use super::math::{self, Ins, Scratch};
use super::{Data, DevRt, Task, Work};
use crate::backend::{BufId, Timing};
use slicesched_gmg::MemoryKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Instant;

/// The device's cores, handed to the most urgent waiter (then the oldest).
pub(super) struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
}

struct GateState {
    free: u32,
    next_ticket: u64,
    waiting: std::collections::BTreeSet<(i32, u64)>,
}

impl Gate {
    pub(super) fn new(units: u32) -> Self {
        let state = GateState { free: units.max(1), next_ticket: 0, waiting: Default::default() };
        Self { state: Mutex::new(state), cv: Condvar::new() }
    }
    pub(super) fn acquire(&self, priority: i32) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let me = (priority, s.next_ticket);
        s.next_ticket += 1;
        s.waiting.insert(me);
        while !(s.free > 0 && s.waiting.first() == Some(&me)) {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.waiting.remove(&me);
        s.free -= 1;
        self.cv.notify_all();
    }
    pub(super) fn release(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).free += 1;
        self.cv.notify_all();
    }
}

enum Guard<'a> {
    R(std::sync::RwLockReadGuard<'a, Data>),
    W(std::sync::RwLockWriteGuard<'a, Data>),
}

fn execute(task: &Task, scratch: &mut Scratch, copied: &AtomicU64) -> Result<(), String> {
    let mut guards: Vec<(BufId, Guard)> = task
        .bufs
        .iter()
        .map(|(id, b, w)| {
            let g = if *w {
                Guard::W(b.data.write().unwrap_or_else(|e| e.into_inner()))
            } else {
                Guard::R(b.data.read().unwrap_or_else(|e| e.into_inner()))
            };
            (*id, g)
        })
        .collect();
    let mut ins = Ins { bufs: Vec::new() };
    let mut out = None;
    for (id, g) in guards.iter_mut() {
        match g {
            Guard::R(g) => ins.bufs.push((*id, &**g)),
            Guard::W(g) => out = Some(&mut **g),
        }
    }
    let out = out.ok_or("no output buffer")?;
    match &task.work {
        Work::Kernel(k) => math::run(k, &ins, out, scratch).map_err(|e| format!("{}: {e}", k.name())),
        Work::Copy { src, dst } => {
            if src.len != dst.len {
                return Err(format!("copy of {} elements into a view of {}", src.len, dst.len));
            }
            let n = src.len;
            let oob = || format!("copy view outside its buffer ({src:?} -> {dst:?})");
            macro_rules! cp {
                ($o:expr, $variant:ident) => {{
                    let o = $o.get_mut(dst.offset..dst.offset + n).ok_or_else(oob)?;
                    if src.buf == dst.buf {
                        return Err("copy within one buffer".into());
                    }
                    let Some(Data::$variant(s)) = ins.bufs.iter().find(|b| b.0 == src.buf).map(|b| b.1) else {
                        return Err("copy between buffers of different dtypes".into());
                    };
                    o.copy_from_slice(s.get(src.offset..src.offset + n).ok_or_else(oob)?);
                    n * std::mem::size_of_val(&s[0])
                }};
            }
            let bytes = match out {
                Data::Bf16(o) => cp!(o, Bf16),
                Data::F32(o) => cp!(o, F32),
                Data::I32(o) => cp!(o, I32),
            };
            copied.fetch_add(bytes as u64, Ordering::Relaxed);
            Ok(())
        }
    }
}

/// CPU time of the calling thread (ns); 0 where it cannot be read (then `busy_ns` is 0
/// and users of it fall back to the wall span). The C library std already links is
/// called directly: the `libc` crate would be a new dependency for one call.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub(crate) fn thread_cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: glibc/musl's clock_gettime with a valid, writable 64-bit timespec (the
    // layout on 64-bit Linux); it only reads the calling thread's CPU clock.
    let r = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
pub(crate) fn thread_cpu_ns() -> u64 {
    0
}

pub(super) fn worker(rx: mpsc::Receiver<Task>, dev: Arc<DevRt>, priority: i32, epoch: Instant, copied: Arc<AtomicU64>) {
    let mut scratch = Scratch::default();
    let mut charged = 0u64;
    let now = || epoch.elapsed().as_nanos() as u64;
    // Spin briefly for the next task before sleeping in `recv` (see `backend::spin_limit`):
    // `run` submits an op right after the previous one completed.
    let next = || {
        let mut got = None;
        crate::backend::spin_until(|| match rx.try_recv() {
            Ok(t) => {
                got = Some(Ok(t));
                true
            }
            Err(mpsc::TryRecvError::Empty) => false,
            Err(mpsc::TryRecvError::Disconnected) => {
                got = Some(Err(()));
                true
            }
        });
        match got {
            Some(r) => r.ok(),
            None => rx.recv().ok(),
        }
    };
    while let Some(task) = next() {
        if let Some(e) = task.waits.iter().find_map(|w| w.wait().err()) {
            task.done.complete(Err(format!("an input failed: {e}")));
            continue;
        }
        dev.gate.acquire(priority);
        // The thread's CPU clock is a system call (0.3-0.6 µs on a VM, against 40 ns for
        // the monotonic clock), so it is read outside the wall span: inside, it made up a
        // third of a µs-long norm's time, and its spread that op's noise.
        let cpu0 = thread_cpu_ns();
        let start_ns = now();
        let r = execute(&task, &mut scratch, &copied);
        let end_ns = now();
        let cpu1 = thread_cpu_ns();
        dev.gate.release();
        let grown = scratch.bytes().saturating_sub(charged);
        if grown > 0 {
            dev.ledger.lock().unwrap_or_else(|e| e.into_inner()).alloc(MemoryKind::Activations, grown, end_ns);
            charged += grown;
        }
        task.done.complete(r.map(|_| Timing {
            submit_ns: task.submit_ns,
            start_ns,
            end_ns,
            busy_ns: cpu1.saturating_sub(cpu0).min(end_ns - start_ns),
        }));
    }
    dev.ledger.lock().unwrap_or_else(|e| e.into_inner()).release(MemoryKind::Activations, charged);
}
