//! The mixture-of-experts MLP of one layer: router, expert units, expert parallelism.
//!
//! Experts are grouped into at most [`MAX_EXPERT_UNITS`] units per GPU (one expert per
//! unit where there are that few, as in Mixtral). A unit is an up GEMM, the activation
//! and a down GEMM over the tokens routed to its experts; its GEMMs are weight GEMMs
//! like any other (placeable where the layer's weights are resident) and read the
//! weights of the unit's experts that received tokens. Routing is the deterministic
//! balanced split documented on [`Moe`].

use crate::arch::{Moe, MAX_EXPERT_UNITS};
use crate::dag::{LayerBuilder, Ops};
use crate::{OpKind, OpShape, OpSpec};
use smallvec::SmallVec;

/// Tokens routed to each of `experts` experts grouped in `units` contiguous units, for
/// `assignments` token-expert pairs: an even share each, the remainder one each to
/// experts taken slot by slot across the units (unit 0's first expert, unit 1's first,
/// ..., then every unit's second).
pub fn balanced_routing(assignments: u64, experts: u32, units: u32) -> Vec<u64> {
    let e = experts.max(1) as u64;
    let u = units.clamp(1, experts.max(1)) as u64;
    let mut out = vec![assignments / e; e as usize];
    let mut rem = assignments % e;
    let start = |k: u64| k * e / u;
    let widest = (0..u).map(|k| start(k + 1) - start(k)).max().unwrap_or(0);
    'fill: for slot in 0..widest {
        for k in 0..u {
            if rem == 0 {
                break 'fill;
            }
            if start(k) + slot < start(k + 1) {
                out[(start(k) + slot) as usize] += 1;
                rem -= 1;
            }
        }
    }
    out
}

impl Ops<'_> {
    /// Router, expert units (dispatched and combined by all-to-all under expert
    /// parallelism, else all-reduced like a dense MLP); the outputs and the extra
    /// elements the residual add reads to sum each token's `top_k` expert outputs.
    pub(crate) fn moe_mlp(&self, l: &mut LayerBuilder, input: u16, moe: Moe) -> (SmallVec<[u16; 2]>, u64) {
        let (h, tok, b, t) = (self.m.hidden_size, self.tok, self.b(), self.t());
        let ep = moe.expert_parallel && self.tp > 1;
        let local = if ep { moe.experts / self.tp } else { moe.experts };
        let width = if ep { moe.expert_intermediate } else { moe.expert_intermediate / t };
        let up_n = if self.m.gated_mlp { 2 * width } else { width };
        let assignments = tok * moe.top_k as u64;
        // Under expert parallelism each GPU serves an even share of the assignments.
        let here = if ep { assignments.div_ceil(t) } else { assignments };
        let units = local.min(MAX_EXPERT_UNITS);
        let routed = balanced_routing(here, local, units);

        let router = l.push(self.gemm(OpKind::Router, tok, moe.experts as u64, h, false), &[input]);
        let feed: SmallVec<[u16; 2]> = if ep {
            let dispatch = l.push(self.collective(OpKind::AllToAll, here * h * b), &[input, router]);
            smallvec::smallvec![dispatch]
        } else {
            smallvec::smallvec![input, router]
        };
        let bias = self.m.biases.mlp;
        let mut downs: SmallVec<[u16; 16]> = SmallVec::new();
        for k in 0..units as usize {
            let (lo, hi) = (k * local as usize / units as usize, (k + 1) * local as usize / units as usize);
            let m = routed[lo..hi].iter().sum::<u64>();
            let active = routed[lo..hi].iter().filter(|&&x| x > 0).count() as u64;
            // A unit no token reached launches nothing (unit 0 stays, to keep the layer whole).
            if m == 0 && k > 0 {
                continue;
            }
            let up = l.push(self.expert_gemm(OpKind::ExpertUp, m, up_n, h, active, bias), &feed);
            let act = l.push(self.activation(m, width), &[up]);
            downs.push(l.push(self.expert_gemm(OpKind::ExpertDown, m, h, width, active, bias), &[act]));
        }
        let combine_extra = moe.top_k.saturating_sub(1) as u64 * tok * h;
        if ep {
            let back = l.push(self.collective(OpKind::AllToAll, here * h * b), &downs);
            // Each GPU combined its share of the tokens; the residual stream is replicated.
            let gather = l.push(self.collective(OpKind::AllGather, tok * h * b), &[back]);
            (smallvec::smallvec![gather], combine_extra / t)
        } else if self.tp > 1 {
            (smallvec::smallvec![l.push(self.collective(OpKind::AllReduce, tok * h * b), &downs)], combine_extra)
        } else {
            (downs.into_iter().collect(), combine_extra)
        }
    }

    /// A unit's GEMM: `m` routed tokens through `active` experts' `[k, n]` weights.
    fn expert_gemm(&self, kind: OpKind, m: u64, n: u64, k: u64, active: u64, bias: bool) -> OpSpec {
        let b = self.b();
        let w = active * (k * n + if bias { n } else { 0 });
        OpSpec {
            kind,
            shape: OpShape::Gemm { m, n, k },
            flops: 2 * m * n * k + if bias { m * n } else { 0 },
            bytes: (m * k + m * n + w) * b,
            weight_bytes: w * b,
            out_bytes: m * n * b,
            tp: self.tp.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_is_balanced_and_spread() {
        // One Qwen3 decode token: 8 experts, one in each of 8 units.
        let r = balanced_routing(8, 128, 16);
        assert_eq!(r.iter().sum::<u64>(), 8);
        let units: Vec<usize> = (0..128).filter(|&e| r[e] > 0).map(|e| e / 8).collect();
        assert_eq!(units, (0..8).collect::<Vec<_>>());
        // Many tokens: every expert within one of the mean.
        let r = balanced_routing(1000 * 8, 128, 16);
        assert_eq!(r.iter().sum::<u64>(), 8000);
        assert!(r.iter().all(|&x| x == 62 || x == 63), "{r:?}");
        // Uneven units still place every assignment.
        assert_eq!(balanced_routing(7, 60, 16).iter().sum::<u64>(), 7);
        assert_eq!(balanced_routing(3, 8, 8), vec![1, 1, 1, 0, 0, 0, 0, 0]);
    }
}
