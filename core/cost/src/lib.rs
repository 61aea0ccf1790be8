//! Operator latency on any GPU of the catalog: the roofline of the target SKU scaled by
//! efficiency curves fitted on measured A100 profiles (Vidur).
//!
//! For every op the fitted quantity is `r = measured / roofline`, where the roofline is
//! `max(flops / peak, bytes / hbm_bw)` from the op's exact work. Ops whose shape was
//! profiled use a curve of ln r over ln tokens for that shape; others use pooled
//! per-kind curves (GEMMs over intensity relative to the ridge point, elementwise ops
//! over bytes). Attention uses grids over (chunk, KV) and (batch, KV); collectives and
//! copies use latency + bytes/bandwidth fits rescaled to the group's link. Other SKUs
//! are predicted by applying the same ratios to their own catalog roofline.

mod attn;
mod cpu;
mod curve;
mod fit;
mod net;
pub mod profiles;
mod validate;

pub use cpu::CpuOverhead;
pub use profiles::ProfileSet;
pub use validate::{
    holdout, leave_one_model_out, validate, validate_leave_one_model_out, ModelReport, OpError, Overall,
    ValidationReport,
};

use attn::{AttnFit, Heads};
use curve::Curve;
use net::NetFit;
use slicesched_hw::{GpuSku, Link, LinkKind};
use slicesched_model::{OpKind, OpShape, OpSpec};

#[derive(Debug, thiserror::Error)]
pub enum CostError {
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
    #[error("{path}: line {line}, column `{column}`: {msg}")]
    Csv { path: String, line: u64, column: String, msg: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// Where an op runs: the GPU model and the slowest link of its tensor-parallel group
/// (what its collectives run over).
#[derive(Debug, Clone)]
pub struct DeviceCtx {
    pub sku: GpuSku,
    pub group_link: Link,
}

impl DeviceCtx {
    /// A catalog SKU whose group talks over its own NVLink (PCIe when it has none).
    pub fn single_node(sku: GpuSku) -> Self {
        let (kind, bandwidth, latency_ns) = if sku.nvlink_bw > 0.0 {
            (LinkKind::NvLink, sku.nvlink_bw, 8_000)
        } else {
            (LinkKind::Pcie, sku.pcie_bw, 12_000)
        };
        Self { group_link: Link { kind, bandwidth, latency_ns }, sku }
    }
}

/// A latency model for operators.
#[derive(Debug, Clone)]
pub struct CostModel {
    /// Exact shapes (kind, n or width, k), sorted, and their ln r over ln tokens.
    keys: Vec<(u8, u64, u64)>,
    curves: Vec<Curve>,
    gemm_pool: Curve,
    gemm_t0: f64,
    elem_pool: Vec<(u8, Curve)>,
    elem_any: Curve,
    attn: AttnFit,
    net: NetFit,
}

impl Default for CostModel {
    fn default() -> Self {
        Self::unfitted()
    }
}

impl CostModel {
    /// A model with no curves: plain roofline, default attention and network figures.
    pub fn unfitted() -> Self {
        Self {
            keys: Vec::new(),
            curves: Vec::new(),
            gemm_pool: Curve::default(),
            gemm_t0: 0.0,
            elem_pool: Vec::new(),
            elem_any: Curve::default(),
            attn: AttnFit::default(),
            net: NetFit::default(),
        }
    }

    /// The model fitted on the A100 profiles shipped in the repository (compiled in).
    pub fn default_a100() -> &'static CostModel {
        static M: std::sync::OnceLock<CostModel> = std::sync::OnceLock::new();
        M.get_or_init(|| {
            let set = ProfileSet::embedded_a100().expect("embedded profiles parse (checked by tests)");
            CostModel::fit(&set, &a100()).expect("embedded profiles fit (checked by tests)")
        })
    }

    /// Fits on a directory laid out like `data/profiles/a100`, measured on `sku`.
    pub fn fit_dir(dir: &std::path::Path, sku: &GpuSku) -> Result<CostModel, CostError> {
        Self::fit(&ProfileSet::from_dir(dir)?, sku)
    }

    /// Predicted latency of `op` on `dev`, in nanoseconds: 0 for empty ops, else ≥ 1.
    pub fn op_ns(&self, dev: &DeviceCtx, op: &OpSpec) -> u64 {
        let s = self.op_secs(dev, op);
        if s.is_nan() {
            return 1;
        }
        if s <= 0.0 {
            // A copy or collective that stays on one device is free, not "at least 1 ns".
            let free = is_empty(op) || matches!(op.shape, OpShape::Collective { .. } | OpShape::Transfer { .. });
            return if free { 0 } else { 1 };
        }
        ((s * 1e9).round() as u64).max(1)
    }

    /// Predicted latency in seconds (no allocation, O(log n)).
    pub fn op_secs(&self, dev: &DeviceCtx, op: &OpSpec) -> f64 {
        let (peak, bw) = (dev.sku.peak_flops, dev.sku.hbm_bw);
        if is_empty(op) {
            return 0.0;
        }
        match &op.shape {
            OpShape::Gemm { m, .. } => {
                let t_r = roofline(op, peak, bw);
                match self.exact(op) {
                    Some(c) => t_r * c.eval((*m as f64).ln()).exp(),
                    None => self.gemm_t0 + t_r * self.gemm_pool.eval(fit::gemm_pool_x(op, peak, bw)).exp(),
                }
            }
            OpShape::Elementwise { tokens, .. } => {
                let t_r = roofline(op, peak, bw);
                let r = match self.exact(op) {
                    Some(c) => c.eval((*tokens as f64).ln()),
                    None => {
                        let kind = if op.kind == OpKind::FinalNorm { OpKind::InputNorm } else { op.kind } as u8;
                        let c = self.elem_pool.iter().find(|p| p.0 == kind).map_or(&self.elem_any, |p| &p.1);
                        c.eval((op.bytes.max(1) as f64).ln())
                    }
                };
                t_r * r.exp()
            }
            OpShape::Attention(a) => {
                let h = Heads { q: a.q_heads as f64, kv: a.kv_heads as f64, dim: a.head_dim as f64 };
                let mut s = 0.0;
                for &(chunk, prior) in &a.prefill {
                    if chunk > 0 {
                        s += self.attn.prefill_secs(h, chunk as f64, prior as f64, peak, bw);
                    }
                }
                if a.decode_batch > 0 {
                    s += self.attn.decode_secs(h, a.decode_batch as f64, a.decode_kv_sum as f64, peak, bw);
                }
                s
            }
            OpShape::Collective { bytes, ranks } => match op.kind.cost_class() {
                OpKind::AllGather => self.net.all_gather_secs(*bytes as f64, *ranks, &dev.group_link),
                _ => self.net.all_reduce_secs(*bytes as f64, *ranks, &dev.group_link),
            },
            OpShape::Transfer { bytes } => self.net.transfer_secs(*bytes as f64, &dev.group_link),
        }
    }

    fn exact(&self, op: &OpSpec) -> Option<&Curve> {
        let key = fit::shape_key(op.kind.cost_class(), &op.shape)?;
        // The LM head is never profiled; a vocab-sized GEMM only matches by accident.
        if op.kind == OpKind::LmHead {
            return None;
        }
        self.keys.binary_search(&key).ok().map(|i| &self.curves[i])
    }
}

fn roofline(op: &OpSpec, peak: f64, bw: f64) -> f64 {
    (op.flops as f64 / peak).max(op.bytes as f64 / bw)
}

fn is_empty(op: &OpSpec) -> bool {
    match &op.shape {
        OpShape::Gemm { m, n, k } => *m == 0 || *n == 0 || *k == 0,
        OpShape::Elementwise { tokens, width } => *tokens == 0 || *width == 0,
        OpShape::Attention(a) => a.decode_batch == 0 && a.prefill.iter().all(|p| p.0 == 0),
        OpShape::Collective { bytes, ranks } => *bytes == 0 || *ranks <= 1,
        OpShape::Transfer { bytes } => *bytes == 0,
    }
}

pub(crate) fn a100() -> GpuSku {
    slicesched_hw::sku("A100-80GB").expect("A100-80GB is in the catalog")
}

#[cfg(test)]
mod tests;
