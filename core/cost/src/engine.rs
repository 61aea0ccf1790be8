//! What an iteration costs the serving engine beyond its GPU kernels.
//!
//! Kernel profiles (Vidur) time each kernel alone. A serving engine without CUDA
//! graphs also pays, per iteration:
//! - the CPU launching each kernel, one every `launch_secs`: the CPU runs ahead of the
//!   GPU, so long kernels hide the launches of the short ones after them, and the GPU
//!   waits only where the launches fall behind (an iteration takes about
//!   max(Σ kernels, Σ launches), computed exactly by [`EngineFit::span_secs`]). This is
//!   why decode is flat from TP 4 on: the per-GPU kernels shrink while their number
//!   and the CPU's time to launch them stay;
//! - per prompt of a prefill batch, per layer, `prefill_seq_secs` of engine work the
//!   attention of that prompt needs (per-sequence metadata, copies into the paged KV
//!   cache): batched short prompts cost more than the sum of their GEMMs;
//! - collectives at the latency NCCL measured for their group size (in the kernel
//!   model already);
//! - CPU time per iteration and per request (scheduling, sampling, output handling:
//!   [`CpuOverhead`]), during which the GPU idles.
//!
//! The per-prompt work is an op's own cost and enters `CostModel::op_ns`; the launch
//! waits depend on the ops around an op, so they are an iteration's cost
//! ([`crate::CostModel::iteration_cost`]), as is `CpuOverhead::iteration_ns`.

use crate::CpuOverhead;
use serde::{Deserialize, Serialize};
use slicesched_model::{OpKind, OpShape, OpSpec};

/// The engine's costs on top of kernel time (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EngineFit {
    pub launch_secs: f64,
    pub prefill_seq_secs: f64,
    /// CPU time of an iteration that starts prompts, beyond a decode iteration's
    /// (admitting requests, allocating their KV blocks), before its launches.
    #[serde(default)]
    pub prefill_cpu_secs: f64,
    /// CPU time per prompt such an iteration starts (its sequence's metadata, block
    /// table and inputs).
    #[serde(default)]
    pub prompt_cpu_secs: f64,
    pub cpu: CpuOverhead,
}

impl EngineFit {
    /// Kernel time only (what the kernel profiles measure).
    pub const NONE: EngineFit = EngineFit {
        launch_secs: 0.0,
        prefill_seq_secs: 0.0,
        prefill_cpu_secs: 0.0,
        prompt_cpu_secs: 0.0,
        cpu: CpuOverhead::ZERO,
    };

    /// An op's cost to the engine given its kernel seconds `k` (no allocation).
    pub fn apply(&self, op: &OpSpec, k: f64) -> f64 {
        if matches!(op.shape, OpShape::Transfer { .. }) || op.kind == OpKind::Transfer {
            return k;
        }
        match &op.shape {
            OpShape::Attention(a) => k + self.prefill_seq_secs * a.prefill.iter().filter(|p| p.0 > 0).count() as f64,
            _ => k,
        }
    }

    /// GPU seconds from the first launch to the end of the last op, for ops of `secs`
    /// each (in launch order) launched one every `launch_secs` by a CPU that runs
    /// ahead of the GPU.
    pub fn span_secs(&self, secs: impl IntoIterator<Item = f64>) -> f64 {
        let mut pipe = Pipeline::default();
        for t in secs {
            pipe.push(self.launch_secs, t);
        }
        pipe.gpu
    }
}

/// The CPU's launch clock and the GPU's clock, both from the iteration's start.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pipeline {
    pub cpu: f64,
    pub gpu: f64,
}

impl Pipeline {
    /// Launches an op of `t` seconds after `launch` seconds of CPU work.
    pub fn push(&mut self, launch: f64, t: f64) {
        self.cpu += launch;
        self.gpu = self.gpu.max(self.cpu) + t;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_hide_behind_long_kernels() {
        let e = EngineFit { launch_secs: 10.0, ..EngineFit::NONE };
        // GPU-bound: launches after the first overlap the kernels.
        assert_eq!(e.span_secs([30.0, 30.0, 30.0]), 100.0);
        // Launch-bound: the GPU waits for each launch, the last kernel runs after it.
        assert_eq!(e.span_secs([1.0, 1.0, 1.0]), 31.0);
        // A long kernel lets the CPU queue the short ones behind it.
        assert_eq!(e.span_secs([50.0, 1.0, 1.0, 1.0]), 63.0);
        assert_eq!(EngineFit::NONE.span_secs([2.0, 3.0]), 5.0);
    }
}

/// One iteration's cost as the engine sees it, split by cause (nanoseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationCost {
    /// GPU kernels other than collectives (GEMMs, attention, norms, ...).
    pub kernels_ns: u64,
    /// Collectives over the tensor-parallel group, at their measured latency.
    pub collectives_ns: u64,
    /// GPU time spent waiting for kernel launches (where the CPU's launches fell
    /// behind the kernels).
    pub launch_ns: u64,
    /// Per-prompt engine work of prefill attention.
    pub prefill_seq_ns: u64,
    /// CPU time per iteration (GPU idle).
    pub cpu_iteration_ns: u64,
    /// CPU time per request in the batch (GPU idle).
    pub cpu_requests_ns: u64,
    /// CPU time of starting prompts (per iteration with prefills and per prompt; GPU
    /// idle).
    #[serde(default)]
    pub cpu_prefill_ns: u64,
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
            + self.cpu_prefill_ns
    }
}

impl crate::CostModel {
    /// The cost of one iteration's DAG of `requests` requests on `dev`, by cause. The
    /// kernel, collective and prefill parts sum to `Σ op_ns` and the CPU parts to
    /// `cpu.iteration_ns(requests)` (what `replay` charges); the launch waits come from
    /// replaying the ops' launches in DAG order (0 for a model without engine costs).
    pub fn iteration_cost(
        &self,
        dev: &crate::DeviceCtx,
        dag: &slicesched_model::IterationDag,
        requests: usize,
        cpu: &CpuOverhead,
    ) -> IterationCost {
        let mut c = IterationCost::default();
        let mut pipe = Pipeline::default();
        let mut ops_ns = 0u64;
        let mut prompts = 0usize;
        for o in dag.ops() {
            if let (OpShape::Attention(a), 0) = (&o.spec.shape, prompts) {
                prompts = a.prefill.iter().filter(|p| p.0 > 0).count();
            }
            let (k, t) = (self.kernel_ns(dev, o.spec), self.op_ns(dev, o.spec));
            if matches!(o.spec.shape, OpShape::Collective { .. }) {
                c.collectives_ns += k;
            } else {
                c.kernels_ns += k;
            }
            c.prefill_seq_ns += t.saturating_sub(k);
            ops_ns += t;
            if t > 0 {
                pipe.push(self.engine().launch_secs * 1e9, t as f64);
            }
        }
        c.launch_ns = (pipe.gpu.round() as u64).saturating_sub(ops_ns);
        if prompts > 0 {
            let e = self.engine();
            c.cpu_prefill_ns = ((e.prefill_cpu_secs + e.prompt_cpu_secs * prompts as f64) * 1e9).round() as u64;
        }
        c.cpu_iteration_ns = cpu.iteration_ns(0);
        c.cpu_requests_ns = cpu.iteration_ns(requests) - c.cpu_iteration_ns;
        c
    }
}
