//! `slice`: SliceScheduler's operator-level, simulation-guided policy.

use crate::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use slicesched_model::OpKind;

/// Operator-level placement on top of request-level multiplexing: where a whole model
/// and a KV cache fit in another GPU's spare memory the tenant gets a serving copy and
/// requests go to the least-loaded copy (what `pooled` does); everywhere, each ready op
/// goes to whichever group holding its weights (whole or a layer range) finishes it
/// first, transfer of its input included, borrowing other tenants' idle slices;
/// attention stays with the KV cache; the owner of a GPU keeps first claim at every op
/// boundary (the core enforces that too). Decode steps and low-slack tenants go first,
/// and an instance with requests waiting may run extra micro-batches while groups
/// holding its weights sit idle.
#[derive(Debug, Clone)]
pub struct Slice {
    /// Most micro-batches of one instance executing at once.
    pub max_inflight: u32,
}

impl Default for Slice {
    fn default() -> Self {
        Self { max_inflight: 4 }
    }
}

impl Policy for Slice {
    fn name(&self) -> &str {
        "slice"
    }

    fn replicas(&self) -> ReplicaMode {
        ReplicaMode::Both
    }

    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        // Stay home unless the home has a queue; then the least-loaded of the home and
        // the copies whose GPUs' owners have nothing queued now. A copy on a GPU whose
        // owner is working would take that owner's time without the core's guard.
        // Measured on azure-code-4t at rate scale 0.841: requiring copies to be idle
        // with the owner away for 20 ms gave 12.6% violations, this 9.1%, routing to
        // any copy like `pooled` 9.8%.
        let home = &instances[0];
        if home.waiting == 0 {
            return 0;
        }
        let idle: Vec<InstanceView> =
            instances.iter().skip(1).filter(|i| self.owner_away(view, i.group)).copied().collect();
        if idle.is_empty() {
            return 0;
        }
        let mut all = vec![*home];
        all.extend(idle.iter().copied());
        let k = crate::pooled::least_loaded(view, &all);
        if k == 0 {
            0
        } else {
            instances.iter().position(|i| i.index == all[k].index).unwrap_or(0)
        }
    }

    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        for r in ready {
            let t = &view.tenants[r.tenant.index()];
            // Less slack, higher priority (ms resolution, clamped); decode-only steps,
            // short and what TPOT waits on, go before prefill chunks.
            let slack = (-(t.slack_ns / 1_000_000)).clamp(-1_000_000, 1_000_000) as i32;
            let priority = slack + if r.prefill_tokens == 0 { 2_000_000 } else { 0 };
            let mut best = (self.finish(view, r, r.home), r.home);
            if r.kind != OpKind::Attention {
                for h in view.deployment.homes.iter().filter(|h| h.tenant == r.tenant && h.group != r.home) {
                    let holds = match r.layer {
                        Some(l) => h.layers.0 <= l && l < h.layers.1,
                        None => h.layers == (0, t.layers),
                    };
                    if !holds {
                        continue;
                    }
                    let f = self.finish(view, r, h.group);
                    // Borrow only when it clearly wins, and never into a GPU whose
                    // owner needs it before the op would be done.
                    let owner_ok =
                        view.deployment.group(h.group).gpus.iter().all(|g| view.gpu_owner_need_ns[g.0 as usize] >= f);
                    if owner_ok && f + 2_000 < best.0 {
                        best = (f, h.group);
                    }
                }
            }
            out.push(Placement { op: r.op, group: best.1, priority });
        }
    }

    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        if inst.inflight == 0 {
            return true;
        }
        if inst.inflight >= self.max_inflight || inst.waiting == 0 {
            return false;
        }
        // Another micro-batch only pays when some group holding the weights is spare.
        view.deployment
            .homes
            .iter()
            .filter(|h| h.tenant == inst.tenant && h.group != inst.group)
            .any(|h| self.spare(view, h.group))
    }
}

/// How far ahead a GPU's owner must have nothing to do for its GPU to count as spare.
const SPARE_HORIZON_NS: u64 = 20_000_000;

impl Slice {
    /// Idle now, and its owners need it for none of the next [`SPARE_HORIZON_NS`].
    fn spare(&self, view: &View<'_>, group: slicesched_gmg::GroupId) -> bool {
        view.group_free_at(group) <= view.now_ns
            && view
                .deployment
                .group(group)
                .gpus
                .iter()
                .all(|g| view.gpu_owner_need_ns[g.0 as usize] > view.now_ns + SPARE_HORIZON_NS)
    }

    /// Its owners have nothing queued for it now (it may be busy with guests).
    fn owner_away(&self, view: &View<'_>, group: slicesched_gmg::GroupId) -> bool {
        view.deployment.group(group).gpus.iter().all(|g| view.gpu_owner_need_ns[g.0 as usize] > view.now_ns)
    }

    fn finish(&self, view: &View<'_>, r: &ReadyOp, group: slicesched_gmg::GroupId) -> u64 {
        let arrive = view.now_ns + r.input_group.map_or(0, |from| view.transfer_ns(from, group, r.input_bytes));
        arrive.max(view.group_free_at(group)) + r.predicted_ns
    }
}
