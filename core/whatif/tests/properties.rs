//! Random timelines with feedback: incremental what-if equals the from-scratch reference,
//! and committing then reading `predicted` agrees with it too.

use proptest::prelude::*;
use slicesched_whatif::{Candidate, OpKey, Timeline, WhatIf};
use smallvec::SmallVec;

#[derive(Debug, Clone)]
struct Gen {
    gpus: Vec<u32>,
    dur: u64,
    prio: i32,
    tenant: u32,
    ready: u64,
    deps: Vec<(u64, u64)>,
    mem: u64,
    action: u8,
    target: u64,
    jitter: i64,
}

fn gen_op() -> impl Strategy<Value = Gen> {
    (
        prop::collection::vec(0u32..6, 1..=3),
        0u64..40,
        0i32..3,
        0u32..3,
        0u64..150,
        prop::collection::vec((0u64..8, 0u64..20), 0..=2),
        0u64..100,
        0u8..7,
        0u64..40,
        -10i64..10,
    )
        .prop_map(|(gpus, dur, prio, tenant, ready, deps, mem, action, target, jitter)| Gen {
            gpus,
            dur,
            prio,
            tenant,
            ready,
            deps,
            mem,
            action,
            target,
            jitter,
        })
}

/// Op `i` of the script; deps point back by `off + 1` (possibly to keys never committed).
fn build(n: u32, i: u64, g: &Gen, key_base: u64) -> Candidate {
    let mut gpus: SmallVec<[u32; 4]> = SmallVec::new();
    for &x in &g.gpus {
        if !gpus.contains(&(x % n)) {
            gpus.push(x % n);
        }
    }
    Candidate {
        key: OpKey(key_base + i),
        gpus,
        duration_ns: g.dur,
        priority: g.prio,
        tenant: g.tenant,
        ready_ns: g.ready,
        deps: g
            .deps
            .iter()
            .filter(|d| d.0 < i + 3)
            .map(|&(off, t)| (OpKey((key_base + i).wrapping_sub(off + 1)), t))
            .collect(),
        mem_bytes: g.mem,
    }
}

fn check_predictions(t: &Timeline) {
    for (k, s, f) in t.resimulated() {
        assert_eq!(t.predicted(k), Some((s, f)), "predicted {k:?}");
    }
}

fn jit(x: u64, j: i64) -> u64 {
    x.saturating_add_signed(j)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn incremental_equals_reference(
        n in 1u32..=6,
        script in prop::collection::vec(gen_op(), 0..40),
        cands in prop::collection::vec(gen_op(), 1..=3),
        mem in prop::collection::vec((0u64..200, 100u64..600), 6),
    ) {
        let base = mem[..n as usize].iter().map(|m| m.0).collect();
        let cap = mem[..n as usize].iter().map(|m| m.1).collect();
        let mut t = Timeline::new(n as usize, base, cap).unwrap();
        // The same script, never refreshed until the end: lazy bookkeeping must land on
        // the same predictions as refreshing after every step.
        let mut lazy = t.clone();
        let mut w = WhatIf::default();
        for (i, g) in script.iter().enumerate() {
            let op = build(n, i as u64, g, 0);
            t.what_if(std::slice::from_ref(&op), &mut w).unwrap();
            lazy.insert(op.clone()).unwrap();
            let (s, f) = t.commit(op).unwrap();
            prop_assert_eq!((s, f), (w.candidates[0].start_ns, w.candidates[0].finish_ns));
            let target = OpKey((i as u64).saturating_sub(g.target % 6));
            if let Some((ps, pf)) = t.predicted(target) {
                match g.action {
                    3 | 4 => {
                        prop_assert_eq!(t.started(target, jit(ps, g.jitter)), lazy.started(target, jit(ps, g.jitter)));
                    }
                    5 => {
                        prop_assert_eq!(t.finished(target, jit(pf, g.jitter)), lazy.finished(target, jit(pf, g.jitter)));
                    }
                    6 => {
                        let at = jit(t.now(), g.jitter.abs() * 3);
                        t.advance(at);
                        lazy.advance(at);
                    }
                    _ => {}
                }
            }
            t.refresh();
            check_predictions(&t);
        }
        lazy.refresh();
        for (k, s, f) in t.resimulated() {
            prop_assert_eq!(lazy.predicted(k), Some((s, f)), "lazy {:?}", k);
        }
        let m = script.len() as u64;
        // Candidates may depend on committed ops and on earlier candidates.
        let cs: Vec<Candidate> = cands.iter().enumerate().map(|(j, g)| {
            let mut c = build(n, j as u64, g, 1000);
            if let Some(d) = c.deps.first_mut() {
                if g.target % 2 == 0 && m > 0 {
                    d.0 = OpKey(m - 1 - g.target % m);
                }
            }
            c
        }).collect();
        t.what_if(&cs, &mut w).unwrap();
        let reference = t.full_resimulate(&cs).unwrap();
        prop_assert_eq!(&w, &reference);
        t.commit_what_if(&cs).unwrap();
        for c in &w.candidates {
            prop_assert_eq!(t.predicted(c.key), Some((c.start_ns, c.finish_ns)));
        }
        check_predictions(&t);
    }
}
