//! `slicesched sweep` end to end on the smoke scenario: the `sweep.json` contract and the plot.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slicesched"));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("slicesched-sweep-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn sweep_writes_the_contract_and_a_plot() {
    let out = tmp("smoke");
    let o = bin()
        .args([
            "sweep",
            "--scenario",
            "scenarios/smoke.toml",
            "--policies",
            "dedicated",
            "--violation-targets",
            "0.05,0.2",
        ])
        .args(["--precision", "0.2", "--max-scale", "8", "--jobs", "2", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("rate scale") && table.contains("dedicated"), "{table}");

    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(v["scenario"], "smoke");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        for k in [
            "policy",
            "target",
            "rate_scale",
            "prompt_tokens_per_s",
            "output_tokens_per_s",
            "violation_rate",
            "oom_events",
        ] {
            assert!(r.get(k).is_some(), "result lacks `{k}`: {r}");
        }
        assert_eq!(r["policy"], "dedicated");
        assert_eq!(r["oom_events"], 0);
        assert!(r["violation_rate"].as_f64().unwrap() <= r["target"].as_f64().unwrap() || r["rate_scale"] == 0.0);
    }
    let scale = |t: f64| results.iter().find(|r| r["target"] == t).unwrap()["rate_scale"].as_f64().unwrap();
    assert!(scale(0.2) >= scale(0.05), "looser target {} < stricter {}", scale(0.2), scale(0.05));
    assert!(scale(0.05) > 0.0 && scale(0.2) <= 8.0);
    for r in v["ratios"].as_array().unwrap() {
        for k in ["policy", "target", "goodput_vs_dedicated"] {
            assert!(r.get(k).is_some(), "ratio lacks `{k}`: {r}");
        }
        assert_eq!(r["goodput_vs_dedicated"], 1.0);
    }
    // Both targets were answered from one set of replays: no scale was replayed twice.
    let points = v["points"].as_array().unwrap();
    let mut scales: Vec<f64> = points.iter().map(|p| p["rate_scale"].as_f64().unwrap()).collect();
    scales.dedup();
    assert_eq!(scales.len(), points.len());

    let svg = std::fs::read_to_string(out.join("violation_vs_rate.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("dedicated") && svg.contains("target 20%"));
}

/// Requests refused for their length violate under every policy at every scale: a
/// target below their share has no goodput, found without replaying down to the
/// smallest scale; a looser target is searched as usual.
#[test]
fn targets_below_the_refused_share_have_no_goodput_without_replays() {
    let smoke = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/smoke.toml")).unwrap();
    let chat = "model = \"llama-2-7b\"\n";
    assert!(smoke.contains(chat), "smoke's chat tenant changed: update this test");
    // Half of chat's prompts (median 1,469 tokens) do not fit 1,024 tokens.
    let scn = tmp("refused").with_extension("toml");
    std::fs::write(&scn, smoke.replacen(chat, &format!("{chat}max_model_len = 1024\n"), 1)).unwrap();
    let out = tmp("refused-out");
    let o = bin()
        .args(["sweep", "--policies", "dedicated", "--violation-targets", "0.05,0.95", "--precision", "0.3"])
        .args(["--max-scale", "4", "--jobs", "2", "--scenario"])
        .arg(&scn)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("refused for their length") && err.contains("no goodput at 5.0%"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    let result = |t: f64| v["results"].as_array().unwrap().iter().find(|r| r["target"] == t).unwrap().clone();
    assert_eq!(result(0.05)["status"], "violates_at_min_scale");
    assert_eq!(result(0.05)["rate_scale"], 0.0);
    assert!(result(0.05)["violation_rate"].as_f64().unwrap() > 0.05);
    let refused = v["refused_share"].as_f64().unwrap();
    assert!(refused > 0.05 && refused < 0.95, "{refused}");
    // The table says why, not that scales down to the smallest were tried.
    let table = String::from_utf8_lossy(&o.stdout);
    let row = table.lines().find(|l| l.contains("5.0%")).expect("the 5% row");
    assert!(row.contains("refused for their length") && !row.contains("violates even"), "{table}");
    assert!(result(0.95)["rate_scale"].as_f64().unwrap() > 0.0, "{}", result(0.95));
    // Nothing was replayed below the loose target's own search.
    let lowest = v["points"].as_array().unwrap().iter().map(|p| p["rate_scale"].as_f64().unwrap()).fold(9.0, f64::min);
    assert!(lowest >= 0.25, "replayed down to {lowest}");
}

#[test]
fn sweep_refuses_unknown_policies_naming_the_builtins() {
    let o = bin()
        .args(["sweep", "--scenario", "scenarios/smoke.toml", "--policies", "dedicated,magic", "--quiet", "--out"])
        .arg(tmp("pol"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown policy `magic`") && err.contains("dedicated"), "{err}");
}

/// Each policy's searches plan their rounds from their own points alone, with a width
/// fixed when the sweep starts, so which replay finishes first changes nothing: with as
/// many policies as threads, one thread and two find the same scales from the same points.
#[test]
fn the_figures_do_not_depend_on_which_replay_finishes_first() {
    // With two draws a point is two replays, which may come back in either order.
    let run = |jobs: &str, seeds: &str| {
        let out = tmp(&format!("jobs{jobs}-seeds{seeds}"));
        let o = bin()
            .args(["sweep", "--scenario", "scenarios/smoke.toml", "--policies", "dedicated,native:pooled"])
            .args(["--violation-targets", "0.05,0.2", "--precision", "0.2", "--max-scale", "8", "--quiet"])
            .args(["--jobs", jobs, "--seeds", seeds, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
        let points: Vec<(String, f64, f64)> = v["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let f = |k: &str| p[k].as_f64().unwrap();
                (p["policy"].as_str().unwrap().to_string(), f("rate_scale"), f("violation_rate"))
            })
            .collect();
        (v["results"].clone(), points)
    };
    for seeds in ["1", "2"] {
        let (one, two) = (run("1", seeds), run("2", seeds));
        assert_eq!(one.0, two.0, "results, {seeds} draw(s)");
        assert_eq!(one.1, two.1, "points, {seeds} draw(s)");
        assert!(one.1.iter().any(|p| p.0 == "native:pooled") && one.1.iter().any(|p| p.0 == "dedicated"));
    }
}

/// `--seeds K`: every point replays K draws of the scenario, the file's own seed first,
/// and its violation rate is that of all their requests; each draw is what `replay
/// --seed` replays.
#[test]
fn a_point_of_several_draws_counts_the_requests_of_every_draw() {
    let out = tmp("draws");
    let o = bin()
        .args(["sweep", "--scenario", "scenarios/smoke.toml", "--policies", "dedicated", "--seeds", "2"])
        .args(["--violation-targets", "0.05", "--precision", "0.2", "--max-scale", "8", "--jobs", "2", "--quiet"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    let seeds: Vec<u64> = v["seeds"].as_array().expect("seeds recorded").iter().map(|s| s.as_u64().unwrap()).collect();
    assert_eq!((seeds.len(), seeds[0]), (2, 7), "the file's own seed first: {seeds:?}");
    // The busiest point replayed: the one with the most violations.
    let points = v["points"].as_array().unwrap();
    let top = points
        .iter()
        .max_by(|a, b| a["rate_scale"].as_f64().unwrap().total_cmp(&b["rate_scale"].as_f64().unwrap()))
        .unwrap();
    let scale = top["rate_scale"].as_f64().unwrap();
    let mut draws = Vec::new();
    for (k, seed) in seeds.iter().enumerate() {
        let dir = out.join(format!("draw-{k}"));
        let o = bin()
            .args(["replay", "--scenario", "scenarios/smoke.toml", "--policy", "dedicated", "--quiet"])
            // The first by its seed, the second by its index: `--draw K` names draw K.
            .args(if k == 0 { ["--seed".to_string(), seed.to_string()] } else { ["--draw".to_string(), k.to_string()] })
            .args(["--rate-scale", &scale.to_string(), "--out"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
        assert_eq!(s["seed"].as_u64(), Some(*seed));
        draws.push((s["requests"].as_f64().unwrap(), s["violation_rate"].as_f64().unwrap()));
    }
    assert_ne!(draws[0], draws[1], "two draws of a synthetic load differ");
    let pooled = draws.iter().map(|(n, v)| n * v).sum::<f64>() / draws.iter().map(|d| d.0).sum::<f64>();
    let at = top["violation_rate"].as_f64().unwrap();
    assert!((at - pooled).abs() < 1e-9, "point {at} against the draws' requests together {pooled}");
    assert_ne!(top["stopped_early"], true, "several draws are replayed whole");
}
