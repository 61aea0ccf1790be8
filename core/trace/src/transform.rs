//! Transforms over sorted request streams: hash split, wrapped window, rate scaling.
//!
//! All take and return requests sorted by arrival; none reorders requests that share
//! an arrival time.

use crate::{Request, TraceError};

/// Outputs above this are a configuration mistake (e.g. a tiny trace looped over a
/// long window), and would exhaust memory before they became useful.
pub const MAX_REQUESTS: u64 = 50_000_000;

/// SplitMix64 finaliser over a pair: stable across platforms and Rust versions, unlike
/// `std`'s `DefaultHasher`, so splits and spreads are reproducible forever.
pub fn mix(seed: u64, x: u64) -> u64 {
    let mut z = seed ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0x632B_E59B_D9B3_E9B7);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Which of `parts` streams row `index` belongs to.
pub fn split_part(salt: u64, index: u64, parts: u32) -> u32 {
    (mix(salt, index) % u64::from(parts.max(1))) as u32
}

/// Keeps the rows whose index hashes to `part`; returns how many were dropped.
pub fn split(reqs: Vec<Request>, salt: u64, parts: u32, part: u32) -> (Vec<Request>, u64) {
    let n = reqs.len() as u64;
    let kept: Vec<Request> = reqs
        .into_iter()
        .enumerate()
        .filter(|(i, _)| split_part(salt, *i as u64, parts) == part)
        .map(|(_, r)| r)
        .collect();
    let dropped = n - kept.len() as u64;
    (kept, dropped)
}

/// The length of one loop of a trace whose last arrival is `last_ns` over `n` rows:
/// the span plus one mean inter-arrival gap, so the first request of the next loop
/// does not land on top of the last one.
pub fn period_ns(n: usize, last_ns: u64) -> u64 {
    if n <= 1 || last_ns == 0 {
        return last_ns.saturating_add(1_000_000_000);
    }
    last_ns.saturating_add((last_ns / (n as u64 - 1)).max(1))
}

/// Takes `[offset, offset + window)` of a trace that repeats every `period` ns,
/// rebased to start at 0. Returns the requests and how many input rows appear in no
/// copy. `reqs` must be sorted with arrivals below `period`.
pub fn window(reqs: &[Request], period: u64, offset: u64, window: u64) -> Result<(Vec<Request>, u64), TraceError> {
    if reqs.is_empty() || window == 0 {
        return Ok((Vec::new(), reqs.len() as u64));
    }
    let period = period.max(1) as u128;
    let offset = offset as u128 % period;
    let window = window as u128;
    let loops = (offset + window).div_ceil(period);
    if loops.saturating_mul(reqs.len() as u128) > MAX_REQUESTS as u128 * 2 {
        return Err(TraceError::Spec(format!(
            "window of {:.0} s loops a {:.3} s trace {loops} times: too many requests",
            window as f64 / 1e9,
            period as f64 / 1e9
        )));
    }
    let mut out = Vec::new();
    let mut used = vec![false; reqs.len()];
    for k in 0..loops {
        for (i, r) in reqs.iter().enumerate() {
            let t = r.arrival_ns as u128 + k * period;
            if t < offset {
                continue;
            }
            let s = t - offset;
            if s >= window {
                break;
            }
            used[i] = true;
            out.push(Request { arrival_ns: s as u64, ..r.clone() });
        }
    }
    if out.len() as u64 > MAX_REQUESTS {
        return Err(TraceError::Spec(format!("window yields {} requests (> {MAX_REQUESTS})", out.len())));
    }
    let unused = used.iter().filter(|u| !**u).count() as u64;
    Ok((out, unused))
}

/// Multiplies the arrival rate by `scale` by dividing every arrival time.
pub fn rate_scale(reqs: &mut [Request], scale: f64) {
    if scale == 1.0 {
        return;
    }
    for r in reqs {
        // f64 keeps ~0.1 µs precision up to a year of trace time: ample for arrivals.
        r.arrival_ns = (r.arrival_ns as f64 / scale).round() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts: &[u64]) -> Vec<Request> {
        ts.iter().map(|&t| Request::new(t, 1, 1)).collect()
    }

    fn times(r: &[Request]) -> Vec<u64> {
        r.iter().map(|x| x.arrival_ns).collect()
    }

    #[test]
    fn window_wraps_past_the_end() {
        let r = at(&[0, 10, 20, 30]); // period 40
        let p = period_ns(4, 30);
        assert_eq!(p, 40);
        let (w, unused) = window(&r, p, 25, 30).unwrap();
        assert_eq!(times(&w), vec![5, 15, 25]); // 30, 0+40, 10+40
        assert_eq!(unused, 1);
        let (w, _) = window(&r, p, 0, 100).unwrap();
        assert_eq!(times(&w), vec![0, 10, 20, 30, 40, 50, 60, 70, 80, 90]);
    }

    #[test]
    fn offset_beyond_period_is_reduced() {
        let r = at(&[0, 10, 20, 30]);
        assert_eq!(window(&r, 40, 105, 20).unwrap().0, window(&r, 40, 25, 20).unwrap().0);
    }

    #[test]
    fn huge_loops_are_refused() {
        let r = at(&[0, 1]);
        assert!(window(&r, 2, 0, u64::MAX).is_err());
    }

    #[test]
    fn split_is_a_partition() {
        let n = 1000;
        let mut seen = vec![0; n];
        for part in 0..3 {
            for (i, c) in seen.iter_mut().enumerate() {
                *c += u32::from(split_part(9, i as u64, 3) == part);
            }
        }
        assert!(seen.iter().all(|&c| c == 1));
    }
}
