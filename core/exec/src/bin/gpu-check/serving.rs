//! Section (h): the scheduler's own commands on the GPU, run as the `slicesched` binary
//! a user would run (`--slicesched PATH`, shipped beside gpu-check): a profile of a
//! Llama-3-8B-sized model with random weights, the cost model fitted on it (hold-out)
//! and the catalog's prediction of it from the A100 profiles, and a two-tenant scenario
//! on the CUDA executor with per-op and per-request predicted against measured.
//! Each command runs with its own time cap; its output goes to `OUT/h_*.log`.

use crate::harness::Harness;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct Setup {
    pub bin: PathBuf,
    /// The repository (its `data/profiles/a100` and `scenarios/`).
    pub repo: PathBuf,
    pub out: PathBuf,
}

impl Setup {
    fn profile_dir(&self) -> PathBuf {
        self.out.join("h-profile")
    }
}

/// Runs `bin args…` until it exits or the section's deadline; stdout is returned,
/// stdout and stderr both go to `OUT/h_<name>.log`.
fn run(h: &Harness, s: &Setup, name: &str, args: &[&str]) -> Result<String> {
    let log = s.out.join(format!("h_{name}.log"));
    let stdout_path = s.out.join(format!("h_{name}.stdout"));
    let child = Command::new(&s.bin)
        .args(args)
        .current_dir(&s.repo)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path)?)
        .stderr(std::fs::File::create(&log)?)
        .spawn();
    let mut child = child.with_context(|| format!("starting {}", s.bin.display()))?;
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if h.over() {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{name}: killed at the section's cap after {:.0} s (log {})",
                t.elapsed().as_secs_f64(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    if !status.success() {
        bail!("{name}: {status}: {}", err.lines().last().unwrap_or(""));
    }
    Ok(out)
}

pub fn profile(h: &mut Harness, s: &Setup) -> Result<(bool, String)> {
    let dir = s.profile_dir();
    let t = Instant::now();
    let args = [
        "profile",
        "--device",
        "cuda:0",
        "--model",
        "llama-3-8b",
        "--tokens",
        "1,4,16,64,256,512,1024,2048",
        "--quick",
        "--reps",
        "3",
        "--quiet",
        "--out",
    ];
    let mut a: Vec<&str> = args.to_vec();
    let d = dir.display().to_string();
    a.push(&d);
    let out = run(h, s, "profile", &a)?;
    let dev = std::fs::read_to_string(dir.join("device_config.yml")).unwrap_or_default();
    h.emit(
        json!({ "section": "h_profile", "seconds": t.elapsed().as_secs_f64(), "stdout": out, "device_config": dev }),
    );
    let line = out.lines().next().unwrap_or("").to_string();
    let name = dev.lines().find_map(|l| l.strip_prefix("name: ")).unwrap_or("?");
    Ok((true, format!("{line}; device_config names {name} ({:.0} s)", t.elapsed().as_secs_f64())))
}

fn summarize(v: &Value) -> String {
    let pct = |x: &Value| format!("{:.1}%", x.as_f64().unwrap_or(f64::NAN) * 100.0);
    let ops: Vec<String> = v["ops"]
        .as_array()
        .map(|o| o.iter().map(|o| format!("{} {}", o["op"].as_str().unwrap_or("?"), pct(&o["median"]))).collect())
        .unwrap_or_default();
    format!(
        "median {} / p90 {}; per op (median): {}",
        pct(&v["overall"]["median"]),
        pct(&v["overall"]["p90"]),
        ops.join(", ")
    )
}

/// The cost model fitted on the profile (20 % held out) and the catalog's A100 fit
/// predicting it on its GPU.
pub fn cost(h: &mut Harness, s: &Setup) -> Result<(bool, String)> {
    let dir = s.profile_dir();
    let d = dir.display().to_string();
    let dev = std::fs::read_to_string(dir.join("device_config.yml")).context("no profile from h_profile")?;
    let sku = dev.lines().find_map(|l| l.strip_prefix("name: ")).unwrap_or("H200-141GB").to_string();
    let own: Value =
        serde_json::from_str(&run(h, s, "cost_self", &["cost", "validate", "--json", "--fit", &d, "--test", &d])?)?;
    let a100 = s.repo.join("data/profiles/a100").display().to_string();
    let catalog =
        run(h, s, "cost_catalog", &["cost", "validate", "--json", "--fit", &a100, "--test", &d, "--test-sku", &sku]);
    let cat = match &catalog {
        Ok(t) => serde_json::from_str::<Value>(t).map(|v| summarize(&v)).unwrap_or_else(|e| format!("unreadable: {e}")),
        Err(e) => format!("failed: {e}"),
    };
    h.emit(json!({ "section": "h_cost", "sku": sku, "self_holdout": own, "catalog_a100_to_this_gpu": catalog.as_ref().ok().and_then(|t| serde_json::from_str::<Value>(t).ok()) }));
    Ok((catalog.is_ok(), format!("fitted here, held out: {}; A100 fit predicting {sku}: {cat}", summarize(&own))))
}

/// Two tenants on the CUDA executor, priced by the profile's fit, with a pure replay
/// under the same model beside it.
pub fn scenario(h: &mut Harness, s: &Setup) -> Result<(bool, String)> {
    let out = s.out.join("h-run");
    let o = out.display().to_string();
    let p = s.profile_dir().display().to_string();
    let scn = s.repo.join("scenarios/tiny-2t-1gpu.toml").display().to_string();
    let mut args = vec!["run", "--executor", "cuda", "--scenario", &scn, "--out", &o, "--compare-replay", "--quiet"];
    if Path::new(&p).join("device_config.yml").is_file() {
        args.extend(["--cost-profile", &p]);
    }
    let stdout = run(h, s, "run", &args)?;
    print!("{stdout}");
    let f: Value = serde_json::from_slice(&std::fs::read(out.join("fidelity.json"))?)?;
    let summary: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json"))?)?;
    h.emit(json!({ "section": "h_run", "fidelity": f, "executor": summary["executor"], "stdout": stdout }));
    let pct = |v: &Value| format!("{:.0}%", v.as_f64().unwrap_or(f64::NAN) * 100.0);
    let kinds: Vec<String> = f["op_by_kind"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k} {}", pct(&v["median"]))).collect())
        .unwrap_or_default();
    let errors = summary["executor"]["errors"].as_array().map_or(0, |e| e.len());
    Ok((
        errors == 0,
        format!(
            "op {} (online-corrected {}, the host's noise floor {}) / ttft {} / tpot {} median error (predicted vs run); by op: {}",
            pct(&f["op"]["median"]),
            pct(&f["op_online"]["median"]),
            pct(&f["op_noise_floor"]["median"]),
            pct(&f["ttft"]["median"]),
            pct(&f["tpot"]["median"]),
            kinds.join(", ")
        ),
    ))
}
