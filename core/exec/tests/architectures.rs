//! Layouts beyond Llama's on the CPU executor (LayerNorm, GELU, plain MLPs, biases,
//! parallel blocks, partial rotary, Qwen3's query/key norms, sliding windows on every
//! layer or some, ALiBi, Gemma-2's sandwich norms and numerics, tied embeddings,
//! mixtures of experts), each against the f64 reference forward pass, at home and split
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
    for family in ["phi", "qwen2", "qwen3", "window", "gelu", "moe", "qwen3moe", "alibi", "gemma2", "qwenwin"] {
        run_on(&arch(family), 1, 19, 5);
    }
    run_on(&gemma2_uncapped(), 1, 19, 5);
}

#[test]
fn the_tiny_gemma2_preset_matches_the_reference_at_tp_1_and_2() {
    let m = ExecModel::new(ModelConfig::preset("tiny-gemma2").unwrap());
    let n = &m.numerics;
    assert!(n.gemma && m.config.sandwich_norms, "{n:?}");
    assert_eq!(
        (n.query_pre_attn_scalar, n.attn_logit_softcap, n.final_logit_softcap),
        (Some(48.0), Some(50.0), Some(30.0))
    );
    assert_eq!((n.rms_norm_eps, n.tie_word_embeddings), (1e-6, true));
    // A prompt past its window of 8, so the windowed layers (0 and 2) mask.
    run_on(&m, 1, 19, 4);
    run_on(&m, 2, 13, 3);
}

#[test]
fn biases_and_parallel_blocks_split_tensor_parallel() {
    // Column-parallel biases are split with their rows, row-parallel ones added once.
    for family in ["phi", "qwen2", "gelu", "qwen3", "moe", "qwen3moe", "alibi", "gemma2", "qwenwin"] {
        run_on(&arch(family), 2, 11, 3);
    }
}

#[test]
fn expert_parallel_mixtures_match_the_reference() {
    // Whole experts by rank, tokens dispatched and combined between the ranks; on one
    // device expert parallelism is moot (the DAG has none) and the split is the plain one.
    for family in ["moe-ep", "qwen3moe-ep"] {
        run_on(&arch(family), 2, 11, 4);
        run_on(&arch(family), 1, 11, 2);
    }
    // The iteration ran the DAG's expert-parallel collectives, each with work: two
    // all-to-alls and an all-gather a layer.
    let m = arch("moe-ep");
    let b = backend(2);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &weights(&m), &devices(&[0, 1]), 16).unwrap();
    let s = SeqWork { seq: 1, tokens: prompt(7, m.vocab(), 2), start_pos: 0, prefill: true, samples: true };
    let out = r.run(t, &ExecBatch { seqs: vec![s] }, &home, false).unwrap();
    let count = |k: slicesched_model::OpKind, layered: bool| {
        out.ops.iter().filter(|o| o.kind == k && o.layer.is_some() == layered && o.launches > 0).count()
    };
    assert_eq!(count(slicesched_model::OpKind::AllToAll, true), 2 * m.layers());
    assert_eq!(count(slicesched_model::OpKind::AllGather, true), m.layers());
    assert_eq!(count(slicesched_model::OpKind::AllGather, false), 1, "the LM head's");
}

#[test]
fn alibi_slopes_are_bloom_s() {
    // HF `build_alibi_tensor`: for 6 heads the series of 4 (2^-2, 2^-4, ...), then every
    // other one of the series of 8 (2^-1, 2^-3).
    let mut m = arch("alibi");
    m.config.num_attention_heads = 6;
    assert_eq!(m.alibi_slopes(), [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]);
    m.config.num_attention_heads = 4;
    assert_eq!(m.alibi_slopes(), [0.25, 0.0625, 0.015625, 0.00390625]);
    assert_eq!(m.rotary_dim(), 0, "no RoPE beside ALiBi");
    assert!(arch("qwen2").alibi_slopes().is_empty());
}

/// The reference's logits at the last of `p`'s positions.
fn last_logits(m: &ExecModel, w: &HostWeights, p: &[i32]) -> Vec<f64> {
    reference::forward(m, w, p).unwrap().pop().unwrap()
}

/// The relative difference of `b` from `a`, as `check` measures the executor's error.
fn differ(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    (num / a.iter().map(|x| x * x).sum::<f64>()).sqrt()
}

/// Gemma-2's layout with the attention soft-cap off, where the query scale shows most.
fn gemma2_uncapped() -> ExecModel {
    let mut m = arch("gemma2");
    m.numerics.attn_logit_softcap = None;
    m
}

#[test]
fn each_thing_gemma2_and_alibi_add_changes_the_logits() {
    // Guards against the reference, and so the executor checked against it, ignoring
    // one: each moves the logits of the same weights by well over `check`'s tolerance.
    const MOVES: f64 = 0.1;
    let m = arch("gemma2");
    let w = weights(&m);
    let p = prompt(20, m.vocab(), 9);
    type Toggle = fn(&mut ExecModel);
    let toggles: [(&str, ExecModel, Toggle); 5] = [
        ("embedding scale and (1 + w) norms", arch("gemma2"), |m| m.numerics.gemma = false),
        ("query_pre_attn_scalar", gemma2_uncapped(), |m| m.numerics.query_pre_attn_scalar = None),
        ("attention soft-cap", arch("gemma2"), |m| m.numerics.attn_logit_softcap = None),
        ("final soft-cap", arch("gemma2"), |m| m.numerics.final_logit_softcap = None),
        ("the window of layer 0", arch("gemma2"), |m| m.config.sliding_window = None),
    ];
    for (what, base, f) in toggles {
        let mut other = base.clone();
        f(&mut other);
        let d = differ(&last_logits(&base, &w, &p), &last_logits(&other, &w, &p));
        assert!(d > MOVES, "{what} moves the logits by {d} only");
    }
    // A window on the last layer only is neither no window nor one on every layer.
    let q = arch("qwenwin");
    let w = weights(&q);
    let (mut all, mut none) = (q.clone(), q.clone());
    all.config.window_layers = None;
    none.config.sliding_window = None;
    let one = last_logits(&q, &w, &p);
    for (what, other) in [("every layer", all), ("no layer", none)] {
        let d = differ(&one, &last_logits(&other, &w, &p));
        assert!(d > MOVES, "windowed as on {what}: {d}");
    }
    let a = arch("alibi");
    let mut plain = a.clone();
    plain.config.alibi = false;
    plain.config.rotary_dim = Some(0);
    let w = weights(&a);
    let p = prompt(12, a.vocab(), 4);
    assert!(differ(&last_logits(&a, &w, &p), &last_logits(&plain, &w, &p)) > MOVES, "ALiBi's bias matters");
}

#[test]
fn a_windowed_prompt_in_chunks_equals_one_chunk() {
    // Chunks of 5 over a window of 8: later chunks read keys a window back across the
    // chunk boundary, and earlier ones no longer; with windows on some layers only, the
    // others read every key. ALiBi's bias follows each chunk's true positions.
    for family in ["window", "gemma2", "qwenwin", "alibi"] {
        chunked_equals_whole(&arch(family));
    }
}

fn chunked_equals_whole(m: &ExecModel) {
    let w = weights(m);
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
    assert!(e < 1e-2, "{}: chunked vs whole: {e}", m.config.name);
}

#[test]
fn a_windowed_sequence_runs_longer_than_its_cache() {
    // Window 8, chunks of 5, a cache of 3 blocks (48 tokens): 60 positions fit only
    // because blocks no query sees again are recycled, as many as the engine books for
    // it (`slicesched_model::kv::live_blocks`), and the logits still match the reference.
    let m = arch("window");
    let window = m.config.kv_window().unwrap_or(0);
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
    let gemma = ExecModel::new(ModelConfig::preset("tiny-gemma2").unwrap());
    let models = ["phi", "qwen2", "qwen3", "window", "moe", "qwen3moe", "gemma2", "qwenwin", "moe-ep"].map(arch);
    for m in models.into_iter().chain([gemma]) {
        let family = m.config.name.clone();
        let dir = tempfile::tempdir().unwrap();
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
        assert_eq!((c.0.window_layers, c.0.sandwich_norms), (c.1.window_layers, c.1.sandwich_norms), "{family}");
        if m.config.sandwich_norms {
            // Written as Gemma-2, read back with its numerics (caps, query scale, ε).
            assert!(checkpoint::config_json(&m).contains("\"gemma2\""), "{family}");
            assert_eq!(m2.numerics, m.numerics, "{family}");
        }
    }
    // Gemma-2's names: the attention output's norm, the MLP's before and after.
    let names: Vec<String> = arch("gemma2").tensor_shapes().into_iter().map(|(n, _)| n).collect();
    for n in ["post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"] {
        assert!(names.iter().any(|x| x == &format!("model.layers.1.{n}.weight")), "{n} in {names:?}");
    }
    // No family this crate reads has ALiBi: refused, and nothing written.
    let dir = tempfile::tempdir().unwrap();
    let m = arch("alibi");
    let e = checkpoint::save(&dir.path().join("ck"), &m, &weights(&m), None).unwrap_err().to_string();
    assert!(e.contains("no Hugging Face model family"), "{e}");
    assert!(!dir.path().join("ck").exists());
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
    let mut moe_sandwich = arch("moe");
    moe_sandwich.config.sandwich_norms = true;
    let mut qk_ln = arch("qwen3");
    qk_ln.config.norm = slicesched_model::Norm::Layer;
    for (m, what) in [(moe_sandwich, "sandwich norms around a mixture"), (qk_ln, "query/key LayerNorms")] {
        let w = weights(&m);
        let mut r = Runner::new(&b);
        let e = r.load_tenant(m, &w, &devices(&[0]), 4).err().unwrap().to_string();
        assert!(e.contains(what) && e.contains("CPU backend"), "{e}");
        assert_eq!(b.ledger(slicesched_exec::DeviceId(0)).unwrap().used(), 0, "nothing left loaded");
    }
    // The published configs the CPU backend runs: phi-2, Qwen3-8B, Mistral-7B v0.1,
    // Gemma-2-9B, Mixtral-8x7B, Qwen3-30B-A3B (experts split tensor-parallel, not
    // expert-parallel).
    for name in ["phi-2", "qwen3-8b", "mistral-7b-v0.1", "gemma-2-9b", "tiny-gemma2"] {
        let c = ModelConfig::preset(name).unwrap();
        assert_eq!(b.refuses(&c), None, "{name}");
    }
    for name in ["mixtral-8x7b", "qwen3-30b-a3b"] {
        let c = ModelConfig::preset(name).unwrap();
        assert_eq!(b.refuses(&c), None, "{name}");
    }
    let mut ep = ModelConfig::preset("mixtral-8x7b").unwrap();
    ep.moe.as_mut().unwrap().expert_parallel = true;
    assert_eq!(b.refuses(&ep), None, "expert parallelism");
}

#[test]
fn gemma2_numerics_come_from_its_config_json() {
    use slicesched_exec::model::Numerics;
    let cfg = ModelConfig::preset("tiny-gemma2").unwrap();
    let text = slicesched_model::preset_config_json("tiny-gemma2").unwrap();
    let read = |t: &str| Numerics::from_hf_json(&cfg, t);
    let caps = |n: Numerics| (n.gemma, n.query_pre_attn_scalar, n.attn_logit_softcap, n.final_logit_softcap);
    assert_eq!(caps(read(text).unwrap()), (true, Some(48.0), Some(50.0), Some(30.0)));
    // `null` turns a cap off; a key left out takes Gemma-2's default.
    let off = text.replace("\"attn_logit_softcapping\": 50.0", "\"attn_logit_softcapping\": null");
    assert_eq!(caps(read(&off).unwrap()), (true, Some(48.0), None, Some(30.0)));
    let bare = text.replace("\"final_logit_softcapping\": 30.0,", "").replace("\"query_pre_attn_scalar\": 48,", "");
    assert_eq!(caps(read(&bare).unwrap()), (true, Some(256.0), Some(50.0), Some(30.0)));
    // Other families' classes ignore these keys, and so does the executor.
    let llama = text.replace("\"gemma2\"", "\"llama\"");
    assert_eq!(caps(read(&llama).unwrap()), (false, None, None, None));
    let bad = text.replace("\"final_logit_softcapping\": 30.0", "\"final_logit_softcapping\": -1.0");
    assert!(read(&bad).unwrap_err().to_string().contains("positive"));
}
