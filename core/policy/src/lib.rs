//! The `Policy` seam.
//!
//! A policy receives a batch of ready operators with the state of the cluster and
//! answers placements (op → GPU group, with a priority). The simulator and the live
//! scheduler call policies through this one trait, so a policy judged in simulation is
//! the policy that runs; Wasm plugins implement it through the plugin host.
//!
//! Architecture Invariant: a policy only proposes. The core validates every placement
//! (the op exists and is ready, the group exists and holds the op's weights, attention
//! stays with its KV cache, borrowed ops fit the host's guest memory and do not delay
//! the host's owner past its guard) and places anything rejected or left out on the
//! op's home group, counting why.

use serde::{Deserialize, Serialize};
use slicesched_gmg::{Deployment, GroupId, OpId, TenantId};
use slicesched_hw::Cluster;
use slicesched_model::OpKind;

pub mod convert;
mod native;
mod probe;
mod switch;
pub use native::Native;
pub use probe::{Probe, ProbeOutcome, TenantDelay, Verdict, WhatIf, WhatIfHandle};
pub use switch::{SwitchError, SwitchHandle, Switchable};

/// A ready operator offered to the policy.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReadyOp {
    pub op: OpId,
    pub tenant: TenantId,
    pub kind: OpKind,
    /// Layer of layer ops (weights locality); None for embedding and LM head.
    pub layer: Option<u32>,
    /// Predicted latency on its home group, ns.
    pub predicted_ns: u64,
    /// Group of the engine instance whose KV cache the op's requests use: attention
    /// must run here, and it is where the op runs when nothing better is chosen.
    pub home: GroupId,
    pub ready_ns: u64,
    /// Where the op's (largest) input was produced, and its bytes.
    pub input_group: Option<GroupId>,
    pub input_bytes: u64,
    pub out_bytes: u64,
    /// Instance (engine) the op's iteration belongs to.
    pub instance: u32,
    /// The iteration's prompt tokens and decoding requests: a decode step is what
    /// TPOT waits on, a long prefill what TTFT waits on.
    pub prefill_tokens: u32,
    pub decodes: u32,
}

/// A policy's answer for one op. Among ops waiting for the same GPUs, the owner's ops
/// go first, then higher `priority`, then the order they were placed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub op: OpId,
    pub group: GroupId,
    pub priority: i32,
}

/// An engine instance: a tenant's home, or a serving replica with its own KV cache.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct InstanceView {
    pub index: u32,
    pub tenant: TenantId,
    pub group: GroupId,
    pub is_home: bool,
    pub waiting: u32,
    pub running: u32,
    /// Iterations (micro-batches) executing.
    pub inflight: u32,
    pub kv_free_blocks: u32,
    pub kv_total_blocks: u32,
    /// Prompt tokens its waiting and running requests have still to prefill: a new
    /// request's prefill starts after these (`Engine::prefill_backlog`).
    pub prefill_tokens: u64,
    /// Tokens one iteration of its engine takes at most (`max_batched_tokens`).
    pub batch_tokens: u32,
}

/// Per-tenant state a policy may weigh.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TenantView {
    pub tenant: TenantId,
    pub home: GroupId,
    pub layers: u32,
    /// Time left before the oldest waiting request misses its TTFT target, ns
    /// (negative: already late; i64::MAX: nobody waits).
    pub slack_ns: i64,
    pub tpot_target_ns: u64,
}

/// What a policy sees of the cluster when it decides.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub now_ns: u64,
    pub cluster: &'a Cluster,
    pub deployment: &'a Deployment,
    /// Per GPU: when it becomes free of work already started, ns (≤ now when idle).
    pub gpu_busy_until: &'a [u64],
    /// Per GPU: predicted ns of work placed and waiting for it.
    pub gpu_queued_ns: &'a [u64],
    /// Per GPU: earliest time the GPU's owner (its home tenant) needs it; u64::MAX
    /// when the owner has no work in sight.
    pub gpu_owner_need_ns: &'a [u64],
    pub tenants: &'a [TenantView],
    /// Engine instances; filled only when the core asks `admit` or `route`.
    pub instances: &'a [InstanceView],
    /// Links between groups, row-major `groups × groups` (first GPU to first GPU).
    pub group_links: &'a [slicesched_hw::Link],
    /// Names the run-constant part (cluster, deployment, links): two views with the
    /// same epoch have the same. Adapters copy that part into a policy's terms only
    /// when the epoch changes, not per decision (see [`new_epoch`]).
    pub epoch: u64,
    /// The core's what-if about the batch being decided: offered to `place` only.
    pub what_if: WhatIfHandle<'a>,
}

/// A fresh epoch, for a view whose cluster, deployment or links are new.
pub fn new_epoch() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl View<'_> {
    /// When `group` could start a new op: all its GPUs free of started and queued work.
    pub fn group_free_at(&self, group: GroupId) -> u64 {
        self.deployment
            .group(group)
            .gpus
            .iter()
            .map(|g| self.gpu_busy_until[g.0 as usize].max(self.now_ns) + self.gpu_queued_ns[g.0 as usize])
            .max()
            .unwrap_or(self.now_ns)
    }

    /// Nanoseconds to move `bytes` from `from` to `to` (0 on the same group).
    pub fn transfer_ns(&self, from: GroupId, to: GroupId, bytes: u64) -> u64 {
        if from == to {
            return 0;
        }
        let n = self.deployment.groups.len();
        self.group_links[from.index() * n + to.index()].transfer_ns(bytes)
    }
}

/// What kind of weight copies a policy wants the planner to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplicaMode {
    /// Homes only (container-level baselines).
    None,
    /// Weight-only copies, whole or by layer range, for operator-level borrowing.
    Weights,
    /// Whole-model copies with their own KV cache, for request-level routing.
    Serving,
    /// Serving copies where a whole model and a useful KV cache fit, weight-only
    /// layer ranges where they do not.
    Both,
}

/// A placement policy. Only `name` and `place` are required.
pub trait Policy: Send {
    /// The name runs and reports show.
    fn name(&self) -> &str;

    /// Places each op of `ready` by pushing to `out`. Ops left out are placed on their
    /// home group by the core.
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>);

    /// Whether `place` reads the view's per-GPU and per-tenant figures. A policy that
    /// does not (like `dedicated`) spares the core from computing them per decision.
    fn reads_view(&self) -> bool {
        true
    }

    /// Cost of switching a GPU from one tenant's op to another's. Separate processes
    /// time-sliced on a GPU pay a context switch; one process running every tenant's
    /// ops on streams (SliceScheduler's executor, MPS) does not.
    fn context_switch_ns(&self) -> u64 {
        0
    }

    /// MPS-style static spatial sharing: co-located tenants run concurrently, each on a
    /// fixed share of the GPU's SMs.
    fn spatial_sharing(&self) -> bool {
        false
    }

    /// The replicas this policy can use (the planner places them before the replay).
    fn replicas(&self) -> ReplicaMode {
        ReplicaMode::None
    }

    /// Whether `instance`, which has `inflight` iterations executing, may start another
    /// one concurrently now (a micro-batch of requests not already executing).
    fn admit(&mut self, _view: &View<'_>, _instance: &InstanceView) -> bool {
        _instance.inflight == 0
    }

    /// Which of a tenant's engine instances takes a new request (index into
    /// `instances`, which are all of that tenant's instances, home first).
    fn route(&mut self, _view: &View<'_>, _instances: &[InstanceView]) -> usize {
        0
    }

    /// Whether `place` answers every op with its home group at priority 0 in the order
    /// offered, `admit` is the default one above, and neither keeps state (see the
    /// SDK's `Policy::home_only`): the simulator's fast path relies on it.
    fn home_only(&self) -> bool {
        false
    }

    /// Whether `place` answers an op with its home group whenever the view shows that
    /// group free, at any priority, and keeps no state; `admit` and `route` keep none
    /// that depends on how often `place` is called (see the SDK's
    /// `Policy::home_when_free`): the simulator's fast path may then run an iteration
    /// that nothing else can reach.
    fn home_when_free(&self) -> bool {
        false
    }
}

/// Names of the built-in policies.
pub const BUILTIN: &[&str] = &["dedicated", "timeslice", "mps", "pooled", "slice"];

/// Example policies built like the shipped ones but not run by default: `earliest`
/// shows the what-if a plugin can ask (interface 0.2.0).
pub const EXAMPLES: &[&str] = &["earliest"];

/// A shipped policy by name, built natively from its plugin crate (`plugins/NAME`):
/// the same source as its Wasm build.
pub fn builtin(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "dedicated" => Some(Box::new(Native::new(slicesched_plugin_dedicated::Dedicated))),
        "timeslice" => Some(Box::new(Native::new(slicesched_plugin_timeslice::TimeSlice::default()))),
        "mps" => Some(Box::new(Native::new(slicesched_plugin_mps::Mps))),
        "pooled" => Some(Box::new(Native::new(slicesched_plugin_pooled::Pooled))),
        "slice" => Some(Box::new(Native::new(slicesched_plugin_slice::Slice::default()))),
        "earliest" => Some(Box::new(Native::new(slicesched_plugin_earliest::Earliest::default()))),
        _ => None,
    }
}
