//! `slicesched scenario generate` end to end: every seed 1..=50 writes a scenario that
//! loads with the replay's parser, fits its GPUs' memory with a KV cache that holds
//! every request of its tenants, carries no planner knobs, and repeats byte for byte.

use slicesched_sim::Scenario;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slicesched"));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("slicesched-gen-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn generate(seed: u64, out: &Path, extra: &[&str]) -> std::process::Output {
    bin().args(["scenario", "generate", "--seed", &seed.to_string(), "--out"]).arg(out).args(extra).output().unwrap()
}

fn check(path: &Path, gpus: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    for knob in ["keep_kv_tokens", "max_replicas", "[planner]"] {
        assert!(!text.contains(knob), "{}: writes `{knob}`", path.display());
    }
    let s = Scenario::from_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(s.cluster.len(), gpus);
    let mut owner = vec![None; gpus];
    for (i, t) in s.tenants.iter().enumerate() {
        for g in &t.gpus {
            assert!(owner[g.0 as usize].is_none(), "{}: GPU {} is two tenants' home", path.display(), g.0);
            owner[g.0 as usize] = Some(i);
        }
        let kv = t.kv_blocks as u64 * t.engine.block_size as u64;
        let longest =
            s.requests.iter().filter(|(j, _)| *j as usize == i).map(|(_, r)| r.prompt_tokens + r.output_tokens);
        let longest = longest.max().unwrap_or(0) as u64;
        assert!(kv >= longest.max(32_768), "{}: {} keeps {kv} KV tokens, needs {longest}", path.display(), t.name);
        let served = s.requests.iter().filter(|(j, _)| *j as usize == i).count();
        assert!(served > 0, "{}: {} gets no requests", path.display(), t.name);
    }
    assert!(s.tenants.len() >= 2 || gpus < 8, "{}: one tenant on {gpus} GPUs", path.display());
    text
}

#[test]
fn every_seed_loads_fits_and_repeats() {
    let dir = tmp("seeds");
    let mut texts = Vec::new();
    for seed in 1..=50 {
        let (a, b) = (dir.join(format!("a/seed-{seed}.toml")), dir.join(format!("b/seed-{seed}.toml")));
        for p in [&a, &b] {
            let o = generate(seed, p, &[]);
            assert!(o.status.success(), "seed {seed}: {}", String::from_utf8_lossy(&o.stderr));
        }
        let text = check(&a, 8);
        assert_eq!(text, std::fs::read_to_string(&b).unwrap(), "seed {seed} is not deterministic");
        texts.push(text);
    }
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), 50, "two seeds drew the same mix");
}

#[test]
fn other_clusters_fit_too() {
    let dir = tmp("skus");
    for (sku, gpus) in [("A100-80GB", 4), ("H200-141GB", 16), ("L40S", 3), ("H100", 1)] {
        for seed in 1..=5 {
            let p = dir.join(format!("{sku}-{gpus}-{seed}.toml"));
            let o = generate(seed, &p, &["--sku", sku, "--gpus", &gpus.to_string()]);
            assert!(o.status.success(), "{sku} x{gpus} seed {seed}: {}", String::from_utf8_lossy(&o.stderr));
            check(&p, gpus);
        }
    }
}

#[test]
fn bad_inputs_are_named() {
    let out = tmp("bad").join("x.toml");
    let o = generate(1, &out, &["--sku", "B300"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--sku") && err.contains("B300"), "{err}");
    let o = generate(1, &out, &["--gpus", "0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("--gpus"), "{err}");
    let o = generate(1, &out, &["--traces", "/no/such/traces"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("/no/such/traces"), "{err}");
    assert!(!out.exists());
}
