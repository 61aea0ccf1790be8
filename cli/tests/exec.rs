//! `slicesched profile` (and later `run`) end to end on the CPU backend.

use slicesched_cost::CostModel;
use slicesched_sim::{tenant_loads_with, Scenario, OWNER_BUSY, RHO_FIT};
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slicesched"));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("slicesched-exec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn profile_writes_vidur_layout_that_cost_validate_fits() {
    let out = tmp("profile");
    let o = bin()
        .args(["profile", "--device", "cpu:0", "--model", "tiny-2l", "--quick", "--reps", "2", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["tiny-2l/mlp.csv", "tiny-2l/attention.csv", "tiny-2l/model_config.yml", "device_config.yml"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let dev = std::fs::read_to_string(out.join("device_config.yml")).unwrap();
    let peak: f64 = dev.lines().find_map(|l| l.strip_prefix("fp16_tflops: ")).unwrap().parse().unwrap();
    assert!(peak > 0.0005, "a measured peak: {peak} TFLOP/s");
    let o = bin().args(["cost", "validate", "--json", "--fit"]).arg(&out).arg("--test").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ops: Vec<&str> = r["ops"].as_array().unwrap().iter().map(|o| o["op"].as_str().unwrap()).collect();
    assert!(ops.contains(&"mlp_up_proj") && ops.contains(&"attn_decode"), "{ops:?}");
}

#[test]
fn profile_refuses_bad_devices_and_models_that_do_not_fit() {
    let out = tmp("profile-bad");
    for (args, want) in [
        (vec!["--device", "gpu:0", "--model", "tiny-2l"], "unknown device `gpu:0"),
        (vec!["--device", "cuda:x", "--model", "tiny-2l"], "the ordinal must be a number"),
        (vec!["--model", "gpt-9"], "unknown model `gpt-9`"),
        (vec!["--model", "llama-3-8b", "--memory-gb", "4"], "more than a device's"),
        (vec!["--model", "tiny-2l", "--tp", "3"], "--tp 3"),
    ] {
        let o = bin().arg("profile").args(&args).arg("--out").arg(&out).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `profile --device cuda:N` without a driver (CI): one line naming libcuda, a failing
/// exit, no panic; with one, the check is the GPU machine's (scripts/gpu-check.sh).
#[test]
fn profile_on_cuda_without_a_driver_is_one_line_naming_libcuda() {
    if slicesched_exec::cuda::libraries().driver {
        eprintln!("skipped: a CUDA driver is present (the GPU check profiles it)");
        return;
    }
    let out = tmp("profile-cuda");
    for args in [vec!["--device", "cuda:0"], vec!["--device", "cuda", "--tp", "2"], vec!["--device", "cuda:1"]] {
        let o = bin()
            .arg("profile")
            .args(&args)
            .args(["--model", "tiny-2l", "--quiet", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {err}");
        assert!(err.contains("CUDA unavailable") && err.contains("libcuda") && err.contains("--device cuda"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "nothing written without a GPU");
    }
}

#[test]
fn run_executes_a_scenario_and_writes_replays_files_plus_the_executor() {
    let out = tmp("run");
    let o = bin()
        .args([
            "run",
            "--scenario",
            "scenarios/tiny-2t.toml",
            "--policy",
            "native:slice",
            "--executor",
            "cpu",
            "--quiet",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["summary.json", "requests.csv", "ops.csv", "throughput.svg"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["oom_events"], 0);
    assert_eq!(s["requests"], s["completed"].as_u64().unwrap() + s["dropped"].as_array().map_or(0, |d| d.len() as u64));
    let e = &s["executor"];
    assert_eq!(e["backend"], "cpu");
    assert!(e["ops"].as_u64().unwrap() > 1000 && e["errors"].as_array().unwrap().is_empty(), "{e}");
    assert_eq!(e["devices"].as_array().unwrap().len(), 2);
    // The CPU backend has no collective library: the report says so (tp 1 here, so no
    // all-reduce ran at all).
    let c = &e["collectives"];
    assert_eq!((c["library_all_reduces"].as_u64(), c["copy_sum_all_reduces"].as_u64()), (Some(0), Some(0)), "{c}");
    assert!(c["backend"].as_str().unwrap().contains("copies + Sum"), "{c}");
    let ops = std::fs::read_to_string(out.join("ops.csv")).unwrap();
    assert!(ops.starts_with("serial,tenant,op,") && ops.lines().count() > 1000);
    let o = bin()
        .args(["run", "--scenario", "scenarios/tiny-2t.toml", "--executor", "cuda", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    // Without a driver (CI): one line naming what is missing, a failing exit, no panic.
    if !slicesched_exec::cuda::libraries().driver {
        assert!(!o.status.success() && err.contains("CUDA unavailable") && err.contains("libcuda"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn run_compare_replay_separates_the_models_error_from_the_hosts_noise() {
    let out = tmp("run-fidelity");
    let o = bin()
        .args(["run", "--scenario", "scenarios/tiny-2t.toml", "--executor", "cpu", "--quiet", "--compare-replay"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("online correction") && stdout.contains("host noise"), "{stdout}");
    let f: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("fidelity.json")).unwrap()).unwrap();
    for k in ["op", "op_online", "op_noise_floor", "ttft", "tpot"] {
        assert!(f[k]["median"].as_f64().is_some_and(|m| m >= 0.0), "{k}: {}", f[k]);
    }
    let n = |k: &str| f[k]["n"].as_u64().unwrap();
    assert_eq!(n("op"), n("op_online"));
    // Attention and shapes that ran fewer than three times are left out of the floor.
    assert!(n("op_noise_floor") > 0 && n("op_noise_floor") < n("op"), "{f}");
    assert!(f["op_by_kind"]["final_norm"]["n"].as_u64().unwrap() > 0);
    // The model's price of an op is its shape's, whatever the online correction did
    // between the iteration's launch and the op's run (it once read predicted ÷ the
    // correction at run time: one QKV shape priced 116 µs in layer 0 and 37 in layer 1).
    let csv = std::fs::read_to_string(out.join("ops.csv")).unwrap();
    let mut price: std::collections::HashMap<(String, String, String, String), String> = Default::default();
    for line in csv.lines().skip(1) {
        let c: Vec<&str> = line.split(',').collect();
        let (op, model_us) = (c[2], c[6]);
        if op == "attention" {
            continue; // priced by its KV length too, which ops.csv does not carry
        }
        let key = (c[1].to_string(), op.to_string(), c[5].to_string(), c[4].to_string());
        let seen = price.entry(key.clone()).or_insert_with(|| model_us.to_string());
        assert_eq!(seen, model_us, "{key:?} priced {seen} and {model_us} µs");
    }
}

/// The shipped `slice` policy as its Wasm build (scripts/test.sh, or `slicesched plugin
/// build`, writes `target/plugins/`), named by path so that a missing build fails here
/// instead of silently running the native policy.
#[test]
fn run_drives_a_shipped_wasm_plugin_on_the_cpu_executor() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let wasm = root.join("target/plugins/slice.wasm");
    assert!(wasm.is_file(), "{} missing: build the shipped plugins first (scripts/test.sh does)", wasm.display());
    let out = tmp("run-wasm");
    let o = bin()
        .args(["run", "--scenario", "scenarios/tiny-2t.toml", "--executor", "cpu", "--quiet", "--policy"])
        .arg(&wasm)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("quarantined"), "{err}");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["oom_events"], 0);
    assert!(s["executor"]["errors"].as_array().unwrap().is_empty(), "{}", s["executor"]);
    // The plugin decided (every op placed through it), and the run went through.
    assert_eq!(s["policy"], "slice");
    assert!(s["scheduling"]["decisions"].as_u64().unwrap() > 0, "{}", s["scheduling"]);
    assert!(s["executor"]["ops"].as_u64().unwrap() > 1000, "{}", s["executor"]);
}

/// A serving-replica policy on the device's own cost model (fitted by `profile`): `code`
/// is sent prompts of a few hundred tokens at the rate that keeps its tiny-4l's CPU
/// device ~80 % busy at its peak *on this host's measured times*, so the planner gives
/// `pooled` a whole copy of it (model and KV) on cpu:0, routing requests to it by load;
/// the executor loads that copy. A fixed rate (1.2/s) kept a CI host with faster cores
/// under the planner's threshold: no copy, and the test failed on the host, not the code.
#[test]
fn run_serves_requests_from_pooled_serving_replicas() {
    let shipped_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/tiny-2t.toml");
    let shipped = std::fs::read_to_string(&shipped_path).unwrap();
    let light = r#"kind = "poisson", rate = 0.5, prompt = { dist = "lognormal", median = 128, p90 = 384, max = 1024 }"#;
    assert!(shipped.contains(light), "tiny-2t's code trace changed: update this test");
    let prof = tmp("pooled-profile");
    let o = bin()
        .args(["profile", "--device", "cpu:0", "--model", "tiny-4l", "--quick", "--reps", "2", "--quiet", "--out"])
        .arg(&prof)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The cost model `run` fits on the profile: the rate changes the load, not the prices.
    let sku = Scenario::from_file(&shipped_path).unwrap().cluster.gpus[0].sku.clone();
    let cost = CostModel::fit_dir(&prof, &sku).unwrap();
    let scn = tmp("pooled-scenario").with_extension("toml");
    let loaded_at = |rate: f64| {
        let heavy = shipped.replace(
            light,
            &format!(r#"kind = "poisson", rate = {rate:.4}, prompt = {{ dist = "lognormal", median = 512, p90 = 900, max = 1024 }}"#),
        );
        std::fs::write(&scn, heavy).unwrap();
        tenant_loads_with(&Scenario::from_file(&scn).unwrap(), &cost)
    };
    // Busy share is about proportional to the rate; further steps correct for the
    // arrivals each new rate draws (a few requests decide a short trace's peak, and a
    // profile taken on a loaded host prices every op higher: two steps once ended at
    // 0.43 busy under CI's parallel tests).
    let mut rate = 1.2;
    for _ in 0..6 {
        let rho = loaded_at(rate)[1].rho_peak;
        if (0.7..0.9).contains(&rho) {
            break;
        }
        rate = (rate * 0.8 / rho).clamp(0.05, 20.0);
    }
    let loads = loaded_at(rate);
    assert!(loads[1].rho_peak > RHO_FIT, "code at {rate}/s is not busy enough to ask a copy: {loads:?}");
    assert!(loads[0].gpu_mean < OWNER_BUSY, "chat's device is too busy to lend: {loads:?}");
    let s = run_on_cpu(&scn, &prof, "native:pooled", "run-pooled");
    assert_eq!(s["oom_events"], 0);
    assert!(s["executor"]["errors"].as_array().unwrap().is_empty(), "{}", s["executor"]);
    assert_eq!(s["requests"], s["completed"].as_u64().unwrap() + s["dropped"].as_array().map_or(0, |d| d.len() as u64));
    // The serving copy of `code` (tiny-4l) was materialised beside `chat` (tiny-2l) on
    // cpu:0, so it holds more weights than cpu:1 (code's home alone). Whether requests
    // are routed to it depends on measured load, so that is not asserted.
    assert_eq!(s["scheduling"]["replicas"][0][0], "code", "{}", s["scheduling"]);
    let w = |i: usize| s["executor"]["devices"][i]["weights_bytes"].as_u64().unwrap();
    assert!(w(0) > w(1), "cpu:0 {} vs cpu:1 {} weight bytes", w(0), w(1));

    // `slice` on the same load may also borrow the serving copy's weights for ops of
    // `code`'s home instance (and the home's for the copy's; whether it does depends on
    // measured times): the executor runs them on weights loaded once. It used to refuse
    // them ("holds none of its weights"), failing the run;
    // `core/exec/tests/forward.rs` checks the sharing itself.
    let s = run_on_cpu(&scn, &prof, "native:slice", "run-slice-serving");
    assert_eq!(s["oom_events"], 0);
    assert!(s["executor"]["errors"].as_array().unwrap().is_empty(), "{}", s["executor"]);
    let sched = &s["scheduling"];
    assert!(sched["replicas"].as_array().unwrap().iter().any(|r| r[0] == "code" && r[3] == true), "{sched}");
    // Each copy's weights are loaded once, whatever number of instances use them: each
    // device holds the weights the simulator's plan charges it.
    for i in 0..2 {
        let exec = s["executor"]["devices"][i]["weights_bytes"].as_u64().unwrap() as f64;
        let plan: f64 = s["gpus"][i]["weights"].as_array().unwrap().iter().map(|w| w[2].as_f64().unwrap() * 1e9).sum();
        assert!((exec - plan).abs() < 0.05 * plan, "cpu:{i}: executor {exec} bytes of weights, plan {plan}");
    }
}

/// `slicesched run` of `scn` on the CPU executor under `policy`, priced by `prof`: its
/// summary.json.
fn run_on_cpu(scn: &Path, prof: &Path, policy: &str, tag: &str) -> serde_json::Value {
    let out = tmp(tag);
    let o = bin()
        .args(["run", "--executor", "cpu", "--quiet", "--policy", policy, "--scenario"])
        .arg(scn)
        .arg("--cost-profile")
        .arg(prof)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

/// phi's, Qwen3's and Mixtral's layouts through `run` on the CPU executor, with profiles
/// of their own (what a user of those models does first).
#[test]
fn run_serves_the_phi_qwen3_and_mixtral_layouts() {
    let prof = tmp("arch-prof");
    for model in ["tiny-phi", "tiny-qwen3", "tiny-mixtral"] {
        let o = bin()
            .args(["profile", "--device", "cpu", "--model", model, "--quick", "--reps", "1", "--quiet", "--out"])
            .arg(&prof)
            .output()
            .unwrap();
        assert!(o.status.success(), "{model}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(prof.join(model).join("mlp.csv").is_file(), "{model}");
    }
    // The profile says each layout in Vidur's keys, and measures a mixture's MLP columns
    // (its dense twin of one expert's width) instead of leaving them empty.
    let yml = |m: &str| std::fs::read_to_string(prof.join(m).join("model_config.yml")).unwrap();
    let phi = slicesched_model::ModelConfig::from_vidur_yaml(&yml("tiny-phi"), "phi", "tiny-phi").unwrap();
    assert!(phi.parallel_block && phi.norm == slicesched_model::Norm::Layer && !phi.gated_mlp, "{phi:?}");
    assert_eq!(phi.rotary_dim, Some(16));
    let mix = std::fs::read_to_string(prof.join("tiny-mixtral/mlp.csv")).unwrap();
    let head: Vec<&str> = mix.lines().next().unwrap().split(',').collect();
    let up = head.iter().position(|c| c.contains("mlp_up_proj")).unwrap();
    for row in mix.lines().skip(1) {
        let v: f64 = row.split(',').nth(up).unwrap().parse().unwrap();
        assert!(v > 0.0, "tiny-mixtral's up projection unmeasured: {row}");
    }
    let cost = ["--cost-profile".into(), prof.into_os_string()];
    run_serves("tiny-arch-3t", "native:slice", &cost, &["tiny-phi", "tiny-qwen3", "tiny-mixtral"]);
}

/// `run` of a shipped scenario on the CPU executor under `policy` (with `extra`
/// arguments): it ends well, without OOM or executor errors, and every tenant, of the
/// `models` given in order, has requests and completes them all.
fn run_serves(scenario: &str, policy: &str, extra: &[std::ffi::OsString], models: &[&str]) {
    let out = tmp(&format!("run-{scenario}"));
    let o = bin()
        .args(["run", "--scenario", &format!("scenarios/{scenario}.toml"), "--executor", "cpu", "--quiet"])
        .args(["--policy", policy])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["oom_events"], 0);
    assert!(s["executor"]["errors"].as_array().unwrap().is_empty(), "{}", s["executor"]);
    let tenants = s["tenants"].as_array().unwrap();
    let names: Vec<&str> = tenants.iter().map(|t| t["model"].as_str().unwrap()).collect();
    assert_eq!(names, models);
    for t in tenants {
        assert!(t["requests"].as_u64().unwrap() > 0, "{t}");
        assert_eq!(t["completed"], t["requests"], "{t}");
    }
}

/// Gemma-2's layout and an expert-parallel mixture through `run` on the CPU executor.
#[test]
fn run_serves_gemma2_and_an_expert_parallel_mixture() {
    run_serves("tiny-arch-ep", "native:dedicated", &[], &["tiny-gemma2", "tiny-mixtral"]);
}
