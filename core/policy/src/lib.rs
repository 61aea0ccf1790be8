//! The `Policy` seam.
//!
//! A policy receives a batch of ready operators with the state of the cluster and
//! answers placements (op → GPU group, with a priority). The simulator and the live
//! scheduler call policies through this one trait, so a policy judged in simulation is
//! the policy that runs; Wasm plugins implement it through the plugin host.
//!
//! Architecture Invariant: a policy only proposes. The core validates every placement
//! (the op exists and is ready, the group exists and holds the op's weights, attention
//! stays with its KV cache) and places anything rejected or left out on the tenant's
//! home group, counting why.

use serde::Serialize;
use slicesched_gmg::{Deployment, GroupId, OpId, TenantId};
use slicesched_model::OpKind;

mod dedicated;
pub use dedicated::Dedicated;

/// A ready operator offered to the policy.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReadyOp {
    pub op: OpId,
    pub tenant: TenantId,
    pub kind: OpKind,
    /// Layer of layer ops (weights locality); None for embedding and LM head.
    pub layer: Option<u32>,
    /// Predicted latency on the tenant's home group, ns.
    pub predicted_ns: u64,
    pub home: GroupId,
    pub ready_ns: u64,
}

/// A policy's answer for one op. Among ops waiting for the same GPUs, higher
/// `priority` starts first; ties start in the order they became ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub op: OpId,
    pub group: GroupId,
    pub priority: i32,
}

/// Per-tenant state a policy may weigh.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TenantView {
    pub tenant: TenantId,
    pub home: GroupId,
    pub waiting: u32,
    pub running: u32,
}

/// What a policy sees of the cluster when it decides.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub now_ns: u64,
    pub deployment: &'a Deployment,
    /// Per GPU: when it becomes free of work already started, ns (≤ now when idle).
    pub gpu_busy_until: &'a [u64],
    /// Per GPU: ops placed and waiting for it.
    pub gpu_queued: &'a [u32],
    pub tenants: &'a [TenantView],
}

/// A placement policy.
pub trait Policy: Send {
    /// The name runs and reports show.
    fn name(&self) -> &str;

    /// Places each op of `ready` by pushing to `out`. Ops left out are placed on their
    /// home group by the core.
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>);
}

/// Names of the built-in policies.
pub const BUILTIN: &[&str] = &["dedicated"];

/// A built-in policy by name.
pub fn builtin(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "dedicated" => Some(Box::new(Dedicated)),
        _ => None,
    }
}
