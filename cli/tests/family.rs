//! `slicesched sweep --family` on a folder of two short scenarios: the table, the
//! family's JSON (whose spread must agree with each scenario's own sweep) and its plot.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slicesched"));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("slicesched-family-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn scenario(name: &str, seed: u64, rate: f64) -> String {
    format!(
        r#"name = "{name}"
seed = {seed}
duration_s = 600
drain_s = 30

[cluster]
name = "2xA100"
[[cluster.nodes]]
gpu = "A100-80GB"
gpus = 2

[[tenants]]
name = "chat"
model = "llama-2-7b"
gpus = [0]
sla = {{ ttft_ms = 500, ttft_ms_per_1k = 250, tpot_ms = 60 }}
trace = {{ kind = "onoff", rate_on = {rate}, rate_off = 0.2, mean_on_s = 3, mean_off_s = 6 }}

[[tenants]]
name = "code"
model = "mistral-7b"
gpus = [1]
sla = {{ ttft_ms = 500, ttft_ms_per_1k = 250, tpot_ms = 60 }}
trace = {{ kind = "poisson", rate = 0.5 }}
"#
    )
}

/// A fresh folder `name` holding `a.toml` and `b.toml`, two short scenarios.
fn two_scenarios(name: &str) -> PathBuf {
    let dir = tmp(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.toml"), scenario("fam-a", 1, 6.0)).unwrap();
    std::fs::write(dir.join("b.toml"), scenario("fam-b", 2, 3.0)).unwrap();
    dir
}

fn family(dir: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    bin()
        .args(["sweep", "--family"])
        .arg(dir)
        .args(["--violation-targets", "0.05,0.2", "--precision", "0.3", "--max-scale", "8", "--jobs", "2"])
        .args(["--duration-s", "15", "--quiet", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

#[test]
fn family_sweep_reports_a_consistent_spread() {
    let dir = two_scenarios("in");
    std::fs::write(dir.join("notes.txt"), "not a scenario").unwrap();
    let out = tmp("out");
    let o = family(&dir, &out, &["--policies", "dedicated,pooled"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("median") && table.contains("pooled") && table.contains("2 scenarios"), "{table}");

    let fam = json(&out.join("family.json"));
    let scenarios = fam["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 2);
    // Each scenario's ratios are its own sweep's, and are rate scales over dedicated's.
    let mut ratios: Vec<(String, f64, f64)> = Vec::new();
    for (s, stem) in scenarios.iter().zip(["a", "b"]) {
        let own = json(&out.join(stem).join("sweep.json"));
        assert_eq!(s["scenario"], own["scenario"]);
        assert_eq!(s["ratios"], own["ratios"]);
        let results = own["results"].as_array().unwrap();
        for r in s["ratios"].as_array().unwrap() {
            let (policy, target) = (r["policy"].as_str().unwrap(), r["target"].as_f64().unwrap());
            let scale = |p: &str| {
                results.iter().find(|x| x["policy"] == p && x["target"] == target).unwrap()["rate_scale"]
                    .as_f64()
                    .unwrap()
            };
            match r["goodput_vs_dedicated"].as_f64() {
                Some(v) => {
                    assert!((v - scale(policy) / scale("dedicated")).abs() < 1e-9, "{r}");
                    ratios.push((policy.into(), target, v));
                }
                None => assert_eq!(scale("dedicated"), 0.0, "{r}"),
            }
        }
        for r in results {
            assert_eq!(r["oom_events"], 0, "{r}");
        }
        assert!(out.join(stem).join("violation_vs_rate.svg").exists());
    }
    let spread = fam["spread"].as_array().unwrap();
    assert_eq!(spread.len(), 4);
    for sp in spread {
        let (policy, target) = (sp["policy"].as_str().unwrap(), sp["target"].as_f64().unwrap());
        let mut vals: Vec<f64> = ratios.iter().filter(|r| r.0 == policy && r.1 == target).map(|r| r.2).collect();
        vals.sort_by(f64::total_cmp);
        assert_eq!(sp["scenarios"].as_u64().unwrap() as usize, vals.len(), "{sp}");
        if vals.is_empty() {
            assert!(sp["median"].is_null());
            continue;
        }
        let (lo, mid, hi) = (sp["min"].as_f64().unwrap(), sp["median"].as_f64().unwrap(), sp["max"].as_f64().unwrap());
        assert_eq!((lo, hi), (vals[0], *vals.last().unwrap()), "{sp}");
        assert!(lo <= mid && mid <= hi, "{sp}");
        if policy == "dedicated" {
            assert_eq!((lo, hi), (1.0, 1.0));
        }
    }
    let svg = std::fs::read_to_string(out.join("family_goodput.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("pooled") && svg.contains("dedicated"));
}

#[test]
fn family_sweep_refuses_what_it_cannot_report() {
    let empty = tmp("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = family(&empty, &tmp("o1"), &["--policies", "dedicated"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("no scenario") && err.contains(&*empty.to_string_lossy()), "{err}");

    let o = family(Path::new("scenarios"), &tmp("o2"), &["--policies", "pooled"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("dedicated"), "{err}");

    let o = bin()
        .args(["sweep", "--family", "scenarios", "--scenario", "scenarios/smoke.toml", "--out", "/tmp/x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `--resume` takes a scenario's sweep from an earlier run (here a `--scenario` sweep
/// into the family's folder for it) and sweeps the rest; a scenario file that changed,
/// or another search, is swept again, and says why.
#[test]
fn family_sweep_resumes_from_earlier_sweeps_of_the_same_files() {
    let dir = two_scenarios("resume-in");
    let out = tmp("resume-out");
    let args = ["--violation-targets", "0.05,0.2", "--precision", "0.3", "--max-scale", "8", "--jobs", "2"];
    let o = bin()
        .args(["sweep", "--scenario"])
        .arg(dir.join("a.toml"))
        .args(args)
        .args(["--duration-s", "15", "--quiet", "--policies", "dedicated,pooled", "--out"])
        .arg(out.join("a"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a_before = std::fs::read(out.join("a").join("sweep.json")).unwrap();
    assert!(json(&out.join("a").join("sweep.json"))["scenario_sha256"].as_str().is_some_and(|h| h.len() == 64));

    let o = family(&dir, &out, &["--policies", "dedicated,pooled", "--resume"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(out.join("a").join("sweep.json")).unwrap(), a_before, "a was swept again");
    let fam = json(&out.join("family.json"));
    assert_eq!(fam["scenarios"].as_array().unwrap().len(), 2);
    assert_eq!(fam["scenarios"][0]["ratios"], json(&out.join("a").join("sweep.json"))["ratios"]);
    assert!(out.join("b").join("sweep.json").exists());
    let b_before = std::fs::read(out.join("b").join("sweep.json")).unwrap();

    // b's file changes: b is swept again, a is still taken.
    std::fs::write(dir.join("b.toml"), scenario("fam-b", 2, 3.0) + "# edited\n").unwrap();
    let o = family(&dir, &out, &["--policies", "dedicated,pooled", "--resume"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("b.toml: sweeping again") && err.contains("another version"), "{err}");
    assert!(!err.contains("a.toml: sweeping again"), "{err}");
    assert_eq!(std::fs::read(out.join("a").join("sweep.json")).unwrap(), a_before);
    assert_ne!(std::fs::read(out.join("b").join("sweep.json")).unwrap(), b_before);

    // A policy the earlier sweeps did not search: both are swept again.
    let o = family(&dir, &out, &["--policies", "dedicated,pooled,slice", "--resume"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.matches("has no answer for").count() == 2 && err.contains("slice at 5% violations"),
        "{err}"
    );

    // Without --family, --resume is an error that says so.
    let o =
        bin().args(["sweep", "--scenario", "scenarios/smoke.toml", "--resume", "--out", "/tmp/x"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--resume") && err.contains("--family"), "{err}");
}
