//! Carrying the fit to a GPU that was never profiled, from its datasheet.
//!
//! The exact-shape curves of a profiled GPU hold its own tile and wave quantization at
//! each token count; on another SKU (another SM count, another ridge point) those
//! steps fall elsewhere, so they are not carried. What carries is the class model:
//!
//! - GEMMs: `t = t0 + ((Tm/em)^p + (Tc/ec)^p)^(1/p)` with `Tm = bytes/bw`,
//!   `Tc = flops/peak` of the target: a launch floor (a number of cycles, so scaled by
//!   the target's clock), the bandwidth and the peak fractions it reaches, and how sharply the two regimes join around the target's
//!   own ridge point. Fitted on every profiled GPU at once (each point against its own
//!   datasheet).
//! - Norms, pointwise ops and gathers: on the A100 they reach 30–90% of HBM bandwidth
//!   with fixed floors, i.e. they are bound by the SM array's issue rate and latency,
//!   not by HBM. Their profiled time is carried by the ratio of SMs × clock (by the
//!   clock alone for kernels with fewer per-token blocks than SMs), never faster than
//!   the target's HBM allows.
//! - Attention: the profiled efficiency grids (per profiled head configuration, pooled
//!   for others) applied to the target's roofline.

use slicesched_hw::GpuSku;

/// The GEMM class model (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GemmClass {
    /// The floor in seconds at `ref_clock`.
    pub t0: f64,
    /// Clock (GHz) of the GPUs `t0` was fitted on; 0 where none was known.
    pub ref_clock: f64,
    pub em: f64,
    pub ec: f64,
    pub p: f64,
}

impl Default for GemmClass {
    /// Without profiles: typical cuBLAS figures (80% of HBM, 70% of peak, 5 µs floor).
    fn default() -> Self {
        Self { t0: 5e-6, ref_clock: 0.0, em: 0.8, ec: 0.7, p: 2.0 }
    }
}

/// One profiled GEMM: FLOPs, bytes, the GPU's peak and bandwidth, measured seconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemmPoint {
    pub flops: f64,
    pub bytes: f64,
    pub peak: f64,
    pub bw: f64,
    /// The GPU's clock, GHz (0 where unknown).
    pub clock: f64,
    pub secs: f64,
}

impl GemmClass {
    /// The floor on a GPU clocked at `clock` GHz: a kernel's fixed cost (launch, tile
    /// prologue and epilogue, the last wave's drain) is a number of cycles.
    pub fn floor(&self, clock: f64) -> f64 {
        if self.ref_clock > 0.0 && clock > 0.0 {
            self.t0 * self.ref_clock / clock
        } else {
            self.t0
        }
    }

    /// O(1), no allocation.
    pub fn secs(&self, flops: f64, bytes: f64, peak: f64, bw: f64, clock: f64) -> f64 {
        let tm = bytes / (self.em * bw);
        let tc = flops / (self.ec * peak);
        let t0 = self.floor(clock);
        // Scale before the power so tiny terms do not underflow.
        let hi = tm.max(tc);
        if hi <= 0.0 {
            return t0;
        }
        let s = ((tm / hi).powf(self.p) + (tc / hi).powf(self.p)).powf(1.0 / self.p);
        t0 + hi * s
    }

    /// Grid search minimising the mean |ln(pred/meas)|: four parameters with physical
    /// ranges, a few thousand points, no local minima to fall into.
    pub fn fit(points: &[GemmPoint]) -> Self {
        let pts: Vec<&GemmPoint> = points.iter().filter(|p| p.secs > 0.0).collect();
        if pts.len() < 8 {
            return Self::default();
        }
        // A stride keeps the search well under a second on the full profiles.
        let stride = (pts.len() / 1500).max(1);
        let clocked: Vec<f64> = pts.iter().map(|p| p.clock).filter(|&c| c > 0.0).collect();
        let ref_clock =
            if clocked.len() == pts.len() { clocked.iter().sum::<f64>() / clocked.len() as f64 } else { 0.0 };
        // (bytes/bw, flops/peak, ln secs, floor scale) per point: the search evaluates
        // each point thousands of times.
        let sample: Vec<(f64, f64, f64, f64)> = pts
            .iter()
            .step_by(stride)
            .map(|p| {
                let scale = if ref_clock > 0.0 { ref_clock / p.clock } else { 1.0 };
                (p.bytes / p.bw, p.flops / p.peak, p.secs.ln(), scale)
            })
            .collect();
        let loss = |c: &GemmClass| -> f64 {
            let (inv_p, ie, ic) = (1.0 / c.p, 1.0 / c.em, 1.0 / c.ec);
            sample
                .iter()
                .map(|&(m, f, ls, scale)| {
                    let (tm, tc) = (m * ie, f * ic);
                    let hi = tm.max(tc);
                    let t = c.t0 * scale + hi * ((tm / hi).powf(c.p) + (tc / hi).powf(c.p)).powf(inv_p);
                    (t.ln() - ls).abs()
                })
                .sum::<f64>()
        };
        let mut best = (f64::INFINITY, Self::default());
        for t0 in [0.0, 2e-6, 4e-6, 6e-6, 8e-6] {
            for p in [1.0, 1.5, 2.0, 3.0, 5.0] {
                for em in (0..=8).map(|i| 0.55 + 0.05 * i as f64) {
                    for ec in (0..=8).map(|i| 0.55 + 0.05 * i as f64) {
                        let c = GemmClass { t0, ref_clock, em, ec, p };
                        let l = loss(&c);
                        if l < best.0 {
                            best = (l, c);
                        }
                    }
                }
            }
        }
        // Refine the fractions around the best grid point.
        let mut c = best.1;
        for _ in 0..2 {
            for step in [0.02, 0.01] {
                for (dem, dec) in [(step, 0.0), (-step, 0.0), (0.0, step), (0.0, -step)] {
                    let t = GemmClass { em: c.em + dem, ec: c.ec + dec, ..c };
                    if t.em > 0.0 && t.ec > 0.0 && loss(&t) < loss(&c) {
                        c = t;
                    }
                }
            }
        }
        c
    }
}

/// How much faster `to` runs the streaming kernels than `from`: the ratio of SMs ×
/// clock where both are known, else the HBM bandwidth ratio.
pub(crate) fn streaming_speedup(from: &GpuSku, to: &GpuSku) -> f64 {
    let issue = |s: &GpuSku| s.sm_count as f64 * s.clock_ghz;
    if issue(from) > 0.0 && issue(to) > 0.0 {
        issue(to) / issue(from)
    } else {
        to.hbm_bw / from.hbm_bw
    }
}

/// [`streaming_speedup`] for a kernel of `rows` thread blocks (one per token, as the
/// serving engines' norm, activation and rotary kernels launch them): fewer blocks than
/// SMs leave the wider GPU's extra SMs idle, so only the clock speeds them up.
pub(crate) fn streaming_speedup_rows(from: &GpuSku, to: &GpuSku, rows: f64) -> f64 {
    if from.sm_count == 0 || to.sm_count == 0 || from.clock_ghz <= 0.0 || to.clock_ghz <= 0.0 {
        return streaming_speedup(from, to);
    }
    let waves = |s: &GpuSku| (rows / s.sm_count as f64).max(1.0);
    to.clock_ghz / from.clock_ghz * waves(from) / waves(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_model_recovers_its_own_parameters() {
        let truth = GemmClass { t0: 4e-6, ref_clock: 1.41, em: 0.8, ec: 0.7, p: 2.0 };
        let pts: Vec<GemmPoint> = (0..200)
            .map(|i| {
                let m = (1u64 << (i % 13)) as f64;
                let (n, k) = (4096.0 * (1 + i % 3) as f64, 4096.0);
                let (flops, bytes) = (2.0 * m * n * k, 2.0 * (m * k + k * n + m * n));
                GemmPoint {
                    flops,
                    bytes,
                    peak: 312e12,
                    bw: 2.039e12,
                    clock: 1.41,
                    secs: truth.secs(flops, bytes, 312e12, 2.039e12, 1.41),
                }
            })
            .collect();
        let c = GemmClass::fit(&pts);
        assert!((c.em - 0.8).abs() < 0.02 && (c.ec - 0.7).abs() < 0.02 && c.p == 2.0, "{c:?}");
    }

    #[test]
    fn few_rows_speed_up_by_the_clock_only() {
        let (a, h) = (slicesched_hw::sku("A100").unwrap(), slicesched_hw::sku("H100").unwrap());
        let clock = h.clock_ghz / a.clock_ghz;
        assert!((streaming_speedup_rows(&a, &h, 16.0) - clock).abs() < 1e-12);
        let full = streaming_speedup_rows(&a, &h, 1e6);
        assert!((full - streaming_speedup(&a, &h)).abs() < 1e-9 && full > clock);
    }

    #[test]
    fn regimes_join_at_the_ridge() {
        let c = GemmClass { t0: 0.0, ref_clock: 0.0, em: 1.0, ec: 1.0, p: 1e3 };
        assert!((c.secs(312e12, 1.0, 312e12, 1e12, 1.0) - 1.0).abs() < 1e-9);
        assert!((c.secs(1.0, 2e12, 312e12, 1e12, 1.0) - 2.0).abs() < 1e-9);
        assert_eq!(GemmClass::default().secs(0.0, 0.0, 1.0, 1.0, 2.0), 5e-6);
        // The floor is cycles: twice the clock, half the floor.
        let c = GemmClass { t0: 6e-6, ref_clock: 1.5, ..c };
        assert!((c.secs(0.0, 0.0, 1.0, 1.0, 3.0) - 3e-6).abs() < 1e-15);
    }
}
