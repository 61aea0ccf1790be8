//! The presets read from published `config.json` files, and what the parser refuses.

use slicesched_model::{Act, IterationBatch, ModelConfig, Norm, OpKind, PrefillItem};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/configs/{name}.json", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn billions(m: &ModelConfig) -> f64 {
    m.parameters() as f64 / 1e9
}

#[test]
fn published_parameter_counts() {
    // Published totals: Mixtral 46.7B, Qwen3-30B-A3B 30.5B, Qwen3-8B 8.2B, Gemma-2-9B
    // 9.24B, phi-2 2.78B, Llama-3.1-70B 70.6B, Mistral-7B 7.24B.
    for (name, want, tol) in [
        ("mixtral-8x7b", 46.70, 0.1),
        ("qwen3-30b-a3b", 30.53, 0.1),
        ("qwen3-8b", 8.19, 0.05),
        ("gemma-2-9b", 9.24, 0.05),
        ("phi-2", 2.78, 0.02),
        ("llama-3.1-70b", 70.55, 0.1),
        ("mistral-7b-v0.1", 7.24, 0.05),
    ] {
        let m = ModelConfig::preset(name).unwrap();
        assert!((billions(&m) - want).abs() < tol, "{name}: {}", billions(&m));
        assert_eq!(m.name, name);
    }
}

#[test]
fn active_parameters_of_a_decode_token() {
    // Mixtral-8x7B is published as 12.9B active, Qwen3-30B-A3B as 3.3B: one decode
    // token's ops read that many weights.
    let one = IterationBatch { prefills: vec![PrefillItem { chunk: 1, prior_kv: 0, samples: true }], decodes: vec![] };
    for (name, want, tol) in [("mixtral-8x7b", 12.9, 0.1), ("qwen3-30b-a3b", 3.35, 0.1)] {
        let m = ModelConfig::preset(name).unwrap();
        let d = m.iteration_dag(&one, 1);
        let read: u64 = d.ops().map(|o| o.spec.weight_bytes).sum();
        let b = read as f64 / 2.0 / 1e9;
        assert!((b - want).abs() < tol, "{name}: {b}");
    }
}

#[test]
fn features_are_read() {
    let phi = ModelConfig::preset("phi-2").unwrap();
    assert!(phi.parallel_block && !phi.gated_mlp && phi.norm == Norm::Layer && phi.activation == Act::GeluTanh);
    assert_eq!(phi.rotary_dim, Some(32));
    assert!(phi.biases.qkv && phi.biases.o && phi.biases.mlp && phi.biases.lm_head);
    let g = ModelConfig::preset("gemma-2-9b").unwrap();
    assert!(g.sandwich_norms && g.tie_embeddings && g.activation == Act::GeluTanh);
    assert_eq!((g.sliding_window, g.window_layers, g.head_dim), (Some(4096), Some(21), 256));
    assert_eq!(g.kv_window(), None, "global layers keep all the context");
    let q = ModelConfig::preset("qwen3-8b").unwrap();
    assert!(q.qk_norm && q.sliding_window.is_none() && !q.tie_embeddings);
    let mx = ModelConfig::preset("mixtral-8x7b").unwrap().moe.unwrap();
    assert_eq!((mx.experts, mx.top_k, mx.expert_intermediate), (8, 2, 14336));
    let qm = ModelConfig::preset("qwen3-30b-a3b").unwrap().moe.unwrap();
    assert_eq!((qm.experts, qm.top_k, qm.expert_intermediate), (128, 8, 768));
    let ms = ModelConfig::preset("mistral-7b-v0.1").unwrap();
    assert_eq!(ms.kv_window(), Some(4096));
    let l = ModelConfig::preset("llama-3.1-70b").unwrap();
    assert_eq!(l.departure_from_llama(), None);
    assert_eq!(l.weight_bytes_per_gpu(1), ModelConfig::preset("llama-3-70b").unwrap().weight_bytes_per_gpu(1));
    // The float32 upload is served in bf16; parsed as given it is float32.
    let g32 = ModelConfig::from_hf_json(&fixture("gemma-2-9b"), "g.json", "g").unwrap();
    assert_eq!(g32.weight_bytes_per_gpu(1), 2 * g.weight_bytes_per_gpu(1));
}

#[test]
fn a_key_not_understood_is_named() {
    let text = fixture("llama-3.1-70b").replacen('{', "{\n  \"shared_expert_intermediate_size\": 5632,", 1);
    let e = ModelConfig::from_hf_json(&text, "c.json", "x").unwrap_err().to_string();
    assert!(e.contains("shared_expert_intermediate_size") && e.contains("c.json"), "{e}");
    let text = fixture("phi-2").replace("\"model_type\": \"phi\"", "\"model_type\": \"falcon\"");
    let e = ModelConfig::from_hf_json(&text, "c.json", "x").unwrap_err().to_string();
    assert!(e.contains("falcon") && e.contains("model_type"), "{e}");
    // A key of another family is not silently taken.
    let text = fixture("qwen3-8b").replacen('{', "{\n  \"num_local_experts\": 4,", 1);
    let e = ModelConfig::from_hf_json(&text, "c.json", "x").unwrap_err().to_string();
    assert!(e.contains("num_local_experts"), "{e}");
    let text = fixture("qwen3-30b-a3b").replace("\"mlp_only_layers\": []", "\"mlp_only_layers\": [0]");
    let e = ModelConfig::from_hf_json(&text, "c.json", "x").unwrap_err().to_string();
    assert!(e.contains("mlp_only_layers"), "{e}");
    let text = fixture("phi-2").replace("\"gelu_new\"", "\"relu2\"");
    let e = ModelConfig::from_hf_json(&text, "c.json", "x").unwrap_err().to_string();
    assert!(e.contains("hidden_act") && e.contains("relu2"), "{e}");
}

#[test]
fn cost_neutral_keys_are_documented_in_the_readme() {
    let readme = std::fs::read_to_string(format!("{}/../../README.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for k in slicesched_model::COST_NEUTRAL_KEYS {
        assert!(readme.contains(&format!("`{k}`")), "README does not list `{k}`");
    }
}

#[test]
fn mistral_window_null_is_none_and_absent_is_the_default() {
    let v01 = fixture("mistral-7b-v0.1");
    let v02 = v01.replace("\"sliding_window\": 4096", "\"sliding_window\": null");
    let m = ModelConfig::from_hf_json(&v02, "c.json", "x").unwrap();
    assert_eq!(m.sliding_window, None);
    assert_eq!(m.weight_bytes_per_gpu(1), ModelConfig::preset("mistral-7b").unwrap().weight_bytes_per_gpu(1));
    let absent = v01.replace("  \"sliding_window\": 4096,\n", "");
    assert!(!absent.contains("sliding_window"));
    assert_eq!(ModelConfig::from_hf_json(&absent, "c.json", "x").unwrap().kv_window(), Some(4096));
}

#[test]
fn qwen_window_only_when_asked() {
    let text = fixture("qwen3-8b")
        .replace("\"use_sliding_window\": false", "\"use_sliding_window\": true")
        .replace("\"sliding_window\": null", "\"sliding_window\": 4096")
        .replace("\"max_window_layers\": 36", "\"max_window_layers\": 28");
    let m = ModelConfig::from_hf_json(&text, "c.json", "x").unwrap();
    assert_eq!((m.sliding_window, m.window_layers), (Some(4096), Some(8)));
    assert_eq!(m.windowed_layers(), 8);
}

#[test]
fn moe_tp_splits() {
    let mut m = ModelConfig::preset("mixtral-8x7b").unwrap();
    assert!(m.check_tp(8).is_ok() && m.check_tp(3).is_err());
    m.moe.as_mut().unwrap().expert_parallel = true;
    assert!(m.check_tp(8).is_ok());
    assert!(m.check_tp(16).unwrap_err().contains("experts"));
    let tp2 = m.weight_bytes_per_gpu(2);
    m.moe.as_mut().unwrap().expert_parallel = false;
    assert_eq!(tp2, m.weight_bytes_per_gpu(2), "whole experts or split ones: the same bytes per GPU");
    assert!(m.iteration_dag(&IterationBatch::default(), 2).layer.iter().all(|o| o.kind != OpKind::AllToAll));
}
