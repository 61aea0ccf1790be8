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
            // Whose turn it is on the op's group: the engines resident there (serving
            // copies of the deployment, one per tenant), round robin in the core's
            // instance order (homes first, then by tenant). Read from the deployment,
            // which every call has, not from `instances`, which `place` does not get.
            let key = |h: &slicesched_plugin_sdk::Home| (!h.is_home, h.tenant);
            let mut residents = view.homes.iter().filter(|h| h.serves && h.group == r.home);
            let Some(me) = residents.clone().find(|h| h.tenant == r.tenant).map(key) else {
                out.push(Placement { op: k as u32, group: r.home, priority: 0 });
                continue;
            };
            let n = residents.clone().count() as u64;
            let rank = residents.by_ref().filter(|h| key(h) < me).count() as u64;
            let mine = slot % n == rank;
            out.push(Placement { op: k as u32, group: r.home, priority: if mine { 1 } else { 0 } });
        }
        Ok(())
    }

    fn route(&mut self, view: &View, instances: &[Instance]) -> Result<u32, String> {
        Ok(view.least_loaded(instances) as u32)
    }
}

slicesched_plugin_sdk::export_policy!(TimeSlice);
