//! Mooncake FAST'25 traces: JSON lines with `timestamp` (ms), `input_length`,
//! `output_length` and `hash_ids` (512-token prefix blocks).
//!
//! The released timestamps are quantised to ~3 s buckets, so many requests share one
//! value; [`spread_buckets`] restores a plausible spacing without reordering.

use crate::common::{finish, row_err, MAX_TOKENS};
use crate::{Loaded, Request, Skipped, TraceError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use std::io::BufRead;

/// Bucket width of the released traces, used when no later timestamp bounds a bucket.
pub const DEFAULT_BUCKET_NS: u64 = 3_000_000_000;

pub fn parse<R: BufRead>(mut r: R, label: &str) -> Result<Loaded, TraceError> {
    let mut rows = Vec::new();
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        let n = r
            .read_until(b'\n', &mut buf)
            .map_err(|e| TraceError::File { path: label.to_string(), msg: format!("read error: {e}") })?;
        if n == 0 {
            break;
        }
        line += 1;
        let text = buf.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_slice(text).map_err(|e| row_err(label, line, "<json>", format!("invalid JSON: {e}")))?;
        rows.push(row(&v, label, line)?);
    }
    let skipped = Skipped { rows_read: rows.len() as u64, ..Default::default() };
    Ok(Loaded { requests: finish(rows), skipped })
}

fn row(v: &Value, label: &str, line: u64) -> Result<(i64, Request), TraceError> {
    let obj = v.as_object().ok_or_else(|| row_err(label, line, "<json>", "line is not a JSON object"))?;
    let get = |f: &str| obj.get(f).ok_or_else(|| row_err(label, line, f, "missing field"));
    let ts = get("timestamp")?;
    let ms = ts
        .as_f64()
        .filter(|m| m.is_finite() && *m >= 0.0)
        .ok_or_else(|| row_err(label, line, "timestamp", format!("want milliseconds >= 0, got {ts}")))?;
    if ms > 1e14 {
        return Err(row_err(label, line, "timestamp", format!("absurd timestamp {ms} ms")));
    }
    let t = (ms * 1e6).round() as i64;
    let p = count(get("input_length")?, "input_length", label, line)?;
    let o = count(get("output_length")?, "output_length", label, line)?;
    let mut req = Request::new(0, p, o);
    if let Some(h) = obj.get("hash_ids") {
        let arr = h.as_array().ok_or_else(|| row_err(label, line, "hash_ids", "want an array of block ids"))?;
        req.hash_ids = arr
            .iter()
            .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| row_err(label, line, "hash_ids", "block ids must be integers in 0..2^32"))?;
    }
    Ok((t, req))
}

fn count(v: &Value, field: &str, label: &str, line: u64) -> Result<u32, TraceError> {
    if let Some(n) = v.as_i64() {
        if n <= 0 {
            return Err(row_err(label, line, field, format!("token count must be > 0, got {n}")));
        }
        if n > MAX_TOKENS {
            return Err(row_err(label, line, field, format!("absurd token count {n} (> {MAX_TOKENS})")));
        }
        return Ok(n as u32);
    }
    Err(row_err(label, line, field, format!("want an integer token count, got {v}")))
}

/// Spreads requests that share an arrival time over `[t, t + w)`, where `w` is the gap
/// to the next distinct time capped at `bucket_ns` (a long idle gap after a bucket is
/// real idleness, not quantisation). Offsets are sorted, so order within a bucket is
/// kept. Each bucket's RNG is seeded from (`seed`, t), so a bucket's spacing does not
/// depend on which other rows were kept. `reqs` must be sorted by arrival.
pub fn spread_buckets(reqs: &mut [Request], seed: u64, bucket_ns: u64) {
    let mut i = 0;
    while i < reqs.len() {
        let t = reqs[i].arrival_ns;
        let j = i + reqs[i..].iter().take_while(|r| r.arrival_ns == t).count();
        let next = reqs.get(j).map_or(u64::MAX, |r| r.arrival_ns);
        let width = (next - t).min(bucket_ns);
        if j - i > 1 && width > 1 {
            let mut rng = ChaCha8Rng::seed_from_u64(crate::transform::mix(seed, t));
            let mut offs: Vec<u64> = (i..j).map(|_| rng.random_range(0..width)).collect();
            offs.sort_unstable();
            for (r, o) in reqs[i..j].iter_mut().zip(offs) {
                r.arrival_ns = t + o;
            }
        }
        i = j;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts: &[u64]) -> Vec<Request> {
        ts.iter().enumerate().map(|(i, &t)| Request::new(t, i as u32 + 1, 1)).collect()
    }

    #[test]
    fn spread_stays_in_bucket_and_keeps_order() {
        let mut r = at(&[0, 0, 0, 1_000, 5_000_000_000, 5_000_000_000]);
        spread_buckets(&mut r, 7, DEFAULT_BUCKET_NS);
        assert!(r[..3].iter().all(|x| x.arrival_ns < 1_000));
        assert_eq!(r[3].arrival_ns, 1_000, "a lone request keeps its time");
        assert!(r[4..].iter().all(|x| (5_000_000_000..8_000_000_000).contains(&x.arrival_ns)));
        assert!(r.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
        let ids: Vec<u32> = r.iter().map(|x| x.prompt_tokens).collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn floats_and_missing_hash_ids_are_accepted() {
        let l = parse(&b"{\"timestamp\": 1.5, \"input_length\": 3, \"output_length\": 2}\n"[..], "m").unwrap();
        assert_eq!(l.requests, vec![Request::new(0, 3, 2)]);
    }

    #[test]
    fn bad_fields_are_named() {
        let e = parse(&b"{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 2, \"hash_ids\": [-1]}"[..], "m");
        assert!(e.unwrap_err().to_string().contains("m:1: field `hash_ids`"));
        let e = parse(&b"\n{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 2}"[..], "m");
        assert!(e.unwrap_err().to_string().contains("m:2: field `input_length`"));
    }
}
