//! Piecewise-linear curves and the small fitting helpers the cost model is built from.

/// `y(x)` through sorted knots, flat outside them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Curve {
    xs: Vec<f64>,
    ys: Vec<f64>,
}

impl Curve {
    /// Knots from `(x, y)` pairs in any order; pairs sharing an `x` are averaged so the
    /// same shape profiled twice (another TP degree, another model) counts once.
    pub fn from_points(mut pts: Vec<(f64, f64)>) -> Self {
        pts.retain(|p| p.0.is_finite() && p.1.is_finite());
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut c = Curve::default();
        let mut i = 0;
        while i < pts.len() {
            let mut j = i;
            let mut sum = 0.0;
            while j < pts.len() && pts[j].0 == pts[i].0 {
                sum += pts[j].1;
                j += 1;
            }
            c.xs.push(pts[i].0);
            c.ys.push(sum / (j - i) as f64);
            i = j;
        }
        c
    }

    /// O(log n), no allocation: this runs on the simulator's hot path.
    pub fn eval(&self, x: f64) -> f64 {
        let n = self.xs.len();
        if n == 0 {
            return 0.0;
        }
        if x <= self.xs[0] {
            return self.ys[0];
        }
        if x >= self.xs[n - 1] {
            return self.ys[n - 1];
        }
        let i = self.xs.partition_point(|&k| k <= x);
        let (x0, x1, y0, y1) = (self.xs[i - 1], self.xs[i], self.ys[i - 1], self.ys[i]);
        y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    }
}

/// Isotonic (non-decreasing) least-squares fit of `ys` in place, pool-adjacent-violators.
/// Kernel times are monotone in problem size up to run-to-run noise; pooling the noise
/// away keeps predictions monotone without smoothing real steps.
pub(crate) fn isotonic(ys: &mut [f64]) {
    let mut blocks: Vec<(f64, usize)> = Vec::with_capacity(ys.len());
    for &y in ys.iter() {
        blocks.push((y, 1));
        while blocks.len() > 1 {
            let (b, nb) = blocks[blocks.len() - 1];
            let (a, na) = blocks[blocks.len() - 2];
            if a <= b {
                break;
            }
            blocks.pop();
            let n = na + nb;
            *blocks.last_mut().unwrap() = ((a * na as f64 + b * nb as f64) / n as f64, n);
        }
    }
    let mut i = 0;
    for (v, n) in blocks {
        ys[i..i + n].fill(v);
        i += n;
    }
}

/// Curve through per-bin medians of `(x, y)` points, bins `width` wide in `x`: the pooled
/// fallbacks have thousands of noisy points from many shapes.
pub(crate) fn binned_median(mut pts: Vec<(f64, f64)>, width: f64) -> Curve {
    pts.retain(|p| p.0.is_finite() && p.1.is_finite());
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut knots = Vec::new();
    let mut i = 0;
    while i < pts.len() {
        let edge = (pts[i].0 / width).floor();
        let mut j = i;
        while j < pts.len() && (pts[j].0 / width).floor() == edge {
            j += 1;
        }
        let x = pts[i..j].iter().map(|p| p.0).sum::<f64>() / (j - i) as f64;
        let mut ys: Vec<f64> = pts[i..j].iter().map(|p| p.1).collect();
        knots.push((x, median(&mut ys)));
        i = j;
    }
    Curve::from_points(knots)
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    quantile(v, 0.5)
}

/// Linear-interpolated quantile; sorts `v`.
pub(crate) fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// The weighted sums of a least-squares line fit `y ≈ a + b·x`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LineSums {
    pub sw: f64,
    pub sx: f64,
    pub sy: f64,
    pub sxx: f64,
    pub sxy: f64,
}

impl LineSums {
    pub fn add(&mut self, x: f64, y: f64, w: f64) {
        self.sw += w;
        self.sx += w * x;
        self.sy += w * y;
        self.sxx += w * x * x;
        self.sxy += w * x * y;
    }
}

/// `y ≈ a + b·x` minimising relative error (weights 1/y²): small messages matter as much
/// as big ones. Returns `(a, b)`, both clamped non-negative.
pub(crate) fn fit_line_rel(pts: &[(f64, f64)]) -> Option<(f64, f64)> {
    let mut l = LineSums::default();
    for &(x, y) in pts.iter().filter(|p| p.1 > 0.0) {
        l.add(x, y, 1.0 / (y * y));
    }
    let LineSums { sw, sx, sy, sxx, sxy } = l;
    let det = sw * sxx - sx * sx;
    if pts.len() < 2 || det.abs() < f64::MIN_POSITIVE {
        return None;
    }
    let b = (sw * sxy - sx * sy) / det;
    let a = (sy - b * sx) / sw;
    Some((a.max(0.0), b.max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_interpolates_and_clamps() {
        let c = Curve::from_points(vec![(2.0, 20.0), (0.0, 0.0), (1.0, 10.0), (1.0, 12.0)]);
        assert_eq!(c.eval(-1.0), 0.0);
        assert_eq!(c.eval(1.0), 11.0);
        assert!((c.eval(1.5) - 15.5).abs() < 1e-12);
        assert_eq!(c.eval(5.0), 20.0);
        assert_eq!(Curve::default().eval(3.0), 0.0);
    }

    #[test]
    fn isotonic_pools_violators() {
        let mut v = [1.0, 3.0, 2.0, 4.0, 0.0];
        isotonic(&mut v);
        assert_eq!(v, [1.0, 2.25, 2.25, 2.25, 2.25]);
    }

    #[test]
    fn line_fit_recovers_exact_line() {
        let pts: Vec<_> = (1..20).map(|i| (i as f64, 3.0 + 0.5 * i as f64)).collect();
        let (a, b) = fit_line_rel(&pts).unwrap();
        assert!((a - 3.0).abs() < 1e-9 && (b - 0.5).abs() < 1e-9);
    }

    #[test]
    fn quantiles() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        assert_eq!(median(&mut v), 2.5);
        assert_eq!(quantile(&mut v, 1.0), 4.0);
    }
}
