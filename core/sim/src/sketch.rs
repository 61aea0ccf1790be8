//! Latency quantiles in bounded memory, for what runs for ever (a live server).
//!
//! A replay keeps every value and reads nearest-rank quantiles off them exactly; a live
//! server cannot keep every request's or every idle gap's value for as long as it
//! serves. A [`Sketch`] is an HDR histogram with three significant digits: a quantile
//! it reports is within 0.1% of the exact nearest-rank one, and its size follows the
//! range of the values (a few hundred KiB at most for ns up to an hour), not their count.

use hdrhistogram::Histogram;

const SIGNIFICANT_DIGITS: u8 = 3;

#[derive(Debug, Clone)]
pub(crate) struct Sketch(Histogram<u64>);

impl Default for Sketch {
    fn default() -> Self {
        Self(Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is a valid precision"))
    }
}

impl Sketch {
    /// Records `ns` (the histogram grows to hold it; `saturating_record` would not).
    pub fn record(&mut self, ns: u64) {
        if self.0.record(ns).is_err() {
            self.0.saturating_record(ns);
        }
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// Nearest-rank quantile (as [`crate::metrics::quantile_ms`] defines it), ms; 0 when
    /// nothing was recorded.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        // The histogram's own rank rule is nearest-rank on counts; its value is the
        // highest one equivalent to the bucket's (so never below the exact value).
        self.0.value_at_quantile(q) as f64 / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::quantile_ms;

    #[test]
    fn quantiles_stay_within_a_thousandth_of_the_exact_ones() {
        let mut s = Sketch::default();
        // Spread over nine decades like real latencies: 1 µs to ~17 min.
        let mut v: Vec<u64> = (0..20_000u64).map(|i| 1_000 + (i * i * i) % 1_000_000_000_000).collect();
        for &x in &v {
            s.record(x);
        }
        assert_eq!(s.count(), v.len() as u64);
        for q in [0.5, 0.9, 0.99, 0.999] {
            let exact = quantile_ms(&mut v, q);
            let got = s.quantile_ms(q);
            assert!((got - exact).abs() <= exact * 1e-3, "q{q}: {got} ms against {exact} ms");
        }
        assert_eq!(Sketch::default().quantile_ms(0.5), 0.0);
    }
}
