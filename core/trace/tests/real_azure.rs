//! The real Azure 2023 code trace, from the repository copy in `data/traces/`.

use slicesched_trace::{load_file, reason, Format, Split, TraceKind, TraceSpec};
use std::path::{Path, PathBuf};

fn traces() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/traces")
}

fn spec() -> TraceSpec {
    let mut s = TraceSpec::new(TraceKind::Azure);
    s.path = Some("azure2023_code.csv".into());
    s
}

#[test]
fn whole_trace() {
    let l = load_file(&traces().join("azure2023_code.csv"), Format::Azure).unwrap();
    let r = &l.requests;
    assert_eq!(r.len(), 8_819);
    assert_eq!(l.skipped.total(), 0);
    assert_eq!(r[0].arrival_ns, 0);
    assert!(r.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
    // 18:17:03.9799600 to 19:14:19.9280160.
    assert_eq!(r.last().unwrap().arrival_ns, 3_435_948_056_000);
    let hours = r.last().unwrap().arrival_ns as f64 / 3.6e12;
    assert!((hours - 0.95).abs() < 0.01, "{hours}");
    assert_eq!(r.iter().map(|x| x.prompt_tokens).max(), Some(7_437));
    assert_eq!((r[0].prompt_tokens, r[0].output_tokens), (4808, 10));
}

#[test]
fn spec_whole_trace_matches_raw_parse() {
    let raw = load_file(&traces().join("azure2023_code.csv"), Format::Azure).unwrap();
    let l = spec().load(&traces(), 3, f64::INFINITY).unwrap();
    assert_eq!(l.requests, raw.requests);
}

#[test]
fn rate_scale_two_halves_the_span() {
    let one = spec().load(&traces(), 0, f64::INFINITY).unwrap().requests;
    let mut s = spec();
    s.rate_scale = Some(2.0);
    let two = s.load(&traces(), 0, f64::INFINITY).unwrap().requests;
    assert_eq!(one.len(), two.len());
    let (a, b) = (one.last().unwrap().arrival_ns, two.last().unwrap().arrival_ns);
    assert!(a.abs_diff(2 * b) <= 1, "{a} vs {b}");
}

#[test]
fn split_parts_are_disjoint_and_cover_all_rows() {
    let whole = spec().load(&traces(), 0, f64::INFINITY).unwrap().requests;
    let mut union = Vec::new();
    for part in 0..3 {
        let mut s = spec();
        s.split = Some(Split { parts: 3, part, seed: 0 });
        // Different load seeds per tenant must not break disjointness.
        let l = s.load(&traces(), 100 + part as u64, f64::INFINITY).unwrap();
        let n = l.requests.len();
        assert!((2_600..3_300).contains(&n), "part {part}: {n}");
        assert_eq!(l.skipped.get(reason::SPLIT), (whole.len() - n) as u64);
        union.extend(l.requests);
    }
    assert_eq!(union.len(), whole.len(), "parts are disjoint");
    let key = |r: &slicesched_trace::Request| (r.arrival_ns, r.prompt_tokens, r.output_tokens);
    let mut u: Vec<_> = union.iter().map(key).collect();
    let mut w: Vec<_> = whole.iter().map(key).collect();
    u.sort();
    w.sort();
    assert_eq!(u, w, "parts cover every row");
}

#[test]
fn offset_tenants_loop_the_trace() {
    // Two hours from a 0.95 h trace, starting 30 min in: loops back to the start.
    let mut s = spec();
    s.offset_s = Some(1800.0);
    let l = s.load(&traces(), 0, 7200.0).unwrap();
    let r = &l.requests;
    assert!(r.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
    assert!(r.last().unwrap().arrival_ns < 7_200_000_000_000);
    assert!(r.len() > 2 * 8_819 - 1000 && r.len() < 3 * 8_819, "{}", r.len());
    assert_eq!(l.skipped.get(reason::OUTSIDE_WINDOW), 0);
    // A different offset gives a different stream.
    let mut s2 = spec();
    s2.offset_s = Some(60.0);
    assert_ne!(s2.load(&traces(), 0, 600.0).unwrap().requests, s.load(&traces(), 0, 600.0).unwrap().requests);
}
