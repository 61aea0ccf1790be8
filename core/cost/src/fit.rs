//! Fitting efficiency curves (measured time / roofline time) from a [`ProfileSet`].

use crate::attn::AttnFit;
use crate::carry::{GemmClass, GemmPoint};
use crate::class::{op_class, per_tp_kernel, priced_as, OpClass};
use crate::curve::{binned_median, isotonic, median, Curve};
use crate::net::NetFit;
use crate::profiles::{ProfileSet, MLP_OPS};
use crate::{CostError, CostModel, SkuFit};
use slicesched_hw::GpuSku;
use slicesched_model::{IterationBatch, ModelConfig, OpKind, OpShape, OpSpec, PrefillItem};

/// Width of the pooled curves' bins, in natural-log units (about ×1.28 per bin).
const POOL_BIN: f64 = 0.25;

/// The OpKind whose column `name` holds in Vidur's `mlp.csv`.
pub(crate) fn kind_of(name: &str) -> Option<OpKind> {
    OpKind::ALL.iter().copied().find(|k| k.profile_name() == Some(name))
}

/// Lookup key of an op's exact shape at TP `tp`. The final norm is the same kernel as
/// the input norm, so it shares its curves; a kernel that changes with the TP degree
/// ([`per_tp_kernel`]) has a curve per degree.
pub(crate) fn shape_key(kind: OpKind, shape: &OpShape, tp: u32) -> Option<ShapeKey> {
    let per_tp = if per_tp_kernel(kind) { tp.max(1) as u64 } else { 0 };
    let kind = priced_as(kind);
    match *shape {
        OpShape::Gemm { n, k, .. } => Some((kind as u8, n, k)),
        OpShape::Elementwise { width, .. } => Some((kind as u8, width, per_tp)),
        _ => None,
    }
}

pub(crate) fn roofline(spec: &OpSpec, sku: &GpuSku) -> f64 {
    (spec.flops as f64 / sku.peak_flops).max(spec.bytes as f64 / sku.hbm_bw)
}

/// x of the pooled GEMM curve: intensity relative to the SKU's ridge point, so the
/// memory-to-compute transition lands where the target GPU has it.
pub(crate) fn gemm_pool_x(spec: &OpSpec, peak: f64, bw: f64) -> f64 {
    (spec.intensity() / (peak / bw)).max(1e-9).ln()
}

/// The spec of a profiled `mlp.csv` op for `tokens` tokens at TP `tp`.
pub(crate) fn profiled_spec(cfg: &ModelConfig, tokens: u32, tp: u32, kind: OpKind) -> Option<OpSpec> {
    let batch =
        IterationBatch { prefills: vec![PrefillItem { chunk: tokens, prior_kv: 0, samples: false }], decodes: vec![] };
    let dag = cfg.iteration_dag(&batch, tp);
    dag.head.into_iter().chain(dag.layer).find(|o| o.kind == kind)
}

/// (op kind, GEMM n or elementwise width, GEMM k or the TP degree of a per-TP kernel).
pub(crate) type ShapeKey = (u8, u64, u64);

/// One measured op: its spec and median seconds.
struct Point {
    spec: OpSpec,
    secs: f64,
}

impl CostModel {
    /// Fits every curve on `set`, with rooflines computed for `sku` (the profiled GPU).
    pub fn fit(set: &ProfileSet, sku: &GpuSku) -> Result<CostModel, CostError> {
        Self::fit_many(&[(set, sku)])
    }

    /// Fits on several GPUs' profiles at once: exact curves per GPU, the GEMM class
    /// model on all of them (each point against its own datasheet), the network on
    /// the first set that has NCCL tables. The first set is the reference other GPUs
    /// are carried from.
    pub fn fit_many(sets: &[(&ProfileSet, &GpuSku)]) -> Result<CostModel, CostError> {
        let mut model = CostModel::unfitted();
        let mut class_points = Vec::new();
        for (set, sku) in sets {
            let points = points(set);
            let mut f = SkuFit::empty((*sku).clone());
            fit_shapes(&mut f, &points);
            fit_gemm_pool(&mut f, &points);
            fit_elem_pool(&mut f, &points);
            let attn_rows: Vec<_> = set.models.iter().flat_map(|m| m.attention.iter().cloned()).collect();
            f.has_attn = !attn_rows.is_empty();
            f.attn = AttnFit::fit(&attn_rows, sku.peak_flops, sku.hbm_bw);
            // Where every op was timed as launched alone (`slicesched profile`), each
            // paid a launch, and the fastest measured op is what any op costs at least.
            // Kernel-only timings (Vidur's) carry no such floor.
            if set.launched_ops() {
                f.launch_floor = points
                    .iter()
                    .map(|p| p.secs)
                    .chain(attn_rows.iter().map(|r| r.secs))
                    .filter(|&s| s > 0.0)
                    .reduce(f64::min)
                    .unwrap_or(0.0);
                f.attn.floor = f.launch_floor;
            }
            class_points.extend(points.iter().filter(|p| op_class(p.spec.kind, &p.spec.shape) == OpClass::Gemm).map(
                |p| GemmPoint {
                    flops: p.spec.flops as f64,
                    bytes: p.spec.bytes as f64,
                    peak: sku.peak_flops,
                    bw: sku.hbm_bw,
                    clock: sku.clock_ghz,
                    secs: p.secs,
                },
            ));
            model.fits.push(f);
        }
        model.gemm_class = GemmClass::fit(&class_points);
        let nets: Vec<_> = sets.iter().flat_map(|(s, _)| s.networks.iter().cloned()).collect();
        model.net = NetFit::fit(&nets);
        Ok(model)
    }
}

/// Every measured op of a set's `mlp.csv` tables with its spec.
fn points(set: &ProfileSet) -> Vec<Point> {
    let mut points = Vec::new();
    let kinds: Vec<Option<OpKind>> = MLP_OPS.iter().map(|n| kind_of(n)).collect();
    for m in &set.models {
        for row in &m.mlp {
            if row.tokens == 0 || m.config.check_tp(row.tp).is_err() {
                continue;
            }
            let batch = IterationBatch {
                prefills: vec![PrefillItem { chunk: row.tokens, prior_kv: 0, samples: false }],
                decodes: vec![],
            };
            let dag = m.config.iteration_dag(&batch, row.tp);
            for (secs, kind) in row.secs.iter().zip(&kinds) {
                let (Some(secs), Some(kind)) = (*secs, *kind) else {
                    continue;
                };
                if secs <= 0.0 {
                    continue;
                }
                if let Some(spec) = dag.head.iter().chain(&dag.layer).find(|o| o.kind == kind) {
                    points.push(Point { spec: spec.clone(), secs });
                }
            }
        }
    }
    points
}

/// Exact-shape curves: ln(r) over ln(tokens), measured times made monotone first.
fn fit_shapes(f: &mut SkuFit, points: &[Point]) {
    let sku = f.sku.clone();
    let mut keyed: Vec<(ShapeKey, u64, f64, f64)> = points
        .iter()
        .filter_map(|p| {
            let key = shape_key(p.spec.kind, &p.spec.shape, p.spec.tp)?;
            Some((key, p.spec.tokens(), p.secs.ln(), roofline(&p.spec, &sku).ln()))
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    for group in keyed.chunk_by(|a, b| a.0 == b.0) {
        // (ln tokens, mean ln t, ln roofline) per distinct token count.
        let mut knots: Vec<(f64, f64, f64)> = group
            .chunk_by(|a, b| a.1 == b.1)
            .map(|g| ((g[0].1 as f64).ln(), g.iter().map(|p| p.2).sum::<f64>() / g.len() as f64, g[0].3))
            .collect();
        let mut ts: Vec<f64> = knots.iter().map(|k| k.1).collect();
        isotonic(&mut ts);
        for (k, t) in knots.iter_mut().zip(ts) {
            k.1 = t;
        }
        f.keys.push(group[0].0);
        f.curves.push(Curve::from_points(knots.iter().map(|k| (k.0, k.1 - k.2)).collect()));
    }
}

/// Pooled GEMM model `t = t0 + r(x)·roofline`, `x` the intensity over the ridge. The
/// launch floor `t0` is picked by grid search, so small shapes of models never
/// profiled keep their fixed cost instead of scaling with their tiny roofline.
fn fit_gemm_pool(f: &mut SkuFit, points: &[Point]) {
    let sku = &f.sku;
    let gemms: Vec<(f64, f64, f64)> = points
        .iter()
        .filter(|p| op_class(p.spec.kind, &p.spec.shape) == OpClass::Gemm)
        .map(|p| (gemm_pool_x(&p.spec, sku.peak_flops, sku.hbm_bw), p.secs, roofline(&p.spec, sku)))
        .collect();
    if gemms.is_empty() {
        return;
    }
    let floor = gemms.iter().map(|g| g.1).fold(f64::INFINITY, f64::min);
    let mut best = (f64::INFINITY, 0.0, Curve::default());
    for step in 0..=10 {
        let t0 = floor * 0.09 * step as f64;
        let curve =
            binned_median(gemms.iter().map(|&(x, t, tr)| (x, ((t - t0).max(0.05 * t) / tr).ln())).collect(), POOL_BIN);
        let mut errs: Vec<f64> =
            gemms.iter().map(|&(x, t, tr)| ((t0 + curve.eval(x).exp() * tr) / t).ln().abs()).collect();
        let e = median(&mut errs);
        if e < best.0 {
            best = (e, t0, curve);
        }
    }
    f.gemm_t0 = best.1;
    f.gemm_pool = best.2;
}

/// Pooled elementwise curves per priced kind: ln(r) over ln(bytes).
fn fit_elem_pool(f: &mut SkuFit, points: &[Point]) {
    let sku = &f.sku;
    let elem: Vec<(u8, f64, f64)> = points
        .iter()
        .filter(|p| matches!(p.spec.shape, OpShape::Elementwise { .. }))
        .map(|p| {
            let k = priced_as(p.spec.kind) as u8;
            (k, (p.spec.bytes.max(1) as f64).ln(), (p.secs / roofline(&p.spec, sku)).ln())
        })
        .collect();
    let mut kinds: Vec<u8> = elem.iter().map(|e| e.0).collect();
    kinds.sort_unstable();
    kinds.dedup();
    for k in kinds {
        let pts = elem.iter().filter(|e| e.0 == k).map(|e| (e.1, e.2)).collect();
        f.elem_pool.push((k, binned_median(pts, POOL_BIN)));
    }
    f.elem_any = binned_median(elem.iter().map(|e| (e.1, e.2)).collect(), POOL_BIN);
}
