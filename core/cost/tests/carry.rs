//! The model carried to GPUs it was not fitted on, several GPUs fitted at once, and the
//! profile folders as users bring them.

use slicesched_cost::{validate, validate_dirs, validate_dirs_leave_one_model_out, ProfileSet};
use std::path::{Path, PathBuf};

fn profiles(sku: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/profiles").join(sku)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("slicesched-carry-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a100_fit_carries_to_h100() {
    // Fitted on the A100 only; the H100 folder's device_config.yml names the GPU.
    let r = validate(&profiles("a100"), &profiles("h100"), None).unwrap();
    eprintln!("{}", r.table());
    assert!(r.overall.median <= 0.08 && r.overall.p90 <= 0.19, "{:?}", r.overall);
    // Models not in the fit at all: each H100 model predicted from the other A100 models.
    for m in validate_dirs_leave_one_model_out(&[&profiles("a100")], &profiles("h100"), None, &[]).unwrap() {
        eprintln!("H100, left out {}:\n{}", m.model, m.report.table());
        assert!(
            m.report.overall.median <= 0.092 && m.report.overall.p90 <= 0.222,
            "{}: {:?}",
            m.model,
            m.report.overall
        );
    }
}

#[test]
fn several_gpus_fit_at_once() {
    let (a, h) = (profiles("a100"), profiles("h100"));
    // Holding out a fifth of the H100 points while fitting both GPUs: H100 predicted by
    // its own curves, close to the A100's own hold-out figures.
    let r = validate_dirs(&[&a, &h], &h, None, &[]).unwrap();
    assert!(r.overall.median <= 0.03 && r.overall.p90 <= 0.10, "{}", r.table());
    // And the A100 hold-out does not suffer from the H100 being fitted beside it.
    let both = validate_dirs(&[&a, &h], &a, None, &[]).unwrap();
    let alone = validate(&a, &a, None).unwrap();
    assert!(both.overall.median <= alone.overall.median + 0.002, "{:?} vs {:?}", both.overall, alone.overall);
}

#[test]
fn test_gpu_must_match_the_folder() {
    let e = validate(&profiles("a100"), &profiles("h100"), Some("A100")).unwrap_err().to_string();
    assert!(e.contains("H100-80GB") && e.contains("A100-80GB") && e.contains("device_config.yml"), "{e}");
    let e = validate(&profiles("a100"), &profiles("h100"), Some("B300")).unwrap_err().to_string();
    assert!(e.contains("--test-sku") && e.contains("B300"), "{e}");
    assert!(validate(&profiles("a100"), &profiles("h100"), Some("h100")).is_ok());
}

#[test]
fn apex_tables_are_read_and_noted() {
    let d = tmp("apex");
    let m = d.join("Llama-2-7b-hf");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["mlp.csv", "model_config.yml"] {
        std::fs::copy(profiles("a100").join("Llama-2-7b-hf").join(f), m.join(f)).unwrap();
    }
    let net = d.join("network_apex_sxm");
    std::fs::create_dir_all(&net).unwrap();
    let head = "gpu,num_nodes,num_gpus_per_node,dtype,size(kb),time(us),gpu_freq,energy(J)\n";
    let rows: String = (0..12)
        .flat_map(|i| [2, 4].map(move |g| format!("A100-SXM-80GB,1,{g},half,{},{}\n", 1 << i, 10 + (1 << i) / 100)))
        .collect();
    std::fs::write(net.join("all_reduce.csv"), format!("{head}{rows}")).unwrap();
    std::fs::write(net.join("alltoall.csv"), head).unwrap();
    let set = ProfileSet::from_dir(&d).unwrap();
    assert_eq!(set.networks.len(), 1);
    assert!(set.networks[0].apex && set.networks[0].all_reduce.len() == 24);
    assert!(set.notes.iter().any(|n| n.contains("network_apex_sxm") && n.contains("alltoall.csv")), "{:?}", set.notes);
    assert!(validate(&d, &d, None).is_ok());
    let bad = format!("{head}A100-SXM-80GB,1,2,half,4,abc\n");
    std::fs::write(net.join("all_reduce.csv"), bad).unwrap();
    let e = ProfileSet::from_dir(&d).unwrap_err().to_string();
    assert!(e.contains("all_reduce.csv") && e.contains("time(us)") && e.contains("abc"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_gpu_missing_from_the_catalog_is_given_by_its_device_config() {
    let d = tmp("x200");
    let m = d.join("Llama-2-7b-hf");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["mlp.csv", "model_config.yml"] {
        std::fs::copy(profiles("h100").join("Llama-2-7b-hf").join(f), m.join(f)).unwrap();
    }
    // The H100's datasheet under another name: carried like the H100.
    let cfg = "name: X200\nfp16_tflops: 989.4\ntotal_memory_gb: 80\nhbm_gbps: 3350\nsm_count: 132\nclock_ghz: 1.98\n";
    std::fs::write(d.join("device_config.yml"), cfg).unwrap();
    let r = validate(&profiles("a100"), &d, None).unwrap();
    assert!(r.overall.median <= 0.10, "{}", r.table());
    std::fs::write(d.join("device_config.yml"), "fp16_tflops: 2250\ntotal_memory_gb: 180\n").unwrap();
    let e = validate(&profiles("a100"), &d, None).unwrap_err().to_string();
    assert!(e.contains("device_config.yml") && e.contains("hbm_gbps"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
