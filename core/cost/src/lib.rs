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
mod carry;
mod class;
mod cpu;
mod curve;
mod e2e;
mod engine;
mod fit;
mod net;
pub mod profiles;
mod validate;

pub use class::{op_class, OpClass};
pub use cpu::CpuOverhead;
pub use e2e::{embedded_rows, parse_e2e, validate_e2e, validate_e2e_holdout_tp, E2ePoint, E2eReport, E2eRow};
pub use engine::{EngineFit, IterationCost};
pub use profiles::ProfileSet;
pub use validate::{
    holdout, holdout_with, leave_one_model_out, read_dir_with_sku, validate, validate_dirs,
    validate_dirs_leave_one_model_out, validate_leave_one_model_out, ModelReport, OpError, Overall, ValidationReport,
};

use attn::{AttnFit, Heads};
use carry::GemmClass;
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
    // The io error is in the message, not `source()`: shown once where a caller prints the chain.
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
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

/// What was fitted on one profiled GPU: exact-shape curves, pooled fallbacks and
/// attention grids, valid on that SKU.
#[derive(Debug, Clone)]
pub(crate) struct SkuFit {
    pub sku: GpuSku,
    /// Exact shapes (kind, n or width, k), sorted, and their ln r over ln tokens.
    pub keys: Vec<(u8, u64, u64)>,
    pub curves: Vec<Curve>,
    pub gemm_pool: Curve,
    pub gemm_t0: f64,
    pub elem_pool: Vec<(u8, Curve)>,
    pub elem_any: Curve,
    pub attn: AttnFit,
    pub has_attn: bool,
    /// Profiles of ops timed as launched (`op_timing: launched`): the fastest op
    /// measured, of any kind, which no elementwise or attention op is priced under. 0
    /// for kernel-only timings.
    pub launch_floor: f64,
}

impl SkuFit {
    pub fn empty(sku: GpuSku) -> Self {
        Self {
            sku,
            keys: Vec::new(),
            curves: Vec::new(),
            gemm_pool: Curve::default(),
            gemm_t0: 0.0,
            elem_pool: Vec::new(),
            elem_any: Curve::default(),
            attn: AttnFit::default(),
            has_attn: false,
            launch_floor: 0.0,
        }
    }

    fn exact(&self, op: &OpSpec) -> Option<&Curve> {
        let key = fit::shape_key(op.kind.cost_class(), &op.shape, op.tp)?;
        // The LM head is never profiled; a vocab-sized GEMM only matches by accident.
        if op.kind == OpKind::LmHead {
            return None;
        }
        match self.keys.binary_search(&key) {
            Ok(i) => Some(&self.curves[i]),
            // A per-TP kernel at a degree not profiled: the nearest profiled degree of the
            // same width (O(log n), no allocation).
            Err(_) if class::per_tp_kernel(op.kind) => {
                let lo = self.keys.partition_point(|k| (k.0, k.1) < (key.0, key.1));
                let hi = self.keys.partition_point(|k| (k.0, k.1) <= (key.0, key.1));
                let dist = |i: usize| ((self.keys[i].2 as f64) / (key.2 as f64)).ln().abs();
                (lo..hi).min_by(|&a, &b| dist(a).total_cmp(&dist(b))).map(|i| &self.curves[i])
            }
            Err(_) => None,
        }
    }

    /// GEMM and elementwise kernel seconds on this fit's own SKU.
    fn local_secs(&self, op: &OpSpec) -> f64 {
        let (peak, bw) = (self.sku.peak_flops, self.sku.hbm_bw);
        let t_r = roofline(op, peak, bw);
        match &op.shape {
            OpShape::Gemm { m, .. } => match self.exact(op) {
                Some(c) => t_r * c.eval((*m as f64).ln()).exp(),
                None => self.gemm_t0 + t_r * self.gemm_pool.eval(fit::gemm_pool_x(op, peak, bw)).exp(),
            },
            OpShape::Elementwise { tokens, .. } => {
                let r = match self.exact(op) {
                    Some(c) => c.eval((*tokens as f64).ln()),
                    None => {
                        let kind = class::priced_as(op.kind) as u8;
                        let c = self.elem_pool.iter().find(|p| p.0 == kind).map_or(&self.elem_any, |p| &p.1);
                        c.eval((op.bytes.max(1) as f64).ln())
                    }
                };
                // A model far smaller than the profiled ones (a tiny model priced from
                // an 8B profile) would otherwise cost a fraction of a launch.
                (t_r * r.exp()).max(self.launch_floor) + self.launch_floor * class::extra_launches(op.kind) as f64
            }
            _ => 0.0,
        }
    }
}

/// A latency model for operators.
#[derive(Debug, Clone)]
pub struct CostModel {
    /// One fit per profiled GPU; the first is the reference other GPUs are carried from.
    fits: Vec<SkuFit>,
    gemm_class: GemmClass,
    net: NetFit,
    engine: EngineFit,
}

impl Default for CostModel {
    fn default() -> Self {
        Self::unfitted()
    }
}

impl CostModel {
    /// A model with no curves: plain roofline, default attention and network figures.
    pub fn unfitted() -> Self {
        Self { fits: Vec::new(), gemm_class: GemmClass::default(), net: NetFit::default(), engine: EngineFit::NONE }
    }

    /// The model fitted on the A100 profiles shipped in the repository (compiled in):
    /// GPU kernel time as the profiles measured it, the engine launching an iteration's
    /// kernels back to back (CUDA graphs, as vLLM decodes). What `replay` uses.
    pub fn default_a100() -> &'static CostModel {
        Self::kernels_a100()
    }

    /// [`CostModel::default_a100`] plus the serving-engine costs fitted on the
    /// end-to-end measurements in `data/e2e` (an engine whose CPU launches kernels one
    /// by one, running ahead of the GPU, and spends CPU time per prompt and request).
    /// `cost validate-e2e` and `cost predict` show it beside the default. Its launch
    /// waits are an iteration's cost (`iteration_cost`), not an op's, so `op_ns` under
    /// it is kernels plus per-prompt work; `replay` stays on the kernel-only model (the
    /// shipped figures are on it, and a CUDA-graph engine has no launch waits).
    pub fn e2e_a100() -> &'static CostModel {
        static M: std::sync::OnceLock<CostModel> = std::sync::OnceLock::new();
        M.get_or_init(|| {
            let mut m = Self::kernels_a100().clone();
            m.engine = EngineFit::embedded_a100(&m);
            m
        })
    }

    /// The A100 fit without engine costs: GPU kernel time only.
    pub fn kernels_a100() -> &'static CostModel {
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

    /// The engine costs this model adds to kernel time.
    pub fn engine(&self) -> &EngineFit {
        &self.engine
    }

    /// The same kernels priced under other engine costs.
    pub fn with_engine(&self, engine: EngineFit) -> CostModel {
        CostModel { engine, ..self.clone() }
    }

    /// The GPUs this model was fitted on (the first is the reference).
    pub fn fitted_skus(&self) -> impl Iterator<Item = &GpuSku> {
        self.fits.iter().map(|f| &f.sku)
    }

    /// Predicted latency of `op` on `dev` as the engine sees it, in nanoseconds: 0 for
    /// empty ops, else ≥ 1.
    pub fn op_ns(&self, dev: &DeviceCtx, op: &OpSpec) -> u64 {
        to_ns(self.op_secs(dev, op), op)
    }

    /// [`CostModel::op_ns`] without the engine's launch costs: GPU kernel time.
    pub fn kernel_ns(&self, dev: &DeviceCtx, op: &OpSpec) -> u64 {
        to_ns(self.kernel_secs(dev, op), op)
    }

    /// Predicted latency in seconds as the engine sees it (no allocation, O(log n)).
    pub fn op_secs(&self, dev: &DeviceCtx, op: &OpSpec) -> f64 {
        let k = self.kernel_secs(dev, op);
        if k <= 0.0 {
            return k;
        }
        self.engine.apply(op, k)
    }

    /// Predicted GPU kernel seconds (no allocation, O(log n)).
    pub fn kernel_secs(&self, dev: &DeviceCtx, op: &OpSpec) -> f64 {
        let (peak, bw) = (dev.sku.peak_flops, dev.sku.hbm_bw);
        if is_empty(op) {
            return 0.0;
        }
        let class = op_class(op.kind, &op.shape);
        match &op.shape {
            OpShape::Collective { bytes, ranks } => {
                return match op.kind.cost_class() {
                    OpKind::AllGather => self.net.all_gather_secs(*bytes as f64, *ranks, &dev.group_link),
                    _ => self.net.all_reduce_secs(*bytes as f64, *ranks, &dev.group_link),
                }
            }
            OpShape::Transfer { bytes } => return self.net.transfer_secs(*bytes as f64, &dev.group_link),
            OpShape::Attention(a) => {
                let attn = self.attn_for(&dev.sku);
                let h = Heads { q: a.q_heads as f64, kv: a.kv_heads as f64, dim: a.head_dim as f64 };
                let mut s = 0.0;
                for &(chunk, prior) in &a.prefill {
                    if chunk > 0 {
                        s += attn.prefill_secs(h, chunk as f64, prior as f64, peak, bw);
                    }
                }
                if a.decode_batch > 0 {
                    s += attn.decode_secs(h, a.decode_batch as f64, a.decode_kv_sum as f64, peak, bw);
                }
                return s.max(attn.floor);
            }
            _ => {}
        }
        if let Some(f) = self.fits.iter().find(|f| same_sku(&f.sku, &dev.sku)) {
            return f.local_secs(op);
        }
        let Some(r) = self.fits.first() else {
            return roofline(op, peak, bw);
        };
        match class {
            OpClass::Gemm => self.gemm_class.secs(op.flops as f64, op.bytes as f64, peak, bw, dev.sku.clock_ghz),
            _ => {
                let rows = match op.shape {
                    OpShape::Elementwise { tokens, .. } => tokens as f64,
                    _ => f64::INFINITY,
                };
                (r.local_secs(op) / carry::streaming_speedup_rows(&r.sku, &dev.sku, rows)).max(op.bytes as f64 / bw)
            }
        }
    }

    /// The attention grids fitted on this SKU, else the reference GPU's (applied to
    /// this SKU's roofline).
    fn attn_for(&self, sku: &GpuSku) -> &AttnFit {
        self.fits
            .iter()
            .find(|f| f.has_attn && same_sku(&f.sku, sku))
            .or_else(|| self.fits.iter().find(|f| f.has_attn))
            .map_or(&DEFAULT_ATTN, |f| &f.attn)
    }
}

static DEFAULT_ATTN: AttnFit = AttnFit::DEFAULT;

fn same_sku(a: &GpuSku, b: &GpuSku) -> bool {
    a.peak_flops == b.peak_flops && a.hbm_bw == b.hbm_bw && a.name == b.name
}

fn to_ns(s: f64, op: &OpSpec) -> u64 {
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
