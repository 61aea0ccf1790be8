//! The `slicesched` binary end to end: files it writes and the contracts of its output.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slicesched"));
    c.current_dir(root());
    c
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("slicesched-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn replay_writes_summary_csv_and_plots() {
    let out = tmp("replay");
    let o = bin()
        .args(["replay", "--scenario", "scenarios/smoke.toml", "--policy", "dedicated", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("violation rate") && table.contains("gpu"), "{table}");

    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    for key in [
        "policy",
        "scenario",
        "requests",
        "completed",
        "dropped",
        "violation_rate",
        "prompt_tokens_per_s",
        "output_tokens_per_s",
        "ttft_p99_ms",
        "tpot_p99_ms",
        "oom_events",
        "op_events",
        "gpu_busy_fraction",
        "tenants",
        "gpus",
        "timing",
    ] {
        assert!(s.get(key).is_some(), "summary.json lacks `{key}`");
    }
    assert!(s["timing"]["sim_wall_s"].as_f64().unwrap() > 0.0);
    assert_eq!(s["oom_events"], 0);
    assert_eq!(s["policy"], "dedicated");

    let csv = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    assert_eq!(csv.lines().count() as u64 - 1, s["requests"].as_u64().unwrap());
    for svg in ["throughput.svg", "latency_cdf.svg", "gpu_timeline.svg"] {
        let text = std::fs::read_to_string(out.join(svg)).unwrap();
        assert!(text.starts_with("<svg") && text.len() > 1000, "{svg} is not a real plot");
    }
}

#[test]
fn replay_duration_s_replays_the_first_seconds_of_the_scenario() {
    // A sweep's point (`sweep --duration-s`) replayed alone: fewer requests, the
    // window's length in the summary.
    let summary = |extra: &[&str], name: &str| -> serde_json::Value {
        let out = tmp(name);
        let o = bin()
            .args(["replay", "--scenario", "scenarios/smoke.toml", "--quiet", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
    };
    let (whole, part) = (summary(&[], "dur-whole"), summary(&["--duration-s", "20"], "dur-part"));
    // The summary's duration runs to the last request's end, past the window.
    let (d, whole_d) = (part["duration_s"].as_f64().unwrap(), whole["duration_s"].as_f64().unwrap());
    assert!((20.0..whole_d).contains(&d), "{d} s of {whole_d} s");
    let (n, m) = (whole["requests"].as_u64().unwrap(), part["requests"].as_u64().unwrap());
    assert!(m > 0 && m < n, "20 of 60 s: {m} of {n} requests");
    let o = bin()
        .args(["replay", "--scenario", "scenarios/smoke.toml", "--duration-s", "0", "--out"])
        .arg(tmp("dur0"))
        .output()
        .unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--duration-s"));
}

#[test]
fn bad_scenario_fails_with_the_file_named() {
    let dir = tmp("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(&f, "name = \"x\"\nseed = 1\n[cluster]\n[[cluster.nodes]]\ngpu = \"A100\"\ngpus = 1\n[[tenants]]\nname = \"a\"\nmodel = \"nope\"\ngpus = [0]\nsla = { ttft_ms = 1, tpot_ms = 1 }\ntrace = { kind = \"poisson\", rate = 1.0, window_s = 1 }\n").unwrap();
    let o = bin().args(["replay", "--quiet", "--out"]).arg(dir.join("out")).arg("--scenario").arg(&f).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.toml") && err.contains("model") && err.contains("nope"), "{err}");
    assert!(!dir.join("out").join("summary.json").exists(), "nothing is written for a refused scenario");
}

/// `replay` of `scenario` under `policy`, which must fail: its stderr.
fn refused_replay(scenario: &str, policy: &str, tag: &str) -> String {
    let o = bin()
        .args(["replay", "--scenario", scenario, "--policy", policy, "--quiet", "--out"])
        .arg(tmp(tag))
        .output()
        .unwrap();
    assert!(!o.status.success());
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn unknown_policy_is_refused() {
    assert!(refused_replay("scenarios/smoke.toml", "magic", "pol").contains("unknown policy `magic`"));
}

#[test]
fn plugin_validate_refuses_what_is_not_a_policy_component() {
    let o = bin().args(["plugin", "validate", "Cargo.toml"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Cargo.toml is refused") && err.contains("not a valid Wasm component"), "{err}");
}

#[test]
fn a_missing_plugin_file_is_named() {
    assert!(
        refused_replay("scenarios/smoke.toml", "nowhere/p.wasm", "nowasm").contains("reading plugin nowhere/p.wasm")
    );
}

#[test]
fn a_plugin_that_is_not_wasm_says_why_once() {
    let dir = tmp("junkwasm");
    std::fs::create_dir_all(&dir).unwrap();
    let wasm = dir.join("junk.wasm");
    std::fs::write(&wasm, b"junk").unwrap();
    let err = refused_replay("scenarios/smoke.toml", wasm.to_str().unwrap(), "junkwasm-out");
    // The cause once: it was both in the plugin error's message and its source.
    assert!(err.matches("not a valid Wasm component").count() == 1, "{err}");
}

#[test]
fn a_missing_scenario_says_why_once() {
    let err = refused_replay("nowhere/s.toml", "dedicated", "noscn");
    // The io error once: it was both in the library error's message and its source.
    assert!(err.contains("nowhere/s.toml") && err.matches("os error 2").count() == 1, "{err}");
}

#[test]
fn cost_validate_json_contract() {
    let o = bin()
        .args(["cost", "validate", "--fit", "data/profiles/a100", "--test", "data/profiles/a100", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is only the JSON report");
    let ops = v["ops"].as_array().unwrap();
    assert!(ops.len() >= 10);
    for op in ops {
        for k in ["op", "n", "median", "p90", "max"] {
            assert!(op.get(k).is_some(), "op entry lacks {k}");
        }
        let name = op["op"].as_str().unwrap();
        let (median, p90) = (op["median"].as_f64().unwrap(), op["p90"].as_f64().unwrap());
        assert!(p90 <= 0.15, "{name}: p90 {p90}");
        if ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"].contains(&name) {
            assert!(median <= 0.03 && p90 <= 0.10, "{name}: median {median} p90 {p90}");
        }
    }
    assert!(v["overall"]["median"].is_number() && v["overall"]["p90"].is_number());
}
