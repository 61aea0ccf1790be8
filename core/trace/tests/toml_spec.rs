//! `[tenants.trace]` tables as scenarios write them: one example per kind, and the
//! mistakes that must be rejected.

use slicesched_trace::{reason, LengthDist, Split, TraceKind, TraceSpec};
use std::path::{Path, PathBuf};

fn parse(s: &str) -> Result<TraceSpec, toml::de::Error> {
    toml::from_str(s)
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

const EXAMPLES: [(&str, TraceKind); 6] = [
    (
        r#"kind = "azure"
path = "azure_sample.csv"
offset_s = 1.0
window_s = 60.0
rate_scale = 1.5
split = { parts = 2, part = 1 }"#,
        TraceKind::Azure,
    ),
    (
        r#"kind = "burstgpt"
path = "burstgpt_sample.csv"
model = "ChatGPT"
rate_scale = 0.5"#,
        TraceKind::Burstgpt,
    ),
    (
        r#"kind = "mooncake"
path = "mooncake_sample.jsonl"
spread = true
bucket_s = 3.0"#,
        TraceKind::Mooncake,
    ),
    (
        r#"kind = "poisson"
rate = 4.0
prompt = { dist = "lognormal", median = 1469, p90 = 5188, max = 8192 }
output = { dist = "fixed", value = 64 }"#,
        TraceKind::Poisson,
    ),
    (
        r#"kind = "gamma"
rate = 4.0
cv = 3.0
prompt = { dist = "uniform", min = 100, max = 2000 }
output = { dist = "lognormal", mean = 200, sigma = 1.0 }"#,
        TraceKind::Gamma,
    ),
    (
        r#"kind = "onoff"
rate_on = 20.0
rate_off = 0.5
mean_on_s = 10.0
mean_off_s = 60.0"#,
        TraceKind::Onoff,
    ),
];

#[test]
fn every_example_parses_validates_and_loads() {
    for (text, kind) in EXAMPLES {
        let s = parse(text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        assert_eq!(s.kind, kind);
        s.validate().unwrap();
        let l = s.load(&fixtures(), 1, 120.0).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert!(!l.requests.is_empty(), "{kind:?}");
        // Round-trips through TOML.
        assert_eq!(parse(&toml::to_string(&s).unwrap()).unwrap(), s);
    }
}

#[test]
fn fields_parse_to_the_right_values() {
    let s = parse(EXAMPLES[0].0).unwrap();
    assert_eq!(s.split, Some(Split { parts: 2, part: 1, seed: 0 }));
    assert_eq!((s.offset_s, s.window_s, s.rate_scale), (Some(1.0), Some(60.0), Some(1.5)));
    let g = parse(EXAMPLES[4].0).unwrap();
    assert_eq!(g.prompt, Some(LengthDist::Uniform { min: 100, max: 2000 }));
    let l = parse(EXAMPLES[1].0).unwrap().load(&fixtures(), 0, 1e6).unwrap();
    assert_eq!(l.skipped.get(reason::MODEL_FILTER), 2);
}

#[test]
fn unknown_and_misplaced_fields_are_rejected() {
    assert!(parse("kind = \"poisson\"\nrate = 1.0\nrtae = 2.0").is_err());
    assert!(parse("kind = \"zipf\"\nrate = 1.0").is_err());
    assert!(parse("kind = \"poisson\"\nrate = 1.0\nsplit = { parts = 2, part = 0, bogus = 1 }").is_err());
    assert!(parse("kind = \"poisson\"\nrate = 1.0\nprompt = { dist = \"fixed\", value = 3, median = 2 }").is_err());
    for bad in [
        "kind = \"azure\"\npath = \"a.csv\"\nmodel = \"x\"",
        "kind = \"poisson\"\nrate = 1.0\npath = \"a.csv\"",
        "kind = \"poisson\"\nrate = 1.0\noffset_s = 3.0",
        "kind = \"gamma\"\nrate = 1.0\ncv = 1.0\nspread = true",
        "kind = \"azure\"\npath = \"a.csv\"\nbucket_s = 1.0",
        "kind = \"azure\"\npath = \"a.csv\"\nsplit = { parts = 2, part = 2 }",
        "kind = \"azure\"\npath = \"a.csv\"\nrate_scale = 0.0",
        "kind = \"azure\"\npath = \"a.csv\"\nwindow_s = -1.0",
    ] {
        let s = parse(bad).unwrap_or_else(|e| panic!("{bad}: {e}"));
        assert!(s.validate().is_err(), "{bad}");
    }
}
