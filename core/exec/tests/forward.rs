//! Whole iterations on the executor against the f64 reference forward pass.

mod common;

use common::*;
use slicesched_exec::reference;
use slicesched_exec::runner::{ExecBatch, LayerRange, OpPlace, Runner, SeqWork};
use slicesched_exec::*;
use slicesched_model::OpKind;

fn argmax(v: &[f64]) -> usize {
    v.iter().enumerate().fold(0, |b, (i, x)| if *x > v[b] { i } else { b })
}

/// Greedy tokens agree with the reference wherever its top two are not a near tie.
fn check_against_reference(
    m: &slicesched_exec::model::ExecModel,
    w: &slicesched_exec::model::HostWeights,
    prompt: &[i32],
    toks: &[i32],
    logits: &[Vec<f32>],
) {
    let mut seq = prompt.to_vec();
    seq.extend(&toks[..toks.len() - 1]);
    let want = reference::forward(m, w, &seq).unwrap();
    for (step, (t, l)) in toks.iter().zip(logits).enumerate() {
        let r = &want[prompt.len() - 1 + step];
        let e = rel_err(l, r);
        assert!(e < 3e-2, "step {step}: logits rel err {e}");
        let best = argmax(r);
        let mut sorted = r.clone();
        sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
        if sorted[0] - sorted[1] > 0.05 * sorted[0].abs().max(1.0) {
            assert_eq!(*t as usize, best, "step {step}: greedy token");
        }
    }
}

#[test]
fn greedy_generation_matches_the_f64_reference() {
    let b = backend(1);
    let m = micro();
    let w = weights(&m);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 16).unwrap();
    let p = prompt(21, m.vocab(), 1);
    let (toks, logits) = generate(&mut r, t, 1, &p, 6, &home);
    check_against_reference(&m, &w, &p, &toks, &logits);
}

#[test]
fn tensor_parallel_two_ways_matches_the_reference() {
    let b = backend(2);
    let m = micro();
    let w = weights(&m);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0, 1]), 16).unwrap();
    let p = prompt(9, m.vocab(), 2);
    let (toks, logits) = generate(&mut r, t, 1, &p, 4, &home);
    check_against_reference(&m, &w, &p, &toks, &logits);
    assert!(b.bytes_copied() > 0, "the all-reduces moved partial sums");
}

#[test]
fn chunked_prefill_equals_one_chunk_and_batches_mix_phases() {
    let b = backend(1);
    let m = micro();
    let w = weights(&m);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 32).unwrap();
    let p = prompt(40, m.vocab(), 3);
    let (whole, whole_logits) = generate(&mut r, t, 1, &p, 1, &home);
    // The same prompt in chunks of 17, 17, 6, batched beside another sequence's decodes.
    let mut other = ExecBatch {
        seqs: vec![SeqWork { seq: 3, tokens: p[..5].to_vec(), start_pos: 0, prefill: true, samples: true }],
    };
    let o = r.run(t, &other, &home, false).unwrap();
    let mut other_tok = o.tokens[0].1;
    let mut last = None;
    for (i, c) in [(0, 17), (17, 34), (34, 40)] {
        let final_chunk = c == 40;
        other = ExecBatch {
            seqs: vec![
                SeqWork { seq: 1, tokens: p[i..c].to_vec(), start_pos: i, prefill: true, samples: final_chunk },
                SeqWork { seq: 3, tokens: vec![other_tok], start_pos: 5 + i / 17, prefill: false, samples: true },
            ],
        };
        let out = r.run(t, &other, &home, true).unwrap();
        assert_eq!(out.tokens.len(), if final_chunk { 2 } else { 1 });
        other_tok = out.tokens.last().unwrap().1;
        if final_chunk {
            last = Some((out.tokens[0].1, out.logits.unwrap().remove(0)));
        }
    }
    let (tok, logits) = last.unwrap();
    assert_eq!(tok, whole[0]);
    let e = rel_err(&logits, &whole_logits[0].iter().map(|v| *v as f64).collect::<Vec<_>>());
    assert!(e < 2e-2, "chunked vs whole prefill: {e}");
}

#[test]
fn ops_follow_the_dag_and_report_times() {
    let b = backend(2);
    let m = micro();
    let w = weights(&m);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 8).unwrap();
    let g = r.add_copy(t, &w, &devices(&[1]), LayerRange::layers(1, 2)).unwrap();
    // Layer 1's MLP on the copy; everything else at home.
    let place = move |_: u32, k: OpKind, s: slicesched_model::Segment| {
        let borrowed = s == slicesched_model::Segment::Layer(1)
            && matches!(k, OpKind::GateUpProj | OpKind::Activation | OpKind::DownProj);
        OpPlace { group: if borrowed { g } else { 0 }, priority: 0 }
    };
    let batch = ExecBatch {
        seqs: vec![SeqWork { seq: 1, tokens: prompt(12, m.vocab(), 4), start_pos: 0, prefill: true, samples: true }],
    };
    let out = r.run(t, &batch, &place, false).unwrap();
    let dag = m.config.iteration_dag(
        &slicesched_model::IterationBatch {
            prefills: vec![slicesched_model::PrefillItem { chunk: 12, prior_kv: 0, samples: true }],
            decodes: vec![],
        },
        1,
    );
    assert_eq!(out.ops.len() as u32, dag.len());
    for (o, d) in out.ops.iter().zip(dag.ops()) {
        assert_eq!(o.kind, d.spec.kind);
        assert!(o.start_ns <= o.end_ns && o.submit_ns <= o.start_ns, "{o:?}");
    }
    // Inputs of ops whose producer ran elsewhere were copied: into gate/up and out of down.
    let copied: Vec<_> = out.ops.iter().filter(|o| o.copy_bytes > 0).map(|o| (o.kind, o.layer)).collect();
    assert_eq!(copied, vec![(OpKind::GateUpProj, Some(1)), (OpKind::ResidualAdd, Some(1))]);
    // Dependencies held: every op started after its producers ended.
    for c in 0..dag.len() {
        for p in dag.preds(c) {
            assert!(out.ops[c as usize].start_ns >= out.ops[p as usize].end_ns, "op {c} before its input {p}");
        }
    }
}

#[test]
fn placements_that_break_locality_are_refused_before_launch() {
    let b = backend(2);
    let m = micro();
    let w = weights(&m);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 8).unwrap();
    let g = r.add_copy(t, &w, &devices(&[1]), LayerRange::layers(0, 1)).unwrap();
    let batch =
        ExecBatch { seqs: vec![SeqWork { seq: 1, tokens: vec![1, 2, 3], start_pos: 0, prefill: true, samples: true }] };
    let attn_away = |_: u32, k: OpKind, _: slicesched_model::Segment| OpPlace {
        group: if k == OpKind::Attention { g } else { 0 },
        priority: 0,
    };
    let e = r.run(t, &batch, &attn_away, false).unwrap_err().to_string();
    assert!(e.contains("attention") && e.contains("KV"), "{e}");
    let l1_on_copy = |_: u32, k: OpKind, s: slicesched_model::Segment| OpPlace {
        group: if k == OpKind::QkvProj && s == slicesched_model::Segment::Layer(1) { g } else { 0 },
        priority: 0,
    };
    let e = r.run(t, &batch, &l1_on_copy, false).unwrap_err().to_string();
    assert!(e.contains("qkv_proj") && e.contains("weights"), "{e}");
    let e = r.run(t, &batch, &|_, _, _| OpPlace { group: 9, priority: 0 }, false).unwrap_err().to_string();
    assert!(e.contains("no group 9"), "{e}");
}

#[test]
fn kv_blocks_run_out_with_an_error_and_come_back_on_release() {
    let b = backend(1);
    let m = micro();
    let w = weights(&m);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 2).unwrap();
    let long = ExecBatch {
        seqs: vec![SeqWork { seq: 1, tokens: prompt(33, m.vocab(), 5), start_pos: 0, prefill: true, samples: true }],
    };
    let e = r.run(t, &long, &home, false).unwrap_err().to_string();
    assert!(e.contains("KV blocks"), "{e}");
    let ok = ExecBatch {
        seqs: vec![SeqWork { seq: 2, tokens: prompt(32, m.vocab(), 5), start_pos: 0, prefill: true, samples: true }],
    };
    r.run(t, &ok, &home, false).unwrap();
    assert_eq!(r.tenants[t].free_kv_blocks(), 0);
    r.release(t, 2);
    assert_eq!(r.tenants[t].free_kv_blocks(), 2);
}

#[test]
fn every_byte_is_on_the_ledger_and_a_full_device_refuses() {
    let m = tiny();
    let w = weights(&m);
    let b = CpuBackend::new(&[
        CpuDeviceSpec { memory_bytes: 256 << 20, cores: 1 },
        CpuDeviceSpec { memory_bytes: 4 << 20, cores: 1 },
    ]);
    {
        let mut r = Runner::new(&b);
        let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 64).unwrap();
        let l = b.ledger(DeviceId(0)).unwrap();
        let weight_bytes: u64 = w.tensors.values().map(|t| t.data.len() as u64 * 2).sum();
        let rope = 2 * m.numerics.max_positions as u64 * m.head_dim() as u64 / 2 * 4;
        assert_eq!(l.weights, weight_bytes + rope);
        assert_eq!(l.kv_pool, 64 * 16 * m.config.kv_bytes_per_token(1));
        let batch = ExecBatch {
            seqs: vec![SeqWork {
                seq: 1,
                tokens: prompt(20, m.vocab(), 6),
                start_pos: 0,
                prefill: true,
                samples: true,
            }],
        };
        r.run(t, &batch, &home, false).unwrap();
        let after = b.ledger(DeviceId(0)).unwrap();
        assert!(after.peak > l.used(), "the iteration's activations were charged");
        let e = r.load_tenant(m.clone(), &w, &devices(&[1]), 64).unwrap_err();
        assert!(matches!(e, ExecError::OutOfMemory { .. }), "{e}");
        assert!(e.to_string().contains("cpu:1"), "{e}");
        assert_eq!(b.ledger(DeviceId(1)).unwrap().used(), 0, "a refused load leaves nothing behind");
    }
    // Dropping the runner frees its tenants (workers' GEMM scratch stays until they end).
    let l = b.ledger(DeviceId(0)).unwrap();
    assert_eq!((l.weights, l.kv_pool), (0, 0));
}

/// A tenant served by two engine instances (its home and a serving copy, each a runner
/// tenant with its own KV cache) runs ops of one instance on the other's weights: shared,
/// not loaded again, freed once, and the tokens are those of a home-only run.
#[test]
fn instances_of_one_model_share_each_others_weights() {
    let b = backend(2);
    let m = micro();
    let w = weights(&m);
    let mut r = Runner::new(&b);
    let home = r.load_tenant(m.clone(), &w, &devices(&[0]), 8).unwrap();
    let copy = r.load_tenant(m.clone(), &w, &devices(&[1]), 8).unwrap();
    let before: Vec<u64> = (0..2).map(|d| b.ledger(DeviceId(d)).unwrap().weights).collect();
    let g = r.share_group(home, copy, 0).unwrap();
    let after: Vec<u64> = (0..2).map(|d| b.ledger(DeviceId(d)).unwrap().weights).collect();
    assert_eq!(before, after, "sharing loads nothing");
    let p = prompt(9, m.vocab(), 7);
    let (want, _) = generate(&mut r, home, 1, &p, 4, &home_place);
    // Every op but attention (which stays with the KV cache) on the copy's weights.
    let borrowed = move |_: u32, k: OpKind, _: slicesched_model::Segment| OpPlace {
        group: if k == OpKind::Attention { 0 } else { g },
        priority: 0,
    };
    let (got, _) = generate(&mut r, home, 2, &p, 4, &borrowed);
    assert_eq!(got, want);
    // Another model's weights are not shareable.
    let other = r.load_tenant(tiny(), &weights(&tiny()), &devices(&[1]), 8).unwrap();
    let e = r.share_group(home, other, 0).unwrap_err().to_string();
    assert!(e.contains("different models"), "{e}");
    // Dropping the runner frees every buffer once: the ledger ends empty.
    drop(r);
    for d in 0..2 {
        assert_eq!(b.ledger(DeviceId(d)).unwrap().weights, 0, "device {d}");
    }
}

fn home_place(_: u32, _: OpKind, _: slicesched_model::Segment) -> OpPlace {
    OpPlace { group: 0, priority: 0 }
}

/// The warm-up before serving frees what it took and changes no answer: the KV blocks
/// are all free again, the activations gone, and greedy generation equals a cold
/// runner's token for token; a cache of one block still warms, an empty one is skipped.
#[test]
fn warm_up_leaves_nothing_behind() {
    let m = micro();
    let w = weights(&m);
    let p = prompt(21, m.vocab(), 1);
    let cold = {
        let b = backend(1);
        let mut r = Runner::new(&b);
        let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 16).unwrap();
        generate(&mut r, t, 1, &p, 6, &home).0
    };
    let b = backend(1);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m.clone(), &w, &devices(&[0]), 16).unwrap();
    let loaded = b.ledger(DeviceId(0)).unwrap();
    r.warm_up(t).unwrap();
    // The first one leaves the streams' kernel scratch charged (held for their life, as
    // a cuBLAS workspace is); every other byte is returned, so a second changes nothing.
    let warm = b.ledger(DeviceId(0)).unwrap();
    assert!(warm.peak > loaded.peak, "the warm-up ran ops on the device");
    assert_eq!((warm.kv_pool, warm.weights), (loaded.kv_pool, loaded.weights));
    r.warm_up(t).unwrap();
    let again = b.ledger(DeviceId(0)).unwrap();
    assert_eq!(again.activations, warm.activations);
    assert_eq!(r.tenants[t].free_kv_blocks(), 16);
    assert_eq!(generate(&mut r, t, 1, &p, 6, &home).0, cold);

    for blocks in [1, 0] {
        let b = backend(1);
        let mut r = Runner::new(&b);
        let t = r.load_tenant(m.clone(), &w, &devices(&[0]), blocks).unwrap();
        r.warm_up(t).unwrap();
        assert_eq!(r.tenants[t].free_kv_blocks(), blocks);
    }
}
