//! `mps`: co-located containers sharing GPUs through NVIDIA MPS.

use slicesched_plugin_sdk::{Info, Instance, Placement, Policy, ReadyOp, ReplicaMode, View};

/// MPS: co-located containers run concurrently, each on a static share of the SMs
/// (the core's spatial-sharing model prices the share and the bandwidth contention);
/// requests routed to the least-loaded container.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mps;

impl Policy for Mps {
    fn info(&self) -> Info {
        Info { replicas: ReplicaMode::Serving, spatial_sharing: true, ..Info::new("mps", env!("CARGO_PKG_VERSION")) }
    }

    fn place(&mut self, _view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
        out.extend(ready.iter().enumerate().map(|(i, r)| Placement { op: i as u32, group: r.home, priority: 0 }));
        Ok(())
    }

    fn route(&mut self, view: &View, instances: &[Instance]) -> Result<u32, String> {
        Ok(view.least_loaded(instances) as u32)
    }
}

slicesched_plugin_sdk::export_policy!(Mps);
