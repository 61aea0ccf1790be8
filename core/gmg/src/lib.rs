//! The Global Mapping Graph (GMG): the single source of truth about what is in flight.
//!
//! It holds every tenant's in-flight operator instances and the tensors between them
//! (a table of op slots; edges kept once per DAG shape), each op's state and times,
//! the per-GPU memory ledger and the deployment plan. The simulator and the scheduler
//! read it and send it events.
//!
//! Architecture Invariant: op slots never leave this crate; the rest of the code
//! speaks [`OpId`], [`IterId`], [`TenantId`], [`GroupId`].
//! Architecture Invariant: the GMG knows no clock; callers pass times in.

mod deployment;
mod graph;
mod ids;
mod memory;

pub use deployment::{Deployment, DeploymentError, Group, TenantHome};
pub use graph::{Gmg, IterationInfo, OpNode, OpState};
pub use ids::{GroupId, IterId, OpId, RequestId, TenantId};
pub use memory::{MemLedger, MemoryKind};
