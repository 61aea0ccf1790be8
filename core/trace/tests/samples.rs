//! Parsers and spec transforms on the hand-written format samples, with exact values.

use slicesched_trace::{load_file, reason, Format, Request, TraceKind, TraceSpec};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn tuples(r: &[Request]) -> Vec<(u64, u32, u32)> {
    r.iter().map(|x| (x.arrival_ns, x.prompt_tokens, x.output_tokens)).collect()
}

#[test]
fn azure_sample_exact() {
    let l = load_file(&fixtures().join("azure_sample.csv"), Format::Azure).unwrap();
    assert_eq!(tuples(&l.requests), vec![(0, 1200, 40), (500_000_000, 300, 12), (2_250_000_000, 7400, 9)]);
    assert_eq!(l.skipped.rows_read, 3);
    assert_eq!(l.skipped.total(), 0);
    assert!(l.requests.iter().all(|r| r.hash_ids.is_empty() && r.key.is_none()));
}

#[test]
fn burstgpt_sample_skips_and_counts_failed_row() {
    let l = load_file(&fixtures().join("burstgpt_sample.csv"), Format::Burstgpt).unwrap();
    let s = 1_000_000_000;
    assert_eq!(tuples(&l.requests), vec![(0, 512, 120), (0, 1400, 310), (14 * s, 88, 402), (22 * s, 2048, 17)]);
    let keys: Vec<_> = l.requests.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, ["ChatGPT", "GPT-4", "ChatGPT", "GPT-4"]);
    assert_eq!(l.skipped.rows_read, 5);
    assert_eq!(l.skipped.get(reason::FAILED_0_0), 1);
    assert_eq!(l.skipped.total(), 1);
}

#[test]
fn burstgpt_model_filter() {
    let mut spec = TraceSpec::new(TraceKind::Burstgpt);
    spec.path = Some("burstgpt_sample.csv".into());
    spec.model = Some("gpt-4".into());
    let l = spec.load(&fixtures(), 1, f64::INFINITY).unwrap();
    assert_eq!(tuples(&l.requests), vec![(0, 1400, 310), (22_000_000_000, 2048, 17)]);
    assert_eq!(l.skipped.get(reason::MODEL_FILTER), 2);
    assert_eq!(l.skipped.get(reason::FAILED_0_0), 1);
}

#[test]
fn mooncake_sample_raw() {
    let l = load_file(&fixtures().join("mooncake_sample.jsonl"), Format::Mooncake).unwrap();
    assert_eq!(
        tuples(&l.requests),
        vec![(0, 1500, 200), (0, 700, 35), (3_001_000_000, 5200, 410), (6_000_000_000, 1024, 1)]
    );
    assert_eq!(l.requests[0].hash_ids, vec![0, 1, 2]);
    assert_eq!(l.requests[1].hash_ids, vec![0, 3]);
    assert_eq!(l.requests[2].hash_ids, (4..=14).collect::<Vec<u32>>());
    assert_eq!(l.requests[3].hash_ids, vec![0, 15]);
}

fn mooncake(seed: u64) -> Vec<Request> {
    let mut spec = TraceSpec::new(TraceKind::Mooncake);
    spec.path = Some("mooncake_sample.jsonl".into());
    spec.load(&fixtures(), seed, f64::INFINITY).unwrap().requests
}

#[test]
fn mooncake_spreading_is_deterministic_and_keeps_order() {
    let a = mooncake(42);
    assert_eq!(a, mooncake(42));
    assert_ne!(a, mooncake(43), "a different seed spreads differently");
    // The two t=0 requests spread over [0, 3.001 s), in file order; the rest stay put.
    assert!(a[0].arrival_ns <= a[1].arrival_ns && a[1].arrival_ns < 3_001_000_000);
    assert_eq!((a[0].prompt_tokens, a[1].prompt_tokens), (1500, 700));
    assert_eq!(a[0].hash_ids, vec![0, 1, 2]);
    assert_eq!(a[1].hash_ids, vec![0, 3]);
    assert_eq!(a[2].arrival_ns, 3_001_000_000);
    assert_eq!(a[3].arrival_ns, 6_000_000_000);
}

#[test]
fn mooncake_spread_can_be_disabled() {
    let mut spec = TraceSpec::new(TraceKind::Mooncake);
    spec.path = Some("mooncake_sample.jsonl".into());
    spec.spread = Some(false);
    let l = spec.load(&fixtures(), 5, f64::INFINITY).unwrap();
    assert_eq!(l.requests[1].arrival_ns, 0);
}

#[test]
fn default_window_is_duration_times_rate_scale() {
    let mut spec = TraceSpec::new(TraceKind::Azure);
    spec.path = Some("azure_sample.csv".into());
    // 1 s of scenario at 2x rate reads 2 s of trace: the first two rows.
    spec.rate_scale = Some(2.0);
    let l = spec.load(&fixtures(), 0, 1.0).unwrap();
    assert_eq!(tuples(&l.requests), vec![(0, 1200, 40), (250_000_000, 300, 12)]);
    assert_eq!(l.skipped.get(reason::OUTSIDE_WINDOW), 1);
}

#[test]
fn offset_wraps_around() {
    // Sample period: span 2.25 s + mean gap 1.125 s = 3.375 s.
    let mut spec = TraceSpec::new(TraceKind::Azure);
    spec.path = Some("azure_sample.csv".into());
    spec.offset_s = Some(2.0);
    spec.window_s = Some(2.0);
    let l = spec.load(&fixtures(), 0, 100.0).unwrap();
    assert_eq!(tuples(&l.requests), vec![(250_000_000, 7400, 9), (1_375_000_000, 1200, 40), (1_875_000_000, 300, 12)]);
}

#[test]
fn burstgpt_spread_is_opt_in() {
    let mut spec = TraceSpec::new(TraceKind::Burstgpt);
    spec.path = Some("burstgpt_sample.csv".into());
    let raw = spec.load(&fixtures(), 3, f64::INFINITY).unwrap().requests;
    assert_eq!((raw[0].arrival_ns, raw[1].arrival_ns), (0, 0));
    spec.spread = Some(true);
    let spread = spec.load(&fixtures(), 3, f64::INFINITY).unwrap().requests;
    assert!(spread[1].arrival_ns < 1_000_000_000 && spread[0].arrival_ns <= spread[1].arrival_ns);
    assert_eq!(spread[1].prompt_tokens, 1400, "order within the second is kept");
    assert_eq!(spread[2].arrival_ns, 14_000_000_000);
}
