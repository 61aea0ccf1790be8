//! What an iteration costs the serving engine beyond its GPU kernels.
//!
//! Kernel profiles (Vidur) time each kernel alone. A serving engine without CUDA
//! graphs also pays, per iteration:
//! - the CPU launching each kernel: a kernel shorter than the launch interval leaves
//!   the GPU waiting, so every op costs at least `launch_secs`. This is why decode
//!   stops speeding up past TP 4: the per-GPU kernels shrink below the launch interval
//!   while their number stays;
//! - per prompt of a prefill batch, per layer, `prefill_seq_secs` of engine work the
//!   attention of that prompt needs (per-sequence metadata, copies into the paged KV
//!   cache): batched short prompts cost more than the sum of their GEMMs;
//! - collectives at the latency NCCL measured for their group size (in the kernel
//!   model already);
//! - CPU time per iteration and per request (scheduling, sampling, output handling:
//!   [`CpuOverhead`]), during which the GPU idles.
//!
//! The first two are ops' own costs and enter `CostModel::op_ns`; the last is
//! `CpuOverhead::iteration_ns`. `replay` and `cost predict` use both, so they agree.

use crate::CpuOverhead;
use serde::{Deserialize, Serialize};
use slicesched_model::{OpKind, OpShape, OpSpec};

/// The engine's costs on top of kernel time (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EngineFit {
    pub launch_secs: f64,
    pub prefill_seq_secs: f64,
    pub cpu: CpuOverhead,
}

impl EngineFit {
    /// Kernel time only (what the kernel profiles measure).
    pub const NONE: EngineFit = EngineFit { launch_secs: 0.0, prefill_seq_secs: 0.0, cpu: CpuOverhead::ZERO };

    /// An op's cost to the engine given its kernel seconds `k` (no allocation).
    pub fn apply(&self, op: &OpSpec, k: f64) -> f64 {
        if matches!(op.shape, OpShape::Transfer { .. }) || op.kind == OpKind::Transfer {
            return k;
        }
        let mut t = k.max(self.launch_secs);
        if let OpShape::Attention(a) = &op.shape {
            t += self.prefill_seq_secs * a.prefill.iter().filter(|p| p.0 > 0).count() as f64;
        }
        t
    }
}

/// One iteration's cost as the engine sees it, split by cause (nanoseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationCost {
    /// GPU kernels other than collectives (GEMMs, attention, norms, ...).
    pub kernels_ns: u64,
    /// Collectives over the tensor-parallel group, at their measured latency.
    pub collectives_ns: u64,
    /// GPU time spent waiting for kernel launches (kernels shorter than the launch
    /// interval).
    pub launch_ns: u64,
    /// Per-prompt engine work of prefill attention.
    pub prefill_seq_ns: u64,
    /// CPU time per iteration (GPU idle).
    pub cpu_iteration_ns: u64,
    /// CPU time per request in the batch (GPU idle).
    pub cpu_requests_ns: u64,
}

impl IterationCost {
    /// What `replay` charges: the CPU overhead before launch plus every op's time.
    pub fn total_ns(&self) -> u64 {
        self.kernels_ns
            + self.collectives_ns
            + self.launch_ns
            + self.prefill_seq_ns
            + self.cpu_iteration_ns
            + self.cpu_requests_ns
    }
}

impl crate::CostModel {
    /// The cost of one iteration's DAG of `requests` requests on `dev`, by cause. The
    /// ops' parts sum to `Σ op_ns` and the CPU parts to `cpu.iteration_ns(requests)`,
    /// the figures `replay` charges.
    pub fn iteration_cost(
        &self,
        dev: &crate::DeviceCtx,
        dag: &slicesched_model::IterationDag,
        requests: usize,
        cpu: &CpuOverhead,
    ) -> IterationCost {
        let mut c = IterationCost::default();
        for o in dag.ops() {
            let (k, t) = (self.kernel_ns(dev, o.spec), self.op_ns(dev, o.spec));
            if matches!(o.spec.shape, OpShape::Collective { .. }) {
                c.collectives_ns += k;
            } else {
                c.kernels_ns += k;
            }
            let extra = t.saturating_sub(k);
            let seq = match &o.spec.shape {
                OpShape::Attention(a) => {
                    let n = a.prefill.iter().filter(|p| p.0 > 0).count() as f64;
                    ((self.engine().prefill_seq_secs * n * 1e9).round() as u64).min(extra)
                }
                _ => 0,
            };
            c.prefill_seq_ns += seq;
            c.launch_ns += extra - seq;
        }
        c.cpu_iteration_ns = cpu.iteration_ns(0);
        c.cpu_requests_ns = cpu.iteration_ns(requests) - c.cpu_iteration_ns;
        c
    }
}
