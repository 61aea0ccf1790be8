//! `pooled`: request-level multiplexing across model replicas (AlpaServe / MuxServe).

use slicesched_plugin_sdk::{Info, Instance, Placement, Policy, ReadyOp, ReplicaMode, View};

/// Whole-model replicas with their own KV caches where memory allows; each request is
/// routed whole to the least-loaded instance of its model; co-located models' ops
/// interleave on their GPU. The strongest peer that does not split requests into
/// operators.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pooled;

impl Policy for Pooled {
    fn info(&self) -> Info {
        Info { replicas: ReplicaMode::Serving, ..Info::new("pooled", env!("CARGO_PKG_VERSION")) }
    }

    fn place(&mut self, _view: &View, ready: &[ReadyOp], out: &mut Vec<Placement>) -> Result<(), String> {
        out.extend(ready.iter().enumerate().map(|(i, r)| Placement { op: i as u32, group: r.home, priority: 0 }));
        Ok(())
    }

    fn home_only(&self) -> bool {
        true
    }

    fn route(&mut self, view: &View, instances: &[Instance]) -> Result<u32, String> {
        Ok(view.least_loaded(instances) as u32)
    }
}

slicesched_plugin_sdk::export_policy!(Pooled);
