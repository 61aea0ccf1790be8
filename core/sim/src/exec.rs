//! The seam an executor plugs into (`slicesched run`): the same loop, engines, GMG,
//! policy and checks as a replay, but every op the simulator starts is run for real and
//! its measured time is its duration. Without one, a replay is untouched.

use slicesched_gmg::{GroupId, TenantId};
use slicesched_model::{IterationBatch, IterationDag, OpSpec};

/// One op the simulator starts now.
pub struct ExecOp<'a> {
    /// The iteration's launch order in this run (unique; GMG slots are reused).
    pub serial: u64,
    pub tenant: TenantId,
    /// The engine instance (0..tenants are the homes, in tenant order; then serving
    /// replicas, as `replay` orders them).
    pub instance: u32,
    pub batch: &'a IterationBatch,
    pub dag: &'a IterationDag,
    /// The op's position in `dag`.
    pub index: u32,
    pub group: GroupId,
    pub priority: i32,
    /// What the simulator would have taken for it (cost model, corrected).
    pub predicted_ns: u64,
}

/// Runs the ops a replay starts and says how long each took.
pub trait OpExecutor {
    /// Runs the op (its inputs are done) and returns its measured duration in ns.
    fn run_op(&mut self, op: &ExecOp<'_>) -> u64;
    /// Every op of the iteration has run.
    fn iteration_done(&mut self, _serial: u64) {}
    /// Factor on the cost model's prediction for `spec` (online correction from the
    /// times measured so far); 1 without one.
    fn correction(&self, _spec: &OpSpec) -> f64 {
        1.0
    }
}
