//! Synthetic generators: determinism, arrival statistics, length distributions.

use slicesched_trace::synth::{generate, Arrivals};
use slicesched_trace::{LengthDist, Request, Split, TraceKind, TraceSpec};
use std::path::Path;

fn gaps_s(r: &[Request]) -> Vec<f64> {
    r.windows(2).map(|w| (w[1].arrival_ns - w[0].arrival_ns) as f64 / 1e9).collect()
}

fn mean_cv(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1.0);
    (m, var.sqrt() / m)
}

fn spec(kind: TraceKind) -> TraceSpec {
    let mut s = TraceSpec::new(kind);
    match kind {
        TraceKind::Poisson => s.rate = Some(20.0),
        TraceKind::Gamma => (s.rate, s.cv) = (Some(20.0), Some(4.0)),
        _ => (s.rate_on, s.rate_off, s.mean_on_s, s.mean_off_s) = (Some(50.0), Some(2.0), Some(5.0), Some(20.0)),
    }
    s
}

fn load(s: &TraceSpec, seed: u64, dur: f64) -> Vec<Request> {
    s.load(Path::new("."), seed, dur).unwrap().requests
}

#[test]
fn same_seed_same_output_other_seed_differs() {
    for kind in [TraceKind::Poisson, TraceKind::Gamma, TraceKind::Onoff] {
        let s = spec(kind);
        let a = load(&s, 7, 300.0);
        assert!(!a.is_empty());
        assert_eq!(a, load(&s, 7, 300.0), "{kind:?}");
        assert_ne!(a, load(&s, 8, 300.0), "{kind:?}");
        assert!(a.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
        assert!(a.last().unwrap().arrival_ns < 300_000_000_000);
    }
}

#[test]
fn gamma_cv_within_ten_percent() {
    for cv in [0.5, 1.0, 2.0, 4.0] {
        let arr = Arrivals::Gamma { rate: 100.0, cv };
        let t = arr.times(11, 200.0).unwrap();
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() > 15_000, "{}", gaps.len());
        let (mean, got) = mean_cv(&gaps);
        assert!((got - cv).abs() / cv < 0.10, "cv {cv}: got {got}");
        assert!((mean - 0.01).abs() / 0.01 < 0.10, "cv {cv}: mean gap {mean}");
    }
}

#[test]
fn gamma_cv_zero_is_periodic() {
    let t = Arrivals::Gamma { rate: 4.0, cv: 0.0 }.times(0, 1.0).unwrap();
    assert_eq!(t, vec![0.25, 0.5, 0.75]);
}

#[test]
fn poisson_rate_and_cv() {
    let r = load(&spec(TraceKind::Poisson), 3, 1000.0); // ~20k arrivals
    let n = r.len() as f64;
    assert!((n - 20_000.0).abs() < 600.0, "{n}");
    let (_, cv) = mean_cv(&gaps_s(&r));
    assert!((cv - 1.0).abs() < 0.05, "{cv}");
}

#[test]
fn onoff_is_bursty_with_the_right_mean_rate() {
    // Stationary mean rate: (5 * 50 + 20 * 2) / 25 = 11.6 req/s.
    let r = load(&spec(TraceKind::Onoff), 5, 20_000.0);
    let rate = r.len() as f64 / 20_000.0;
    assert!((rate - 11.6).abs() / 11.6 < 0.1, "{rate}");
    let (_, cv) = mean_cv(&gaps_s(&r));
    assert!(cv > 1.5, "on/off gaps are over-dispersed: {cv}");
}

#[test]
fn rate_scale_multiplies_synthetic_rates() {
    let mut s = spec(TraceKind::Poisson);
    let base = load(&s, 1, 500.0).len() as f64;
    s.rate_scale = Some(2.0);
    let twice = load(&s, 1, 500.0).len() as f64;
    assert!((twice / base - 2.0).abs() < 0.1, "{base} {twice}");
}

#[test]
fn lengths_follow_median_and_p90_and_clamp() {
    let arr = Arrivals::Poisson { rate: 100.0 };
    let prompt =
        LengthDist::Lognormal { median: Some(1000.0), p90: Some(4000.0), mean: None, sigma: None, max: Some(5000) };
    let output = LengthDist::Lognormal { median: None, p90: None, mean: Some(200.0), sigma: Some(1.0), max: None };
    let r = generate(&arr, &prompt, &output, 2, 200.0).unwrap();
    let mut p: Vec<u32> = r.iter().map(|x| x.prompt_tokens).collect();
    p.sort();
    let q = |f: f64| p[(f * (p.len() - 1) as f64) as usize] as f64;
    assert!((q(0.5) - 1000.0).abs() / 1000.0 < 0.05, "{}", q(0.5));
    assert!((q(0.9) - 4000.0).abs() / 4000.0 < 0.05, "{}", q(0.9));
    assert!(p[0] >= 1 && *p.last().unwrap() == 5000, "clamped at max");
    let mean_o = r.iter().map(|x| x.output_tokens as f64).sum::<f64>() / r.len() as f64;
    assert!((mean_o - 200.0).abs() / 200.0 < 0.08, "{mean_o}");
}

#[test]
fn changing_lengths_keeps_arrivals() {
    let arr = Arrivals::Gamma { rate: 10.0, cv: 2.0 };
    let f = |v| LengthDist::Fixed { value: v };
    let a = generate(&arr, &f(10), &f(5), 9, 100.0).unwrap();
    let b = generate(&arr, &LengthDist::Uniform { min: 1, max: 9 }, &f(7), 9, 100.0).unwrap();
    let t = |r: &[Request]| r.iter().map(|x| x.arrival_ns).collect::<Vec<_>>();
    assert_eq!(t(&a), t(&b));
    assert!(b.iter().all(|x| (1..=9).contains(&x.prompt_tokens) && x.output_tokens == 7));
}

#[test]
fn bad_length_params_are_spec_errors() {
    let arr = Arrivals::Poisson { rate: 1.0 };
    let ok = LengthDist::Fixed { value: 1 };
    for bad in [
        LengthDist::Fixed { value: 0 },
        LengthDist::Uniform { min: 5, max: 2 },
        LengthDist::Lognormal { median: Some(100.0), p90: Some(50.0), mean: None, sigma: None, max: None },
        LengthDist::Lognormal { median: Some(100.0), p90: None, mean: None, sigma: Some(1.0), max: None },
    ] {
        assert!(generate(&arr, &bad, &ok, 0, 10.0).is_err(), "{bad:?}");
    }
}

#[test]
fn split_thins_synthetic_streams_disjointly() {
    let s = spec(TraceKind::Poisson);
    let whole = load(&s, 4, 100.0);
    let mut n = 0;
    for part in 0..2 {
        let mut p = s.clone();
        p.split = Some(Split { parts: 2, part, seed: 0 });
        n += load(&p, 4, 100.0).len();
    }
    assert_eq!(n, whole.len());
}
