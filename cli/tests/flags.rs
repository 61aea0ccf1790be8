//! Numeric flags are checked by the shared value parsers (issue 16): a bad number is a
//! usage error naming the flag, never a panic (exit 101) inside a command.

use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slicesched"));
    c.current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

#[test]
fn bad_numeric_flags_are_usage_errors_not_panics() {
    let cases: &[&[&str]] = &[
        &["compare", "--scenario", "scenarios/smoke.toml", "--out", "/tmp/x", "--rate-scale", "0"],
        &["compare", "--scenario", "scenarios/smoke.toml", "--out", "/tmp/x", "--rate-scale", "nan"],
        &["replay", "--scenario", "scenarios/smoke.toml", "--out", "/tmp/x", "--rate-scale=-1"],
        &["sweep", "--scenario", "scenarios/smoke.toml", "--out", "/tmp/x", "--violation-targets", "0.01,1.5"],
        &["sweep", "--scenario", "scenarios/smoke.toml", "--out", "/tmp/x", "--precision", "inf"],
        &["sweep", "--scenario", "scenarios/smoke.toml", "--out", "/tmp/x", "--jobs", "0"],
        &["sweep", "--family", "scenarios/family", "--out", "/tmp/x", "--duration-s", "0"],
        &["scenario", "generate", "--seed", "1", "--out", "/tmp/x.toml", "--gpus", "0"],
        &["scenario", "generate", "--out", "/tmp/x.toml", "--seed", "-1"],
        &["bench", "--repeat", "0"],
        &["bench", "live", "--steps", "0"],
        &["cost", "predict", "--model", "llama-2-7b", "--tp", "0"],
    ];
    for args in cases {
        let o = bin().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        let last = args.last().unwrap();
        let flag = match last.split_once('=') {
            Some((f, _)) => f,
            None => args.iter().rev().nth(1).unwrap(),
        };
        assert!(err.contains(flag) && !err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn bad_load_flags_are_usage_errors_naming_the_flag() {
    let base = ["load", "--url", "http://127.0.0.1:9", "--scenario", "scenarios/tiny-live-2t.toml", "--out", "/tmp/x"];
    for (extra, flag) in [
        (&["--keys", "chat=k", "--rate-scale", "0"][..], "--rate-scale"),
        (&["--keys", "chat=k", "--duration-s=0"][..], "--duration-s"),
        (&["--keys", "chat"][..], "--keys"),
        (&["--keys", "chat=a,chat=b"][..], "--keys"),
    ] {
        let o = bin().args(base).args(extra).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag) && !err.contains("panicked"), "{extra:?}: {err}");
    }
}
