//! Malformed inputs: every error names the file, the 1-based line and the field.

use slicesched_trace::{load_file, parse_bytes, Format, TraceError, TraceKind, TraceSpec};
use std::path::Path;

/// Asserts a row error at `line` in `field`, and that the message says so too.
fn row_err(r: Result<slicesched_trace::Loaded, TraceError>, want_line: u64, want_field: &str) -> String {
    match r {
        Err(e @ TraceError::Row { .. }) => {
            let msg = e.to_string();
            let TraceError::Row { path, line, field, .. } = e else { unreachable!() };
            assert_eq!((line, field.as_str()), (want_line, want_field), "{msg}");
            assert!(msg.starts_with(&format!("{path}:{line}: field `{field}`")), "{msg}");
            assert!(path.contains("bad"), "{msg}");
            msg
        }
        other => panic!("want a row error, got {other:?}"),
    }
}

const AZ_HEAD: &str = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n";

fn azure(body: &str) -> Result<slicesched_trace::Loaded, TraceError> {
    parse_bytes(format!("{AZ_HEAD}{body}").as_bytes(), Format::Azure, "bad_azure.csv")
}

#[test]
fn azure_missing_column() {
    let r = parse_bytes(b"TIMESTAMP,ContextTokens\r\n2023-11-16 18:00:00.0,5", Format::Azure, "bad.csv");
    let msg = row_err(r, 1, "GeneratedTokens");
    assert!(msg.contains("missing column"), "{msg}");
}

#[test]
fn azure_bad_timestamp() {
    let msg = row_err(azure("2023-11-16 18:00:00.0,5,5\r\n2023-11-16 noon,5,5"), 3, "TIMESTAMP");
    assert!(msg.contains("noon"), "{msg}");
}

#[test]
fn azure_negative_zero_absurd_and_non_numeric_tokens() {
    let msg = row_err(azure("2023-11-16 18:00:00.0,-5,5"), 2, "ContextTokens");
    assert!(msg.contains("negative"), "{msg}");
    row_err(azure("2023-11-16 18:00:00.0,5,0"), 2, "GeneratedTokens");
    row_err(azure("2023-11-16 18:00:00.0,5,99999999999"), 2, "GeneratedTokens");
    row_err(azure("2023-11-16 18:00:00.0,5,5\r\n2023-11-16 18:00:00.0,1.5,5"), 3, "ContextTokens");
}

#[test]
fn azure_short_row() {
    row_err(azure("2023-11-16 18:00:00.0,5,5\r\n2023-11-16 18:00:01.0,5"), 3, "GeneratedTokens");
}

#[test]
fn empty_file_is_a_file_error() {
    for f in [Format::Azure, Format::Burstgpt] {
        assert!(matches!(parse_bytes(b"", f, "bad"), Err(TraceError::File { .. })));
    }
    // An empty JSONL file is just an empty trace.
    assert!(parse_bytes(b"", Format::Mooncake, "bad").unwrap().requests.is_empty());
}

#[test]
fn missing_file_names_the_path() {
    let e = load_file(Path::new("/nonexistent/bad_trace.csv"), Format::Azure).unwrap_err();
    assert!(matches!(e, TraceError::File { .. }));
    assert!(e.to_string().contains("/nonexistent/bad_trace.csv"), "{e}");
}

const BG_HEAD: &str = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";

#[test]
fn burstgpt_errors() {
    let bg = |body: &str| parse_bytes(format!("{BG_HEAD}{body}").as_bytes(), Format::Burstgpt, "bad_burst.csv");
    row_err(bg("1,A,5,5,10,x\n2,A,-3,5,2,x\n"), 3, "Request tokens");
    row_err(bg("soon,A,5,5,10,x\n"), 2, "Timestamp");
    row_err(bg("1,,5,5,10,x\n"), 2, "Model");
    row_err(bg("1,A,5,nan,10,x\n"), 2, "Response tokens");
    let r = parse_bytes(b"Timestamp,Request tokens,Response tokens\n1,2,3\n", Format::Burstgpt, "bad.csv");
    row_err(r, 1, "Model");
}

#[test]
fn mooncake_errors() {
    let mc = |s: &str| parse_bytes(s.as_bytes(), Format::Mooncake, "bad_mc.jsonl");
    let ok = r#"{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}"#;
    let msg = row_err(mc(&format!("{ok}\n{{\"timestamp\": 3000, \"input_len")), 2, "<json>");
    assert!(msg.contains("invalid JSON"), "{msg}");
    row_err(mc(&format!("{ok}\n\n{{\"timestamp\": 1, \"output_length\": 5}}")), 3, "input_length");
    row_err(mc(r#"{"timestamp": -1, "input_length": 10, "output_length": 5}"#), 1, "timestamp");
    row_err(mc(r#"{"timestamp": "x", "input_length": 10, "output_length": 5}"#), 1, "timestamp");
    row_err(mc(r#"{"timestamp": 1, "input_length": 10, "output_length": -5}"#), 1, "output_length");
    row_err(mc(r#"{"timestamp": 1, "input_length": 10.5, "output_length": 5}"#), 1, "input_length");
    row_err(mc(r#"{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": 7}"#), 1, "hash_ids");
    row_err(mc("[1, 2, 3]"), 1, "<json>");
}

#[test]
fn invalid_utf8_is_a_row_error() {
    let mut bytes = AZ_HEAD.as_bytes().to_vec();
    bytes.extend_from_slice(b"2023-11-16 18:00:00.0,5,5\r\n\xff\xfe,5,5");
    let e = parse_bytes(&bytes, Format::Azure, "bad.csv").unwrap_err().to_string();
    assert!(e.contains("bad.csv:3"), "{e}");
}

#[test]
fn spec_errors_are_clear() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut s = TraceSpec::new(TraceKind::Azure);
    let e = s.load(&dir, 0, 10.0).unwrap_err().to_string();
    assert!(e.contains("needs `path`"), "{e}");
    s.path = Some("no_such_file.csv".into());
    assert!(s.load(&dir, 0, 10.0).unwrap_err().to_string().contains("no_such_file.csv"));
    s.path = Some("azure_sample.csv".into());
    s.rate = Some(3.0);
    let e = s.load(&dir, 0, 10.0).unwrap_err().to_string();
    assert!(e.contains("`rate` does not apply"), "{e}");
    let mut p = TraceSpec::new(TraceKind::Poisson);
    assert!(p.load(&dir, 0, 10.0).unwrap_err().to_string().contains("needs `rate`"));
    p.rate = Some(-1.0);
    assert!(p.load(&dir, 0, 10.0).is_err());
    p.rate = Some(1.0);
    assert!(p.load(&dir, 0, f64::INFINITY).unwrap_err().to_string().contains("finite duration"));
}
