//! The generator's one random stream: SplitMix64, whose output is fixed by its
//! definition, so a seed's mix never changes with a dependency's version.

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // Seeds 1, 2, 3... are far apart after the first mix; no need to pre-hash.
        Rng(seed ^ 0x5EED_5CE7_A710_0000)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in [lo, hi) on a log scale (rates, lengths: spread over orders of magnitude).
    pub fn log_range(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.unit()).exp()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// An index drawn with probability proportional to its weight.
    pub fn weighted(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len().saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range_and_follow_weights() {
        let mut r = Rng::new(3);
        let mut counts = [0u32; 3];
        for _ in 0..30_000 {
            let x = r.range(2.0, 5.0);
            assert!((2.0..5.0).contains(&x));
            let y = r.log_range(10.0, 1000.0);
            assert!((10.0..1000.0).contains(&y));
            counts[r.weighted(&[1.0, 2.0, 0.0])] += 1;
        }
        assert_eq!(counts[2], 0);
        assert!((counts[1] as f64 / counts[0] as f64 - 2.0).abs() < 0.15, "{counts:?}");
    }
}
