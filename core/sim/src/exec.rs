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
    /// The request of each of the batch's sequences, in the DAG's order (prefill chunks,
    /// then decodes): what an executor that computes real tokens needs.
    pub reqs: &'a [u32],
    pub dag: &'a IterationDag,
    /// The op's position in `dag`.
    pub index: u32,
    pub group: GroupId,
    pub priority: i32,
    /// What the simulator would have taken for it (cost model, corrected).
    pub predicted_ns: u64,
    /// The cost model's own price of it on its group, without the correction: what the
    /// correction is measured against. Not `predicted_ns` over the correction now — an
    /// iteration's ops are priced when it launches, and the correction moves with every
    /// op that runs after that.
    pub model_ns: u64,
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
    /// The engine freed the request's KV blocks: it finished, ended early, or was
    /// preempted (it will be recomputed from its first token). An executor that holds
    /// the request's KV frees it now.
    fn kv_released(&mut self, _req: u32) {}
    /// Requests the executor ended after the iteration it just finished (a stop
    /// sequence matched, a client went away): the loop takes them out of their engines
    /// before the next batch is formed.
    fn take_ended(&mut self, _out: &mut Vec<(u32, End)>) {}
}

/// Why a request ends before its engine finishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// It is complete (a stop sequence or an end-of-sequence token): recorded as finished.
    Stopped,
    /// Nobody wants it any more: recorded as dropped with this reason.
    Dropped(&'static str),
}
