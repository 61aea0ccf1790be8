//! Layouts beyond Llama's on the CPU executor (LayerNorm, GELU, plain MLPs, biases,
//! parallel blocks, partial rotary, Qwen3's query/key norms, sliding windows, tied
//! embeddings), each against the f64 reference forward pass, at home and split
//! tensor-parallel; what it does not run it refuses before loading anything.

mod common;

use common::*;
use slicesched_exec::model::{ExecModel, HostWeights};
use slicesched_exec::reference;
use slicesched_exec::runner::{ExecBatch, Runner, SeqWork};
use slicesched_exec::{checkpoint, Backend};
use slicesched_model::ModelConfig;

/// Router logits closer than this may order differently in bf16 than in f64.
const ROUTING_TIE: f64 = 0.02;

/// Greedy tokens and logits against the reference (as `forward.rs` checks Llama).
/// Returns how many steps it compared.
fn check(m: &ExecModel, w: &HostWeights, prompt: &[i32], toks: &[i32], logits: &[Vec<f32>]) -> usize {
    let mut compared = 0;
    let mut seq = prompt.to_vec();
    seq.extend(&toks[..toks.len() - 1]);
    let (want, margins) = reference::forward_routed(m, w, &seq).unwrap();
    for (step, (t, l)) in toks.iter().zip(logits).enumerate() {
        let at = prompt.len() - 1 + step;
        // A position routed on a near tie may take another expert in bf16 than in f64
        // (`forward_routed`); earlier positions' ties reach it only diluted by attention.
        if margins[at] < ROUTING_TIE {
            eprintln!("{}: step {step}: a routing margin of {:.4}, not compared", m.config.name, margins[at]);
            continue;
        }
        compared += 1;
        let r = &want[at];
        let e = rel_err(l, r);
        assert!(e < 3e-2, "{}: step {step}: logits rel err {e}", m.config.name);
        let mut sorted = r.clone();
        sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
        if sorted[0] - sorted[1] > 0.05 * sorted[0].abs().max(1.0) {
            let best = r.iter().enumerate().fold(0, |b, (i, x)| if *x > r[b] { i } else { b });
            assert_eq!(*t as usize, best, "{}: step {step}: greedy token", m.config.name);
        }
    }
    compared
}

fn run_on(m: &ExecModel, ranks: usize, prompt_len: usize, steps: usize) {
    let b = backend(ranks);
    let w = weights(m);
    let mut r = Runner::new(&b);
    let ids: Vec<u32> = (0..ranks as u32).collect();
    let t = r.load_tenant(m.clone(), &w, &devices(&ids), 16).unwrap();
    let p = prompt(prompt_len, m.vocab(), 3);
    let (toks, logits) = generate(&mut r, t, 1, &p, steps, &home);
    // Every step of a dense model; most of a mixture's (a few route on near ties).
    let compared = check(m, &w, &p, &toks, &logits);
    let want = if m.config.moe.is_some() { steps.div_ceil(2) } else { steps };
    assert!(compared >= want, "{}: {compared} of {steps} steps compared", m.config.name);
}

#[test]
fn every_layout_matches_the_reference_at_home() {
    for family in ["phi", "qwen2", "qwen3", "window", "gelu", "moe", "qwen3moe"] {
        run_on(&arch(family), 1, 19, 5);
    }
}

#[test]
fn biases_and_parallel_blocks_split_tensor_parallel() {
    // Column-parallel biases are split with their rows, row-parallel ones added once.
    for family in ["phi", "qwen2", "gelu", "qwen3", "moe", "qwen3moe"] {
        run_on(&arch(family), 2, 11, 3);
    }
}

#[test]
fn a_windowed_prompt_in_chunks_equals_one_chunk() {
    // Chunks of 5 over a window of 8: later chunks read keys a window back across the
    // chunk boundary, and earlier ones no longer.
    let m = arch("window");
    let w = weights(&m);
    let b = backend(1);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 16).unwrap();
    let p = prompt(23, m.vocab(), 5);
    let (whole, lw) = generate(&mut r, t, 1, &p, 1, &home);
    let mut last = None;
    for (i, c) in p.chunks(5).enumerate() {
        let s =
            SeqWork { seq: 2, tokens: c.to_vec(), start_pos: i * 5, prefill: true, samples: (i + 1) * 5 >= p.len() };
        last = Some(r.run(t, &ExecBatch { seqs: vec![s] }, &home, true).unwrap());
    }
    let out = last.unwrap();
    assert_eq!(out.tokens[0].1, whole[0]);
    let e = rel_err(&out.logits.unwrap()[0], &lw[0].iter().map(|v| *v as f64).collect::<Vec<_>>());
    assert!(e < 1e-2, "chunked vs whole: {e}");
}

#[test]
fn a_windowed_sequence_runs_longer_than_its_cache() {
    // Window 8, chunks of 5, a cache of 3 blocks (48 tokens): 60 positions fit only
    // because blocks no query sees again are recycled, as many as the engine books for
    // it (`slicesched_model::kv::live_blocks`), and the logits still match the reference.
    let m = arch("window");
    let window = m.window() as u32;
    assert!(window > 0 && window < 16);
    let w = weights(&m);
    let b = backend(1);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 3).unwrap();
    let p = prompt(57, m.vocab(), 11);
    let (mut booked, mut last) = (0, None);
    let mut seq = p.clone();
    let mut start = 0;
    while start < p.len() {
        let c = &p[start..(start + 5).min(p.len())];
        let end = start + c.len();
        let s = SeqWork { seq: 4, tokens: c.to_vec(), start_pos: start, prefill: true, samples: end == p.len() };
        last = Some(r.run(t, &ExecBatch { seqs: vec![s] }, &home, true).unwrap());
        booked = booked.max(slicesched_model::kv::live_blocks(16, Some(window), start as u32, end as u32));
        assert_eq!(3 - r.tenants[t].free_kv_blocks() as u32, booked, "blocks held after {start}..{end}");
        start = end;
    }
    let mut out = last.unwrap();
    for pos in p.len()..p.len() + 3 {
        let tok = out.tokens[0].1;
        seq.push(tok);
        let want = reference::forward(&m, &w, &seq[..pos]).unwrap();
        let e = rel_err(&out.logits.as_ref().unwrap()[0], &want[pos - 1]);
        assert!(e < 3e-2, "position {pos}: logits rel err {e}");
        let s = SeqWork { seq: 4, tokens: vec![tok], start_pos: pos, prefill: false, samples: true };
        out = r.run(t, &ExecBatch { seqs: vec![s] }, &home, true).unwrap();
    }
    r.release(t, 4);
    assert_eq!(r.tenants[t].free_kv_blocks(), 3, "every block back once");
}

#[test]
fn the_window_changes_what_a_long_prompt_sees() {
    // Guard against a window the kernels ignore: with it the logits differ from the
    // same weights without it.
    let m = arch("window");
    let mut full = m.clone();
    full.config.sliding_window = None;
    let w = weights(&m);
    let p = prompt(20, m.vocab(), 9);
    let a = reference::forward(&m, &w, &p).unwrap();
    let b = reference::forward(&full, &w, &p).unwrap();
    assert_eq!(a[7], b[7], "within the window nothing changes");
    let diff: f64 = a[19].iter().zip(&b[19]).map(|(x, y)| (x - y).abs()).sum();
    assert!(diff > 1e-3, "past the window the masked keys matter: {diff}");
}

#[test]
fn checkpoints_of_other_families_round_trip() {
    for family in ["phi", "qwen2", "qwen3", "window", "moe", "qwen3moe"] {
        let dir = tempfile::tempdir().unwrap();
        let m = arch(family);
        let w = weights(&m);
        checkpoint::save(dir.path(), &m, &w, None).unwrap();
        let (m2, w2) = checkpoint::load(dir.path()).unwrap();
        assert_eq!(w2, w, "{family}: every tensor back bit for bit");
        assert_eq!(m2.numerics.tie_word_embeddings, m.numerics.tie_word_embeddings, "{family}");
        let c = (&m2.config, &m.config);
        assert_eq!(
            (c.0.norm, c.0.activation, c.0.biases, c.0.gated_mlp),
            (c.1.norm, c.1.activation, c.1.biases, c.1.gated_mlp)
        );
        assert_eq!(
            (c.0.parallel_block, c.0.rotary_dim, c.0.qk_norm, c.0.sliding_window),
            (c.1.parallel_block, c.1.rotary_dim, c.1.qk_norm, c.1.sliding_window)
        );
    }
    // phi's own names: `dense`, `fc1`/`fc2`, `final_layernorm`, an LM head bias.
    let names: Vec<String> = arch("phi").tensor_shapes().into_iter().map(|(n, _)| n).collect();
    for n in [
        "model.layers.0.self_attn.dense.bias",
        "model.layers.1.mlp.fc1.weight",
        "model.final_layernorm.bias",
        "lm_head.bias",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    assert!(!names.iter().any(|x| x.contains("post_attention_layernorm") || x.contains("gate_proj")));
    // A plain MLP in sequential blocks is no Hugging Face family's layout: refused, and
    // nothing written.
    let dir = tempfile::tempdir().unwrap();
    let m = arch("gelu");
    let e = checkpoint::save(&dir.path().join("ck"), &m, &weights(&m), None).unwrap_err().to_string();
    assert!(e.contains("no Hugging Face model family"), "{e}");
    assert!(!dir.path().join("ck").exists());
}

#[test]
fn a_bias_missing_from_a_checkpoint_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let m = arch("qwen2");
    let mut w = weights(&m);
    w.tensors.remove("model.layers.1.self_attn.v_proj.bias");
    let e = {
        let b = backend(1);
        let mut r = Runner::new(&b);
        r.load_tenant(m.clone(), &w, &devices(&[0]), 4).err().unwrap().to_string()
    };
    assert!(e.contains("model.layers.1.self_attn.v_proj.bias"), "{e}");
    checkpoint::save(dir.path(), &m, &w, None).unwrap();
    let e = checkpoint::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("v_proj.bias") && e.contains("missing"), "{e}");
}

#[test]
fn layouts_the_cpu_backend_lacks_are_refused_before_loading() {
    let b = backend(1);
    let mut alibi = micro();
    alibi.config.alibi = true;
    let mut sandwich = micro();
    sandwich.config.sandwich_norms = true;
    let mut some_windowed = micro();
    some_windowed.config.sliding_window = Some(8);
    some_windowed.config.window_layers = Some(1);
    for (m, what) in [(alibi, "ALiBi"), (sandwich, "sandwich norms"), (some_windowed, "some layers only")] {
        let w = weights(&m);
        let mut r = Runner::new(&b);
        let e = r.load_tenant(m, &w, &devices(&[0]), 4).err().unwrap().to_string();
        assert!(e.contains(what) && e.contains("CPU backend"), "{e}");
        assert_eq!(b.ledger(slicesched_exec::DeviceId(0)).unwrap().used(), 0, "nothing left loaded");
    }
    // The published configs the CPU backend runs: phi-2, Qwen3-8B, Mistral-7B v0.1,
    // Mixtral-8x7B, Qwen3-30B-A3B (experts split tensor-parallel, not expert-parallel).
    for name in ["phi-2", "qwen3-8b", "mistral-7b-v0.1"] {
        let c = ModelConfig::preset(name).unwrap();
        assert_eq!(b.refuses(&c), None, "{name}");
    }
    for name in ["mixtral-8x7b", "qwen3-30b-a3b"] {
        let c = ModelConfig::preset(name).unwrap();
        assert_eq!(b.refuses(&c), None, "{name}");
    }
    let mut ep = ModelConfig::preset("mixtral-8x7b").unwrap();
    ep.moe.as_mut().unwrap().expert_parallel = true;
    assert!(b.refuses(&ep).unwrap().contains("expert parallelism"));
}
