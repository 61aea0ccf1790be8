//! `pooled`: request-level multiplexing across model replicas (AlpaServe / MuxServe).

use crate::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};

/// Whole-model replicas with their own KV caches where memory allows; each request is
/// routed whole to the least-loaded instance of its model; co-located models' ops
/// interleave on their GPU. The strongest peer that does not split requests into
/// operators.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pooled;

impl Policy for Pooled {
    fn name(&self) -> &str {
        "pooled"
    }

    fn replicas(&self) -> ReplicaMode {
        ReplicaMode::Serving
    }

    fn place(&mut self, _view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        out.extend(ready.iter().map(|r| Placement { op: r.op, group: r.home, priority: 0 }));
    }

    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        least_loaded(view, instances)
    }
}

/// Least loaded instance: queued requests per KV block it has, then when its GPUs free
/// up; the home wins ties so light load stays in the container.
pub(crate) fn least_loaded(view: &View<'_>, instances: &[InstanceView]) -> usize {
    let load = |i: &InstanceView| {
        let reqs = (i.waiting + i.running) as f64 / i.kv_total_blocks.max(1) as f64;
        let busy = view.group_free_at(i.group).saturating_sub(view.now_ns);
        (reqs * 1e6) as u64 + busy / 1000
    };
    instances.iter().enumerate().min_by_key(|(k, i)| (load(i), *k)).map_or(0, |(k, _)| k)
}
