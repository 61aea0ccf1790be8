//! Operator latency on any GPU of the catalog.
//!
//! SKELETON: the public API below is the contract the engine and simulator use
//! (`CostModel::default_a100`, `CostModel::op_ns`, `DeviceCtx`). The fitted
//! implementation replaces the plain roofline.

use slicesched_hw::{GpuSku, Link};
use slicesched_model::{OpShape, OpSpec};

#[derive(Debug, thiserror::Error)]
pub enum CostError {
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
}

/// Where an op runs: the GPU model and the slowest link of its tensor-parallel group
/// (what its collectives run over).
#[derive(Debug, Clone)]
pub struct DeviceCtx {
    pub sku: GpuSku,
    pub group_link: Link,
}

/// A latency model for operators.
#[derive(Debug, Clone, Default)]
pub struct CostModel {}

impl CostModel {
    /// The model fitted on the A100 profiles shipped in the repository.
    pub fn default_a100() -> &'static CostModel {
        static M: std::sync::OnceLock<CostModel> = std::sync::OnceLock::new();
        M.get_or_init(CostModel::default)
    }

    /// Predicted latency of `op` on `dev`, in nanoseconds.
    pub fn op_ns(&self, dev: &DeviceCtx, op: &OpSpec) -> u64 {
        let s = match &op.shape {
            OpShape::Collective { bytes, ranks } => {
                let r = *ranks as f64;
                dev.group_link.latency_ns as f64 * 1e-9 + 2.0 * (r - 1.0) / r * *bytes as f64 / dev.group_link.bandwidth
            }
            OpShape::Transfer { bytes } => dev.group_link.latency_ns as f64 * 1e-9 + *bytes as f64 / dev.group_link.bandwidth,
            _ => (op.flops as f64 / (0.7 * dev.sku.peak_flops)).max(op.bytes as f64 / (0.8 * dev.sku.hbm_bw)) + 3e-6,
        };
        (s * 1e9) as u64
    }
}
