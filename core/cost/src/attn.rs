//! Attention: roofline work per prefill chunk and decode batch, and efficiency grids
//! fitted on Vidur's FlashAttention profile.
//!
//! The fitted quantity is ln(measured / roofline) on a grid of (ln chunk, ln(1+prior
//! KV)) for prefill and (ln batch, ln KV) for decode. Other head counts and head sizes
//! reuse the grid through their own roofline, which is how the ratio transfers.

use crate::curve::{fit_line_rel, Curve};
use crate::profiles::AttnRow;

/// Attention operands are fp16/bf16 everywhere in this project (`AttnShape` carries no
/// dtype).
const ELEM: f64 = 2.0;

/// Heads and head size of one GPU's attention.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    pub q: f64,
    pub kv: f64,
    pub dim: f64,
}

/// (FLOPs, bytes) of one causal prefill chunk of `c` tokens after `prior` cached ones;
/// the same counts as `ModelConfig::iteration_dag`.
pub(crate) fn prefill_work(h: Heads, c: f64, prior: f64) -> (f64, f64) {
    let pairs = c * prior + c * (c + 1.0) / 2.0;
    let flops = 4.0 * h.dim * h.q * pairs;
    let bytes = (2.0 * c * h.q * h.dim + 2.0 * (prior + c) * h.kv * h.dim + 2.0 * c * h.kv * h.dim) * ELEM;
    (flops, bytes)
}

/// (FLOPs, bytes) of `n` decode queries over `kv_sum` cached tokens in total.
pub(crate) fn decode_work(h: Heads, n: f64, kv_sum: f64) -> (f64, f64) {
    let flops = 4.0 * h.dim * h.q * kv_sum;
    let bytes = (2.0 * kv_sum * h.kv * h.dim + 2.0 * n * h.q * h.dim + 2.0 * n * h.kv * h.dim) * ELEM;
    (flops, bytes)
}

pub(crate) fn roofline(work: (f64, f64), peak: f64, bw: f64) -> f64 {
    (work.0 / peak).max(work.1 / bw)
}

/// ln(ratio) over (u, v): one curve in `v` per profiled `u`, blended linearly in `u`.
/// Handles the ragged grids Vidur writes (chunk + KV bounded by the context length).
#[derive(Debug, Clone, Default)]
pub(crate) struct Grid {
    us: Vec<f64>,
    rows: Vec<Curve>,
}

impl Grid {
    fn fit(mut pts: Vec<(f64, f64, f64)>) -> Self {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut g = Grid::default();
        for chunk in pts.chunk_by(|a, b| a.0 == b.0) {
            g.us.push(chunk[0].0);
            g.rows.push(Curve::from_points(chunk.iter().map(|p| (p.1, p.2)).collect()));
        }
        g
    }

    pub fn is_empty(&self) -> bool {
        self.us.is_empty()
    }

    pub fn eval(&self, u: f64, v: f64) -> f64 {
        let n = self.us.len();
        if n == 0 {
            return 0.0;
        }
        if u <= self.us[0] {
            return self.rows[0].eval(v);
        }
        if u >= self.us[n - 1] {
            return self.rows[n - 1].eval(v);
        }
        let i = self.us.partition_point(|&k| k <= u);
        let w = (u - self.us[i - 1]) / (self.us[i] - self.us[i - 1]);
        self.rows[i - 1].eval(v) * (1.0 - w) + self.rows[i].eval(v) * w
    }
}

/// `t = a + s · roofline`: the pooled fallback where no grid was fitted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Linear {
    pub a: f64,
    pub s: f64,
}

/// Heads per GPU and head size, as profiled: the key of a head configuration's own grids.
type HeadKey = (u32, u32, u32);

fn head_key(h: Heads) -> HeadKey {
    (h.q.round() as u32, h.kv.round() as u32, h.dim.round() as u32)
}

#[derive(Debug, Clone)]
pub(crate) struct AttnFit {
    /// Pooled over every profiled head configuration: what an unprofiled one uses.
    pub prefill: Grid,
    pub decode: Grid,
    pub prefill_lin: Linear,
    pub decode_lin: Linear,
    /// Per profiled head configuration, its own (prefill, decode) grids. How close a
    /// kernel gets to its roofline depends on the head size and the query heads per KV
    /// head (a CPU's attention of 32-wide heads ran at a third of the rate of 64-wide
    /// ones on the same roofline), so pooling two configurations priced both ~35% off.
    pub exact: Vec<(HeadKey, Grid, Grid)>,
    /// An attention op costs no less, however small its heads (`SkuFit::launch_floor`).
    pub floor: f64,
}

impl AttnFit {
    /// Used only when no profile set has an attention table: FlashAttention on A100
    /// reaches roughly 15% of peak in prefill and 60% of HBM in decode (README data).
    pub const DEFAULT: AttnFit = AttnFit {
        prefill: Grid { us: Vec::new(), rows: Vec::new() },
        decode: Grid { us: Vec::new(), rows: Vec::new() },
        prefill_lin: Linear { a: 10e-6, s: 1.0 / 0.15 },
        decode_lin: Linear { a: 10e-6, s: 1.0 / 0.6 },
        exact: Vec::new(),
        floor: 0.0,
    };
}

impl Default for AttnFit {
    fn default() -> Self {
        Self::DEFAULT
    }
}

pub(crate) fn row_heads(r: &AttnRow) -> Heads {
    let tp = r.tp.max(1) as f64;
    Heads { q: r.q_heads as f64 / tp, kv: (r.kv_heads as f64 / tp).ceil(), dim: (r.embd / r.q_heads) as f64 }
}

/// Roofline seconds of a profile row on a GPU with `peak` FLOP/s and `bw` B/s.
pub(crate) fn row_roofline(r: &AttnRow, peak: f64, bw: f64) -> f64 {
    let h = row_heads(r);
    let work = if r.prefill {
        prefill_work(h, r.chunk as f64, r.kv as f64)
    } else {
        decode_work(h, r.batch as f64, r.batch as f64 * r.kv as f64)
    };
    roofline(work, peak, bw)
}

/// Grid coordinates of a row.
pub(crate) fn prefill_uv(chunk: f64, prior: f64) -> (f64, f64) {
    (chunk.max(1.0).ln(), (1.0 + prior).ln())
}
pub(crate) fn decode_uv(batch: f64, mean_kv: f64) -> (f64, f64) {
    (batch.max(1.0).ln(), mean_kv.max(1.0).ln())
}

impl AttnFit {
    pub fn fit(rows: &[AttnRow], peak: f64, bw: f64) -> Self {
        let mut fit = AttnFit::default();
        let (mut pre, mut dec, mut pre_lin, mut dec_lin) = (vec![], vec![], vec![], vec![]);
        // (head configuration, prefill?, point) for the per-configuration grids.
        let mut keyed: Vec<(HeadKey, bool, (f64, f64, f64))> = Vec::new();
        for r in rows.iter().filter(|r| r.secs > 0.0) {
            let t_r = row_roofline(r, peak, bw);
            let y = (r.secs / t_r).ln();
            let (u, v) = if r.prefill {
                prefill_uv(r.chunk as f64, r.kv as f64)
            } else {
                decode_uv(r.batch as f64, r.kv as f64)
            };
            keyed.push((head_key(row_heads(r)), r.prefill, (u, v, y)));
            if r.prefill {
                pre.push((u, v, y));
                pre_lin.push((t_r, r.secs));
            } else {
                dec.push((u, v, y));
                dec_lin.push((t_r, r.secs));
            }
        }
        let mut keys: Vec<HeadKey> = keyed.iter().map(|k| k.0).collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.len() > 1 {
            for k in keys {
                let of = |prefill: bool| keyed.iter().filter(|p| p.0 == k && p.1 == prefill).map(|p| p.2).collect();
                fit.exact.push((k, Grid::fit(of(true)), Grid::fit(of(false))));
            }
        }
        fit.prefill = Grid::fit(pre);
        fit.decode = Grid::fit(dec);
        if let Some((a, s)) = fit_line_rel(&pre_lin) {
            fit.prefill_lin = Linear { a, s };
        }
        if let Some((a, s)) = fit_line_rel(&dec_lin) {
            fit.decode_lin = Linear { a, s };
        }
        fit
    }

    /// Seconds of one prefill chunk.
    pub fn prefill_secs(&self, h: Heads, chunk: f64, prior: f64, peak: f64, bw: f64) -> f64 {
        let t_r = roofline(prefill_work(h, chunk, prior), peak, bw);
        if self.prefill.is_empty() {
            return self.prefill_lin.a + self.prefill_lin.s * t_r;
        }
        let (u, v) = prefill_uv(chunk, prior);
        t_r * self.grids(h).map_or(&self.prefill, |g| &g.1).eval(u, v).exp()
    }

    /// Seconds of a decode batch of `n` requests with `kv_sum` KV tokens in total.
    pub fn decode_secs(&self, h: Heads, n: f64, kv_sum: f64, peak: f64, bw: f64) -> f64 {
        let t_r = roofline(decode_work(h, n, kv_sum), peak, bw);
        if self.decode.is_empty() {
            return self.decode_lin.a + self.decode_lin.s * t_r;
        }
        let (u, v) = decode_uv(n, kv_sum / n);
        t_r * self.grids(h).map_or(&self.decode, |g| &g.2).eval(u, v).exp()
    }

    /// The head configuration's own grids, where it was profiled (both phases).
    fn grids(&self, h: Heads) -> Option<&(HeadKey, Grid, Grid)> {
        let k = head_key(h);
        self.exact.iter().find(|g| g.0 == k && !g.1.is_empty() && !g.2.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slicesched_model::{IterationBatch, ModelConfig, OpKind, PrefillItem};

    #[test]
    fn work_matches_the_model_dag() {
        let m = ModelConfig::preset("llama-2-70b").unwrap();
        let b = IterationBatch {
            prefills: vec![PrefillItem { chunk: 300, prior_kv: 700, samples: false }],
            decodes: vec![],
        };
        let d = m.iteration_dag(&b, 2);
        let a = d.layer.iter().find(|o| o.kind == OpKind::Attention).unwrap();
        let (f, by) = prefill_work(Heads { q: 32.0, kv: 4.0, dim: 128.0 }, 300.0, 700.0);
        assert_eq!((f as u64, by as u64), (a.flops, a.bytes));
    }

    /// Two head configurations whose kernels reach different fractions of the same
    /// roofline: each is priced by its own grid, an unprofiled one by the pooled grid.
    #[test]
    fn each_profiled_head_configuration_keeps_its_own_grids() {
        let (peak, bw) = (1e12, 1e11);
        let mut rows = Vec::new();
        for (embd, slow) in [(256u32, 3.0), (512, 1.0)] {
            for prefill in [true, false] {
                for a in [1u32, 4, 16] {
                    for kv in [16u32, 256, 1024] {
                        let mut r = AttnRow {
                            prefill,
                            batch: if prefill { 1 } else { a },
                            chunk: if prefill { 16 * a } else { 0 },
                            kv,
                            q_heads: 8,
                            kv_heads: 2,
                            embd,
                            tp: 1,
                            secs: 0.0,
                        };
                        r.secs = slow * 2.0 * row_roofline(&r, peak, bw);
                        rows.push(r);
                    }
                }
            }
        }
        let fit = AttnFit::fit(&rows, peak, bw);
        for (dim, slow) in [(32.0, 3.0), (64.0, 1.0)] {
            let h = Heads { q: 8.0, kv: 2.0, dim };
            let want = slow * 2.0 * roofline(prefill_work(h, 64.0, 300.0), peak, bw);
            let got = fit.prefill_secs(h, 64.0, 300.0, peak, bw);
            assert!((got / want - 1.0).abs() < 1e-9, "dim {dim}: {got} vs {want}");
            let want = slow * 2.0 * roofline(decode_work(h, 4.0, 4.0 * 500.0), peak, bw);
            let got = fit.decode_secs(h, 4.0, 4.0 * 500.0, peak, bw);
            assert!((got / want - 1.0).abs() < 1e-9, "dim {dim}: {got} vs {want}");
        }
        // An unprofiled configuration: between the two (the pooled grid).
        let h = Heads { q: 16.0, kv: 2.0, dim: 64.0 };
        let r = fit.decode_secs(h, 4.0, 2000.0, peak, bw) / roofline(decode_work(h, 4.0, 2000.0), peak, bw);
        assert!(r > 2.0 * 1.01 && r < 6.0 * 0.99, "{r}");
    }

    #[test]
    fn grid_blends_between_rows() {
        let g = Grid::fit(vec![(0.0, 0.0, 1.0), (0.0, 1.0, 1.0), (1.0, 0.0, 3.0), (1.0, 1.0, 3.0)]);
        assert!((g.eval(0.5, 0.5) - 2.0).abs() < 1e-12);
        assert_eq!(g.eval(-1.0, 9.0), 1.0);
    }
}
