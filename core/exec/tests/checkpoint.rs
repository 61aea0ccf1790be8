//! Checkpoint folders: written, read back, and refused when they do not fit the config.

mod common;

use common::*;
use slicesched_exec::checkpoint;
use slicesched_exec::model::HostTensor;
use slicesched_exec::runner::Runner;

#[test]
fn single_file_roundtrip_runs_identically() {
    let dir = tempfile::tempdir().unwrap();
    let m = micro();
    let w = weights(&m);
    checkpoint::save(dir.path(), &m, &w, None).unwrap();
    assert!(dir.path().join("model.safetensors").exists());
    let (m2, w2) = checkpoint::load(dir.path()).unwrap();
    assert_eq!(w2, w, "every tensor comes back bit for bit");
    assert_eq!(m2.config.hidden_size, m.config.hidden_size);
    assert_eq!(m2.numerics, m.numerics);
    let b = backend(1);
    let mut r = Runner::new(&b);
    let t1 = r.load_tenant(m.clone(), &w, &devices(&[0]), 8).unwrap();
    let t2 = r.load_tenant(m2, &w2, &devices(&[0]), 8).unwrap();
    let p = prompt(7, m.vocab(), 1);
    assert_eq!(generate(&mut r, t1, 1, &p, 3, &home), generate(&mut r, t2, 1, &p, 3, &home));
}

#[test]
fn sharded_checkpoint_with_index_loads() {
    let dir = tempfile::tempdir().unwrap();
    let m = micro();
    let w = weights(&m);
    checkpoint::save(dir.path(), &m, &w, Some(40_000)).unwrap();
    let shards = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("model-"))
        .count();
    assert!(shards > 2, "{shards} shards");
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("model.safetensors.index.json")).unwrap())
            .unwrap();
    assert_eq!(index["weight_map"].as_object().unwrap().len(), w.tensors.len());
    let (_, w2) = checkpoint::load(dir.path()).unwrap();
    assert_eq!(w2, w);
}

#[test]
fn a_mismatched_checkpoint_is_refused_naming_tensor_and_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let m = micro();
    let mut w = weights(&m);
    let name = "model.layers.1.self_attn.k_proj.weight";
    w.tensors.insert(name.into(), HostTensor { shape: vec![16, 64], data: random_bf16(16 * 64, 3, 1.0) });
    checkpoint::save(dir.path(), &m, &w, None).unwrap();
    let e = checkpoint::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains(name) && e.contains("[16, 64]") && e.contains("[32, 64]"), "{e}");

    let w = weights(&m);
    let mut missing = w.clone();
    missing.tensors.remove("model.norm.weight");
    checkpoint::save(dir.path(), &m, &missing, None).unwrap();
    let e = checkpoint::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("model.norm.weight") && e.contains("missing"), "{e}");

    // A config whose model differs from the weights: every layer-0 tensor is the wrong width.
    let mut wide = m.clone();
    wide.config.intermediate_size = 256;
    std::fs::write(dir.path().join("config.json"), checkpoint::config_json(&wide)).unwrap();
    checkpoint::save(&dir.path().join("w"), &m, &w, None).unwrap();
    std::fs::copy(dir.path().join("w/model.safetensors"), dir.path().join("model.safetensors")).unwrap();
    let e = checkpoint::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("mlp.") && e.contains("128") && e.contains("256"), "{e}");

    let e = checkpoint::load(&dir.path().join("nowhere")).unwrap_err().to_string();
    assert!(e.contains("config.json"), "{e}");
}

#[test]
fn hf_config_numerics_are_read() {
    let m = micro();
    let mut j: serde_json::Value = serde_json::from_str(&checkpoint::config_json(&m)).unwrap();
    j["rope_theta"] = 500000.0.into();
    j["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
    let n = slicesched_exec::model::Numerics::from_hf_json(&m.config, &j.to_string()).unwrap();
    assert_eq!(n.rope_theta, 500000.0);
    assert_eq!(n.rope_scaling.unwrap().factor, 8.0);
    j["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0});
    let e = slicesched_exec::model::Numerics::from_hf_json(&m.config, &j.to_string()).unwrap_err().to_string();
    assert!(e.contains("yarn"), "{e}");
}
