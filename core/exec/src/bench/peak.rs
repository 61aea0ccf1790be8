//! What this machine can do at most, measured: the FMA rate of one core and the rate
//! at which one core streams memory. The executor's GEMMs are set against these.

use super::Timer;
use std::hint::black_box;

/// Independent FMA chains: more than latency × ports (4 × 2) so the loop is bound by
/// throughput alone.
const CHAINS: usize = 10;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(1.0); CHAINS];
    let (b, c) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, b, c);
        }
    }
    let mut s = _mm256_setzero_ps();
    for a in acc {
        s = _mm256_add_ps(s, a);
    }
    let mut out = [0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), s);
    out.iter().sum()
}

/// Without AVX2+FMA: a multiply and an add per lane, vectorised by the compiler.
fn mul_add_portable(iters: usize) -> f32 {
    let mut acc = [[1f32; 8]; CHAINS];
    let (b, c) = (black_box(0.999_999f32), black_box(1e-7f32));
    for _ in 0..iters {
        for a in acc.iter_mut() {
            for v in a.iter_mut() {
                *v = *v * b + c;
            }
        }
    }
    acc.iter().flatten().sum()
}

/// The best single-core f32 rate of fused multiply-adds (GFLOP/s), and what it used.
pub fn fma_peak_gflops() -> (f64, &'static str) {
    let iters = 20_000_000 / CHAINS;
    let flops = (iters * CHAINS * 8 * 2) as f64;
    let mut best = 0.0f64;
    let mut what = "portable mul+add";
    for _ in 0..3 {
        let t = Timer::start();
        #[cfg(target_arch = "x86_64")]
        let r = if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            what = "AVX2 FMA";
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            unsafe { fma_avx2(black_box(iters)) }
        } else {
            mul_add_portable(black_box(iters))
        };
        #[cfg(not(target_arch = "x86_64"))]
        let r = mul_add_portable(black_box(iters));
        black_box(r);
        best = best.max(flops / t.ns().max(1) as f64);
    }
    (best, what)
}

#[inline(always)]
fn sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; 32];
    for c in v.chunks_exact(32) {
        for i in 0..32 {
            acc[i] += c[i];
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(v: &[f32]) -> f32 {
    sum(v)
}

/// The best rate one core reads a buffer far larger than its caches (GB/s).
pub fn read_bandwidth_gbs(mib: usize) -> f64 {
    let v: Vec<f32> = (0..mib << 18).map(|i| (i & 255) as f32).collect();
    let mut best = 0.0f64;
    for _ in 0..4 {
        let t = Timer::start();
        #[cfg(target_arch = "x86_64")]
        let r = if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { sum_avx2(black_box(&v)) }
        } else {
            sum(black_box(&v))
        };
        #[cfg(not(target_arch = "x86_64"))]
        let r = sum(black_box(&v));
        black_box(r);
        best = best.max((v.len() * 4) as f64 / t.ns().max(1) as f64);
    }
    best
}
