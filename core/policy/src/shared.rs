//! `timeslice` and `mps`: co-located containers sharing GPUs the ways operators run
//! them today.

use crate::pooled::least_loaded;
use crate::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};

/// Kubernetes GPU time-slicing: containers of several tenants on one GPU (the
/// planner's serving replicas), requests routed to the least-loaded container, and the
/// GPU handed round-robin to one container per quantum; a switch between containers'
/// processes costs a context switch. Work-conserving like the NVIDIA driver: when the
/// container whose turn it is has nothing queued, another one runs.
#[derive(Debug, Clone)]
pub struct TimeSlice {
    pub quantum_ns: u64,
    pub switch_ns: u64,
}

impl Default for TimeSlice {
    fn default() -> Self {
        // The driver's default time slice is a couple of milliseconds; a context switch
        // between processes costs tens of microseconds.
        Self { quantum_ns: 2_000_000, switch_ns: 50_000 }
    }
}

impl Policy for TimeSlice {
    fn name(&self) -> &str {
        "timeslice"
    }
    fn replicas(&self) -> ReplicaMode {
        ReplicaMode::Serving
    }
    fn context_switch_ns(&self) -> u64 {
        self.switch_ns
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        let slot = view.now_ns / self.quantum_ns.max(1);
        for r in ready {
            // Whose turn it is on the op's group: instances resident there, round robin.
            let mut residents = view.instances.iter().filter(|i| i.group == r.home);
            let n = residents.clone().count().max(1) as u64;
            let turn = (slot % n) as usize;
            let mine = residents.position(|i| i.index == r.instance) == Some(turn);
            out.push(Placement { op: r.op, group: r.home, priority: if mine { 1 } else { 0 } });
        }
    }
    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        least_loaded(view, instances)
    }
}

/// MPS: co-located containers run concurrently, each on a static share of the SMs
/// (the core's spatial-sharing model prices the share and the bandwidth contention);
/// requests routed to the least-loaded container.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mps;

impl Policy for Mps {
    fn name(&self) -> &str {
        "mps"
    }
    fn replicas(&self) -> ReplicaMode {
        ReplicaMode::Serving
    }
    fn spatial_sharing(&self) -> bool {
        true
    }
    fn place(&mut self, _view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        out.extend(ready.iter().map(|r| Placement { op: r.op, group: r.home, priority: 0 }));
    }
    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        least_loaded(view, instances)
    }
}
