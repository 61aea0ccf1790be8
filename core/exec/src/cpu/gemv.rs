//! Small-M matmuls (decode steps, short chunks): `y[r] = W · x[r]` straight from the
//! bf16 weights. Packing a panel for `matrixmultiply` widens every weight to f32 per
//! call and then does almost no arithmetic on it, so a 1-token GEMM ran at the rate of
//! the widening; here each weight row is read once, widened in registers, and dotted
//! with every x row while it sits in L1, which is what memory bandwidth allows.
//!
//! The same code is compiled twice (baseline SSE2 and AVX2) and picked at run time.
//! Both keep one fixed order of additions (LANES partial sums, then summed in order)
//! and neither contracts into FMA, so the result is bit-identical on every x86-64 CPU:
//! a tenant's tokens do not depend on which device's CPU ran them.

use half::bf16;

/// Independent partial sums per dot product: enough adds in flight to hide their
/// latency (4 AVX2 vectors), and the fixed order of the final reduction.
const LANES: usize = 32;

/// Up to this many rows of x a GEMM takes this path (a GEMV per row). Measured with
/// `slicesched bench exec`: at tiny-model widths (k 256..1024) the panel path overtakes
/// it only past ~16 rows (see the README's executor benchmarks).
pub(crate) const GEMV_MAX_M: usize = 8;

#[inline(always)]
fn widen(w: u16) -> f32 {
    // bf16 is the top half of an f32: exact for every value, NaN and inf included.
    f32::from_bits((w as u32) << 16)
}

#[inline(always)]
fn dot(x: &[f32], w: &[u16]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut xs = x.chunks_exact(LANES);
    let mut ws = w.chunks_exact(LANES);
    for (xc, wc) in (&mut xs).zip(&mut ws) {
        for i in 0..LANES {
            acc[i] += xc[i] * widen(wc[i]);
        }
    }
    let mut tail = 0f32;
    for (a, b) in xs.remainder().iter().zip(ws.remainder()) {
        tail += a * widen(*b);
    }
    let mut s = 0f32;
    for a in acc {
        s += a;
    }
    s + tail
}

#[inline(always)]
fn body(x: &[f32], w: &[u16], y: &mut [f32], m: usize, n: usize, k: usize) {
    for j in 0..n {
        let row = &w[j * k..(j + 1) * k];
        for r in 0..m {
            y[r * n + j] = dot(&x[r * k..(r + 1) * k], row);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn body_avx2(x: &[f32], w: &[u16], y: &mut [f32], m: usize, n: usize, k: usize) {
    body(x, w, y, m, n, k)
}

/// `y[m×n] = x[m×k] · w[n×k]ᵀ`; x is already f32, w bf16. Slices are checked by the caller.
pub(crate) fn gemv(x: &[f32], w: &[bf16], y: &mut [f32], m: usize, n: usize, k: usize) {
    let w: &[u16] = bytemuck::cast_slice(w);
    let (x, w, y) = (&x[..m * k], &w[..n * k], &mut y[..m * n]);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); the body is safe code.
        return unsafe { body_avx2(x, w, y, m, n, k) };
    }
    body(x, w, y, m, n, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_builds_agree_bit_for_bit_and_match_a_plain_sum() {
        let (m, n, k) = (3, 17, 101);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 97) as f32 - 48.0) / 40.0)).collect();
        let mut a = vec![0.0; m * n];
        gemv(&x, &w, &mut a, m, n, k);
        let mut b = vec![0.0; m * n];
        body(&x, bytemuck::cast_slice(&w), &mut b, m, n, k);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        for r in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|i| x[r * k + i] as f64 * w[j * k + i].to_f64()).sum();
                assert!((a[r * n + j] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()), "{r},{j}");
            }
        }
    }
}
