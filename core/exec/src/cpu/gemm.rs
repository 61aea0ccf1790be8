//! Every GEMM of the CPU backend: `y[m×n] = x[m×k] · w[n×k]ᵀ`, x in f32, w in bf16.
//!
//! **Batch invariance.** Each output is summed in one order that depends on `k` alone —
//! not on `m`, not on where the row sits in the batch, not on the CPU — so a request's
//! logits are bit-identical whether its row was a decode of one, one of sixty-four, or a
//! chunk of a prefill (vLLM and SGLang ship the same guarantee as a "batch-invariant"
//! mode; here it is the only mode). The order of `y[r][j]`:
//!
//! 1. lane `l` of 8 accumulates `acc_l = fma(x[r][8b+l], w[j][8b+l], acc_l)` for
//!    `b = 0, 1, …, k/8 − 1`;
//! 2. `s = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7))`;
//! 3. `s = fma(x[r][t], w[j][t], s)` for the tail `t = 8·(k/8) … k − 1`, in order.
//!
//! The AVX2+FMA kernel computes exactly that for a tile of rows × columns (a tile only
//! chooses which outputs are in flight together); [`dot`] computes it for one output,
//! portably (`mul_add` is the correctly rounded FMA everywhere), and is what runs where
//! AVX2+FMA is missing. Before this, decodes of up to 8 rows took a GEMV and larger
//! batches `matrixmultiply`'s panels, whose sums round differently: greedy answers then
//! changed with whatever else shared the batch.

// Tiles index accumulators, weight and x vectors by the same row and column: plain index
// loops read best (as in math.rs).
#![allow(clippy::needless_range_loop)]

use half::bf16;

/// Lanes of one partial-sum vector (an AVX2 register of f32).
const V: usize = 8;

/// Weight rows whose tiles share a pass over a block of x rows (their bf16 rows stay in
/// L2 while every row tile of the block streams through).
const W_BLOCK: usize = 96;

#[inline(always)]
fn widen(w: u16) -> f32 {
    // bf16 is the top half of an f32: exact for every value, NaN and inf included.
    f32::from_bits((w as u32) << 16)
}

/// One output in the order the module defines: the reference every kernel equals.
#[inline]
pub(crate) fn dot(x: &[f32], w: &[u16]) -> f32 {
    let k = x.len().min(w.len());
    let kb = k / V;
    let mut acc = [0f32; V];
    for b in 0..kb {
        for l in 0..V {
            acc[l] = x[b * V + l].mul_add(widen(w[b * V + l]), acc[l]);
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for t in kb * V..k {
        s = x[t].mul_add(widen(w[t]), s);
    }
    s
}

fn portable(x: &[f32], w: &[u16], y: &mut [f32], (m, n, k): (usize, usize, usize)) {
    for j in 0..n {
        let row = &w[j * k..(j + 1) * k];
        for r in 0..m {
            y[r * n + j] = dot(&x[r * k..(r + 1) * k], row);
        }
    }
}

/// `y[m×n] = x[m×k] · w[n×k]ᵀ`. Slices hold at least m·k, n·k and m·n elements.
pub(crate) fn gemm(x: &[f32], w: &[bf16], y: &mut [f32], m: usize, n: usize, k: usize) {
    let w: &[u16] = bytemuck::cast_slice(w);
    let (x, w, y) = (&x[..m * k], &w[..n * k], &mut y[..m * n]);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above); the slices hold the
        // shapes the kernel reads and writes (sliced just above).
        return unsafe { avx2::gemm(x, w, y, (m, n, k)) };
    }
    portable(x, w, y, (m, n, k))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{dot, V, W_BLOCK};
    use std::arch::x86_64::*;

    /// 8 bf16 at `p` widened to f32 (exact).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load_w(p: *const u16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    /// Step 2 of the module's order.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn reduce(a: __m256) -> f32 {
        let v4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a)); // a_i + a_{i+4}
        let v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4)); // (a0+a4)+(a2+a6), (a1+a5)+(a3+a7)
        _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps::<1>(v2, v2)))
    }

    /// R rows of x (from `x`, stride k) against C rows of w (from `w`, stride k) into
    /// y (row stride `ys`): R·C accumulators in registers, one FMA chain per output.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const R: usize, const C: usize>(x: *const f32, w: *const u16, y: *mut f32, k: usize, ys: usize) {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let kb = k / V;
        for b in 0..kb {
            let mut wv = [_mm256_setzero_ps(); C];
            for c in 0..C {
                wv[c] = load_w(w.add(c * k + b * V));
            }
            for r in 0..R {
                let xv = _mm256_loadu_ps(x.add(r * k + b * V));
                for c in 0..C {
                    acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                let mut s = reduce(acc[r][c]);
                for t in kb * V..k {
                    s = (*x.add(r * k + t)).mul_add(super::widen(*w.add(c * k + t)), s);
                }
                *y.add(r * ys + c) = s;
            }
        }
    }

    /// Columns `j0..j1` of rows `r0..r0+R` in tiles of C columns, the last one narrower.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_tile<const R: usize, const C: usize>(
        x: &[f32],
        w: &[u16],
        y: &mut [f32],
        (r0, j0, j1): (usize, usize, usize),
        (n, k): (usize, usize),
    ) {
        let (xp, wp, yp) = (x.as_ptr().add(r0 * k), w.as_ptr(), y.as_mut_ptr().add(r0 * n));
        let mut j = j0;
        while j + C <= j1 {
            tile::<R, C>(xp, wp.add(j * k), yp.add(j), k, n);
            j += C;
        }
        // Fewer than C columns left: one output at a time, the same order.
        for j in j..j1 {
            for r in 0..R {
                y[(r0 + r) * n + j] = dot(&x[(r0 + r) * k..(r0 + r + 1) * k], &w[j * k..(j + 1) * k]);
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gemm(x: &[f32], w: &[u16], y: &mut [f32], (m, n, k): (usize, usize, usize)) {
        for j0 in (0..n).step_by(W_BLOCK) {
            let j1 = (j0 + W_BLOCK).min(n);
            let mut r = 0;
            while r + 4 <= m {
                row_tile::<4, 3>(x, w, y, (r, j0, j1), (n, k));
                r += 4;
            }
            match m - r {
                3 => row_tile::<3, 4>(x, w, y, (r, j0, j1), (n, k)),
                2 => row_tile::<2, 6>(x, w, y, (r, j0, j1), (n, k)),
                1 => row_tile::<1, 8>(x, w, y, (r, j0, j1), (n, k)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<bf16>) {
        let x = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let w = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 97) as f32 - 48.0) / 40.0)).collect();
        (x, w)
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn the_kernel_equals_the_portable_order_bit_for_bit_and_a_plain_sum() {
        for (m, n, k) in [(1, 17, 101), (3, 17, 101), (5, 200, 64), (9, 7, 3), (13, 101, 259)] {
            let (x, w) = data(m, n, k);
            let mut a = vec![0.0; m * n];
            gemm(&x, &w, &mut a, m, n, k);
            let mut b = vec![0.0; m * n];
            portable(&x, bytemuck::cast_slice(&w), &mut b, (m, n, k));
            assert_eq!(bits(&a), bits(&b), "{m}×{n}×{k}");
            for r in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|i| x[r * k + i] as f64 * w[j * k + i].to_f64()).sum();
                    assert!((a[r * n + j] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()), "{r},{j}");
                }
            }
        }
    }

    #[test]
    fn a_row_gives_the_same_bits_alone_and_anywhere_in_any_batch() {
        let (n, k) = (131, 300);
        let (x, w) = data(24, n, k);
        let mut alone = vec![0.0; n];
        for r in [0, 5, 23] {
            gemm(&x[r * k..(r + 1) * k], &w, &mut alone, 1, n, k);
            for m in [r + 1, 24] {
                let mut all = vec![0.0; m * n];
                gemm(&x, &w, &mut all, m, n, k);
                assert_eq!(bits(&alone), bits(&all[r * n..(r + 1) * n]), "row {r} in a batch of {m}");
            }
        }
    }
}
