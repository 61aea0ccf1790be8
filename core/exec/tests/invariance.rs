//! Numerical invariance (design invariant): a tenant's greedy tokens are identical and
//! its logits agree within bf16 tolerance whatever devices its ops ran on (home,
//! borrowed, split across layer-range copies), at whatever priority, and whatever
//! another tenant ran beside it on the same devices.

mod common;

use common::*;
use proptest::prelude::*;
use slicesched_exec::runner::{ExecBatch, LayerRange, OpPlace, Runner, SeqWork};
use slicesched_model::{OpKind, Segment};

/// The groups each op of the tenant may run on, given its copies' ranges.
/// `layer_rope`: the RoPE op carries layer weights (Qwen3's query/key norms).
fn allowed(ranges: &[LayerRange], kind: OpKind, seg: Segment, layer_rope: bool) -> Vec<usize> {
    (0..ranges.len())
        .filter(|&g| {
            let r = ranges[g];
            match (kind, seg) {
                (OpKind::Attention, _) => g == 0,
                (OpKind::Embedding, _) => r.head,
                (OpKind::FinalNorm | OpKind::LmHead, _) => r.tail,
                (
                    OpKind::InputNorm
                    | OpKind::QkvProj
                    | OpKind::OProj
                    | OpKind::PostAttnNorm
                    | OpKind::GateUpProj
                    | OpKind::DownProj
                    | OpKind::Router
                    | OpKind::ExpertUp
                    | OpKind::ExpertDown,
                    Segment::Layer(l),
                ) => r.has_layer(l as usize),
                (OpKind::Rope, Segment::Layer(l)) if layer_rope => r.has_layer(l as usize),
                _ => true,
            }
        })
        .collect()
}

fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^ (z >> 27)
}

struct World<'b> {
    r: Runner<'b>,
    a: usize,
    b: usize,
    ranges: Vec<LayerRange>,
}

fn world(backend: &slicesched_exec::CpuBackend, tp: usize) -> World<'_> {
    world_of(backend, tp, micro())
}

fn world_of(backend: &slicesched_exec::CpuBackend, tp: usize, m: slicesched_exec::model::ExecModel) -> World<'_> {
    let w = weights(&m);
    let mut r = Runner::new(backend);
    let dev = |base: u32| devices(&(0..tp as u32).map(|i| base + i).collect::<Vec<_>>());
    let a = r.load_tenant(m.clone(), &w, &dev(0), 16).unwrap();
    let mut ranges = vec![LayerRange::all(2)];
    for (devs, range) in [
        (dev(tp as u32), LayerRange::all(2)),
        (dev(0), LayerRange::layers(0, 1)),
        (dev(tp as u32), LayerRange::layers(1, 2)),
    ] {
        r.add_copy(a, &w, &devs, range).unwrap();
        ranges.push(range);
    }
    // Another tenant (other weights) at home on the devices A borrows.
    let mut mb = m.clone();
    mb.config.name = "other".into();
    let wb = slicesched_exec::model::HostWeights::random(&mb, 99);
    let b = r.load_tenant(mb, &wb, &dev(tp as u32), 16).unwrap();
    World { r, a, b, ranges }
}

/// A's greedy generation under `place`, with B's work (`b_len` prompt tokens, then
/// decodes) submitted beside each of A's iterations.
fn generate_beside(
    w: &mut World,
    prompt: &[i32],
    steps: usize,
    place: &dyn Fn(u32, OpKind, Segment) -> OpPlace,
    b_len: usize,
) -> (Vec<i32>, Vec<Vec<f32>>) {
    let (mut toks, mut logits) = (Vec::new(), Vec::new());
    let mut batch = ExecBatch {
        seqs: vec![SeqWork { seq: 1, tokens: prompt.to_vec(), start_pos: 0, prefill: true, samples: true }],
    };
    let mut b_batch = ExecBatch {
        seqs: vec![SeqWork {
            seq: 9,
            tokens: common::prompt(b_len, 96, 5),
            start_pos: 0,
            prefill: true,
            samples: true,
        }],
    };
    let mut b_pos = b_len;
    for pos in prompt.len()..prompt.len() + steps {
        let pa = w.r.submit(w.a, &batch, place).unwrap();
        let pb = (b_len > 0).then(|| w.r.submit(w.b, &b_batch, &|_, _, _| OpPlace { group: 0, priority: 1 }).unwrap());
        let out = w.r.wait(pa, true).unwrap();
        if let Some(pb) = pb {
            let ob = w.r.wait(pb, false).unwrap();
            b_batch = ExecBatch {
                seqs: vec![SeqWork {
                    seq: 9,
                    tokens: vec![ob.tokens[0].1],
                    start_pos: b_pos,
                    prefill: false,
                    samples: true,
                }],
            };
            b_pos += 1;
        }
        let t = out.tokens[0].1;
        toks.push(t);
        logits.push(out.logits.unwrap().remove(0));
        batch = ExecBatch {
            seqs: vec![SeqWork { seq: 1, tokens: vec![t], start_pos: pos, prefill: false, samples: true }],
        };
    }
    w.r.release(w.a, 1);
    w.r.release(w.b, 9);
    (toks, logits)
}

fn check(tp: usize, cases: u32) {
    check_model(tp, cases, micro())
}

fn check_model(tp: usize, cases: u32, m: slicesched_exec::model::ExecModel) {
    let backend = backend(2 * tp);
    let layer_rope = m.config.qk_norm;
    let mut w = world_of(&backend, tp, m);
    let p = prompt(11, 96, 3);
    let (want_toks, want_logits) = generate_beside(&mut w, &p, 4, &home, 0);
    let ranges = w.ranges.clone();
    let w = std::cell::RefCell::new(w);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases, ..ProptestConfig::default() });
    runner
        .run(&(any::<u64>(), 0usize..24), |(seed, b_len)| {
            let place = |i: u32, k: OpKind, s: Segment| {
                let ok = allowed(&ranges, k, s, layer_rope);
                let h = mix(seed, i as u64);
                OpPlace { group: ok[(h % ok.len() as u64) as usize], priority: ((h >> 32) % 3) as i32 - 1 }
            };
            let (toks, logits) = generate_beside(&mut w.borrow_mut(), &p, 4, &place, b_len);
            prop_assert_eq!(&toks, &want_toks);
            for (l, r) in logits.iter().zip(&want_logits) {
                let e = rel_err(l, &r.iter().map(|v| *v as f64).collect::<Vec<_>>());
                prop_assert!(e <= 8e-3, "logits differ by {}", e);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn greedy_tokens_do_not_depend_on_placement_or_neighbours() {
    check(1, 24);
}

#[test]
fn tensor_parallel_tenants_are_invariant_too() {
    check(2, 8);
}

/// phi's layout (biases, LayerNorm, parallel blocks, partial rotary), Qwen3's (whose
/// RoPE op norms heads with the layer's weights, so it runs only where they are),
/// ALiBi's (no RoPE op: attention reads the raw qkv) and Gemma-2's (three norms after
/// attention, a window on one layer, soft-caps), and a mixture split expert-parallel.
#[test]
fn other_layouts_are_invariant_too() {
    for family in ["phi", "qwen3", "moe", "alibi", "gemma2"] {
        check_model(1, 8, arch(family));
    }
    check_model(2, 4, arch("phi"));
    check_model(2, 4, arch("qwen3moe"));
    check_model(2, 4, arch("alibi"));
    check_model(2, 4, arch("gemma2"));
    // Expert parallelism: the combine adds every rank's partial sums in rank order.
    check_model(2, 4, arch("moe-ep"));
}

/// A's greedy generation at home with more of A's own sequences in every batch: one of
/// `others[i]` prompt tokens each, prefilled beside A's first iteration, then decoding.
fn generate_in_batch(w: &mut World, prompt: &[i32], steps: usize, others: &[usize]) -> (Vec<i32>, Vec<Vec<f32>>) {
    let (mut toks, mut logits) = (Vec::new(), Vec::new());
    let mut seqs = vec![SeqWork { seq: 1, tokens: prompt.to_vec(), start_pos: 0, prefill: true, samples: true }];
    for (i, &len) in others.iter().enumerate() {
        seqs.push(SeqWork {
            seq: 100 + i as u64,
            tokens: common::prompt(len, 96, 7 + i as u64),
            start_pos: 0,
            prefill: true,
            samples: true,
        });
    }
    for _ in 0..steps {
        let p = w.r.submit(w.a, &ExecBatch { seqs: seqs.clone() }, &home).unwrap();
        let out = w.r.wait(p, true).unwrap();
        let mut all_logits = out.logits.unwrap();
        let at = out.tokens.iter().position(|t| t.0 == 1).unwrap();
        toks.push(out.tokens[at].1);
        logits.push(all_logits.swap_remove(at));
        for s in &mut seqs {
            let t = out.tokens.iter().find(|t| t.0 == s.seq).unwrap().1;
            s.start_pos += s.tokens.len();
            s.tokens = vec![t];
            s.prefill = false;
        }
    }
    for s in &seqs {
        w.r.release(w.a, s.seq);
    }
    (toks, logits)
}

/// Batch invariance: A's tokens and logits are bit-identical whether its sequence runs
/// alone or in a batch of 1 to 130 rows with its other sequences' prefills and decodes.
#[test]
fn greedy_tokens_and_logits_do_not_depend_on_the_batch() {
    let backend = backend(2);
    let mut w = world(&backend, 1);
    let p = prompt(11, 96, 3);
    let (want_toks, want_logits) = generate_in_batch(&mut w, &p, 4, &[]);
    let bits = |l: &[Vec<f32>]| l.iter().map(|r| r.iter().map(|v| v.to_bits()).collect::<Vec<_>>()).collect::<Vec<_>>();
    let w = std::cell::RefCell::new(w);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 12, ..ProptestConfig::default() });
    runner
        .run(&proptest::collection::vec(1usize..30, 0..5), |others| {
            let (toks, logits) = generate_in_batch(&mut w.borrow_mut(), &p, 4, &others);
            prop_assert_eq!(&toks, &want_toks);
            prop_assert_eq!(bits(&logits), bits(&want_logits));
            Ok(())
        })
        .unwrap();
}

/// On the CPU the new layouts' logits are bit-identical wherever their ops ran: every op
/// that may leave home taken to the last copy that holds it, against all at home.
#[test]
fn new_layouts_logits_do_not_move_a_bit_with_placement() {
    let bits = |l: &[Vec<f32>]| l.iter().map(|r| r.iter().map(|v| v.to_bits()).collect::<Vec<_>>()).collect::<Vec<_>>();
    for family in ["moe-ep", "gemma2", "alibi"] {
        let backend = backend(4);
        let mut w = world_of(&backend, 2, arch(family));
        let p = prompt(11, 96, 3);
        let (want_toks, want) = generate_beside(&mut w, &p, 3, &home, 0);
        let ranges = w.ranges.clone();
        let away = |_: u32, k: OpKind, s: Segment| {
            let ok = allowed(&ranges, k, s, false);
            OpPlace { group: ok[ok.len() - 1], priority: 0 }
        };
        let (toks, got) = generate_beside(&mut w, &p, 3, &away, 5);
        assert_eq!(toks, want_toks, "{family}");
        assert_eq!(bits(&got), bits(&want), "{family}");
    }
}
