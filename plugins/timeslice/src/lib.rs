//! `timeslice`: Kubernetes GPU time-slicing between co-located containers.

use slicesched_plugin_sdk::{Info, Instance, Placement, Policy, ReadyOp, ReplicaMode, View};

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
    fn info(&self) -> Info {
        Info {
            replicas: ReplicaMode::Serving,
            context_switch_ns: self.switch_ns,
            ..Info::new("timeslice", env!("CARGO_PKG_VERSION"))
        }
    }

    fn place(&mut self, view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
        let slot = view.now_ns / self.quantum_ns.max(1);
        for (k, r) in ready.iter().enumerate() {
            // Whose turn it is on the op's group: instances resident there, round robin.
            let mut residents = view.instances.iter().filter(|i| i.group == r.home);
            let n = residents.clone().count().max(1) as u64;
            let turn = (slot % n) as usize;
            let mine = residents.position(|i| i.index == r.instance) == Some(turn);
            out.push(Placement { op: k as u32, group: r.home, priority: if mine { 1 } else { 0 } });
        }
        Ok(())
    }

    fn route(&mut self, view: &View, instances: &[Instance]) -> Result<u32, String> {
        Ok(view.least_loaded(instances) as u32)
    }
}

slicesched_plugin_sdk::export_policy!(TimeSlice);
