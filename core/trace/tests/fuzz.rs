//! No parser panics on any input: random bytes, and random near-valid rows that reach
//! the field checks rather than failing at the header.

use proptest::prelude::*;
use slicesched_trace::{parse_bytes, transform, Format, Request, TraceKind, TraceSpec};
use std::path::Path;

const FORMATS: [Format; 3] = [Format::Azure, Format::Burstgpt, Format::Mooncake];

fn cell() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        "[0-9:. +-]{0,30}",
        "20[0-9]{2}-[0-1][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9]\\.[0-9]{1,9}(\\+00:00)?",
        ".{0,12}",
    ]
}

fn rows(head: &'static str) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::collection::vec(cell(), 0..7), 0..8).prop_map(move |rs| {
        let body: Vec<String> = rs.iter().map(|r| r.join(",")).collect();
        format!("{head}\r\n{}", body.join("\r\n"))
    })
}

fn json_lines() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        prop::collection::vec(any::<i64>(), 0..4).prop_map(|v| format!("{v:?}")),
        "[\\[\\]{}\":,0-9a-z -]{0,16}",
    ];
    prop::collection::vec((field.clone(), field.clone(), field.clone(), field), 0..6).prop_map(|ls| {
        ls.iter()
            .map(|(t, i, o, h)| {
                format!(r#"{{"timestamp": {t}, "input_length": {i}, "output_length": {o}, "hash_ids": {h}}}"#)
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for f in FORMATS {
            let _ = parse_bytes(&bytes, f, "fuzz");
        }
    }

    #[test]
    fn random_strings(s in ".{0,300}") {
        for f in FORMATS {
            let _ = parse_bytes(s.as_bytes(), f, "fuzz");
        }
    }

    #[test]
    fn near_valid_azure(s in rows("TIMESTAMP,ContextTokens,GeneratedTokens")) {
        let _ = parse_bytes(s.as_bytes(), Format::Azure, "fuzz");
    }

    #[test]
    fn near_valid_burstgpt(s in rows("Timestamp,Model,Request tokens,Response tokens")) {
        let _ = parse_bytes(s.as_bytes(), Format::Burstgpt, "fuzz");
    }

    #[test]
    fn near_valid_mooncake(s in json_lines()) {
        let _ = parse_bytes(s.as_bytes(), Format::Mooncake, "fuzz");
    }

    #[test]
    fn window_and_scale_never_panic(
        mut ts in prop::collection::vec(any::<u64>(), 0..20),
        offset in any::<u64>(), window in 0u64..u64::MAX, scale in 1e-3f64..1e3,
    ) {
        ts.sort();
        let reqs: Vec<Request> = ts.iter().map(|&t| Request::new(t, 1, 1)).collect();
        let period = transform::period_ns(reqs.len(), ts.last().copied().unwrap_or(0));
        if let Ok((mut out, _)) = transform::window(&reqs, period, offset, window) {
            prop_assert!(out.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
            transform::rate_scale(&mut out, scale);
        }
    }

    #[test]
    fn synthetic_specs_never_panic(
        kind in 0..3u8, rate in any::<f64>(), cv in any::<f64>(), dur in -1.0f64..1e3,
        on in any::<f64>(), off in any::<f64>(),
    ) {
        let mut s = TraceSpec::new([TraceKind::Poisson, TraceKind::Gamma, TraceKind::Onoff][kind as usize]);
        match s.kind {
            TraceKind::Poisson => s.rate = Some(rate),
            TraceKind::Gamma => { s.rate = Some(rate); s.cv = Some(cv) }
            _ => { s.rate_on = Some(rate); s.rate_off = Some(cv); s.mean_on_s = Some(on); s.mean_off_s = Some(off) }
        }
        // Bound the work a lucky valid draw can ask for.
        if rate.abs().max(cv.abs()) * dur.abs() < 1e5 {
            let _ = s.load(Path::new("."), 1, dur);
        }
    }
}
