//! Hand-computable what-if cases: each answer is worked out in the comments.

use slicesched_whatif::{Candidate, OpKey, Timeline, TimelineError, WhatIf};
use smallvec::smallvec;

fn op(key: u64, gpus: &[u32], dur: u64, prio: i32, tenant: u32, ready: u64) -> Candidate {
    Candidate {
        key: OpKey(key),
        gpus: gpus.iter().copied().collect(),
        duration_ns: dur,
        priority: prio,
        tenant,
        ready_ns: ready,
        deps: smallvec![],
        mem_bytes: 0,
    }
}

fn ask(t: &Timeline, c: &[Candidate]) -> WhatIf {
    let mut w = WhatIf::default();
    t.what_if(c, &mut w).unwrap();
    assert_eq!(w, t.full_resimulate(c).unwrap(), "incremental and reference disagree");
    w
}

fn tl(n: usize) -> Timeline {
    Timeline::new(n, vec![100; n], vec![1_000; n]).unwrap()
}

#[test]
fn insert_into_gap_delays_nobody() {
    let mut t = tl(1);
    // A runs 0..10; B is not ready until 50, so 10..50 is a gap.
    assert_eq!(t.commit(op(1, &[0], 10, 0, 0, 0)).unwrap(), (0, 10));
    assert_eq!(t.commit(op(2, &[0], 10, 0, 0, 50)).unwrap(), (50, 60));
    t.started(OpKey(1), 0).unwrap();
    // Queued ahead of B (higher priority), ready at 10.
    let w = ask(&t, &[op(9, &[0], 30, 5, 1, 10)]);
    // A runs 0..10 and keeps its place; the candidate takes 10..40, inside B's gap.
    assert_eq!((w.candidates[0].start_ns, w.candidates[0].finish_ns), (10, 40));
    assert!(w.tenant_delays.is_empty());
}

#[test]
fn higher_priority_candidate_delays_queued_op_by_its_duration() {
    let mut t = tl(1);
    t.commit(op(1, &[0], 10, 0, 0, 0)).unwrap();
    t.started(OpKey(1), 0).unwrap();
    assert_eq!(t.commit(op(2, &[0], 20, 0, 3, 0)).unwrap(), (10, 30));
    let w = ask(&t, &[op(9, &[0], 7, 1, 1, 0)]);
    assert_eq!((w.candidates[0].start_ns, w.candidates[0].finish_ns), (10, 17));
    assert_eq!(w.tenant_delays, vec![(3, 7)]);
    // Equal priority queues behind: nobody is delayed.
    let w = ask(&t, &[op(9, &[0], 7, 0, 1, 0)]);
    assert_eq!((w.candidates[0].start_ns, w.tenant_delays.len()), (30, 0));
    // Accepting it moves the queued op, as predicted.
    t.commit(op(9, &[0], 7, 1, 1, 0)).unwrap();
    assert_eq!(t.predicted(OpKey(2)), Some((17, 37)));
}

#[test]
fn dependency_transfer_adds_up() {
    let mut t = tl(2);
    t.commit(op(1, &[0], 10, 0, 0, 0)).unwrap();
    let mut c = op(2, &[1], 5, 0, 0, 0);
    c.deps = smallvec![(OpKey(1), 4)];
    // Starts at 10 + 4 on the other GPU; a chained candidate adds its own transfer.
    let mut d = op(3, &[0], 5, 0, 0, 0);
    d.deps = smallvec![(OpKey(2), 6), (OpKey(77), 100)];
    let w = ask(&t, &[c, d]);
    assert_eq!((w.candidates[0].start_ns, w.candidates[0].finish_ns), (14, 19));
    assert_eq!(w.candidates[0].transfers.as_slice(), &[(OpKey(1), 4)]);
    // OpKey(77) is unknown, so treated as done: no wait, no transfer listed.
    assert_eq!((w.candidates[1].start_ns, w.candidates[1].finish_ns), (25, 30));
    assert_eq!(w.candidates[1].transfers.as_slice(), &[(OpKey(2), 6)]);
}

#[test]
fn memory_peak_counts_op_held_until_dependent_finishes() {
    let mut t = tl(2);
    let mut a = op(1, &[0], 10, 0, 0, 0);
    a.mem_bytes = 300;
    t.commit(a).unwrap();
    let mut b = op(2, &[1], 50, 0, 0, 0);
    b.deps = smallvec![(OpKey(1), 0)];
    t.commit(b).unwrap(); // 10..60 on GPU 1, so A holds 300 B on GPU 0 until 60.
    let mut c = op(9, &[0], 10, 0, 1, 30);
    c.mem_bytes = 50;
    let w = ask(&t, &[c.clone()]);
    // Baseline 100 + A's 300 + its own 50 at 30..40.
    assert_eq!(w.candidates[0].peak_mem.as_slice(), &[(0, 450)]);
    assert!(w.candidates[0].fits);
    c.ready_ns = 60;
    let w = ask(&t, &[c.clone()]);
    assert_eq!(w.candidates[0].peak_mem.as_slice(), &[(0, 150)]);
    c.mem_bytes = 901;
    assert!(!ask(&t, &[c]).candidates[0].fits);
}

#[test]
fn gang_waits_for_all_its_gpus() {
    let mut t = tl(3);
    t.commit(op(1, &[0], 10, 0, 0, 0)).unwrap();
    t.commit(op(2, &[1], 30, 0, 0, 0)).unwrap();
    t.commit(op(3, &[2], 5, 0, 2, 0)).unwrap();
    let w = ask(&t, &[op(9, &[0, 1, 2], 10, 0, 1, 0)]);
    assert_eq!((w.candidates[0].start_ns, w.candidates[0].finish_ns), (30, 40));
}

#[test]
fn feedback_shifts_and_collects() {
    let mut t = tl(1);
    t.commit(op(1, &[0], 10, 0, 0, 0)).unwrap();
    let mut b = op(2, &[0], 10, 0, 0, 0);
    b.deps = smallvec![(OpKey(1), 0)];
    t.commit(b).unwrap();
    t.started(OpKey(1), 5).unwrap();
    assert_eq!(t.predicted(OpKey(2)), Some((15, 25)));
    t.finished(OpKey(1), 12).unwrap();
    assert_eq!(t.predicted(OpKey(2)), Some((12, 22)));
    assert_eq!(t.len(), 2, "A stays while B, which depends on it, is unfinished");
    t.advance(20);
    assert_eq!(t.predicted(OpKey(2)), Some((20, 30)));
    t.finished(OpKey(2), 31).unwrap();
    assert_eq!(t.len(), 0);
    assert_eq!(t.started(OpKey(2), 0), Err(TimelineError::UnknownKey(OpKey(2))));
}

#[test]
fn dependent_never_queues_ahead_of_its_dependency() {
    let mut t = tl(1);
    t.commit(op(1, &[0], 10, 0, 0, 0)).unwrap();
    let mut b = op(2, &[0], 10, 9, 0, 0);
    b.deps = smallvec![(OpKey(1), 0)];
    // Its priority is capped at its dependency's, so it follows it instead of deadlocking.
    assert_eq!(t.commit(b).unwrap(), (10, 20));
}

#[test]
fn bad_input_is_refused() {
    let t = tl(2);
    let mut w = WhatIf::default();
    assert!(matches!(t.what_if(&[op(1, &[2], 1, 0, 0, 0)], &mut w), Err(TimelineError::UnknownGpu { .. })));
    assert!(matches!(t.what_if(&[op(1, &[1, 1], 1, 0, 0, 0)], &mut w), Err(TimelineError::RepeatedGpu { .. })));
    assert!(matches!(t.what_if(&[op(1, &[], 1, 0, 0, 0)], &mut w), Err(TimelineError::NoGpu(_))));
    let two = [op(1, &[0], 1, 0, 0, 0), op(1, &[1], 1, 0, 0, 0)];
    assert_eq!(t.what_if(&two, &mut w), Err(TimelineError::DuplicateKey(OpKey(1))));
    assert!(Timeline::new(2, vec![0], vec![0, 0]).is_err());
}

#[test]
fn a_withdrawn_op_gives_its_place_back() {
    let mut t = tl(2);
    t.commit(op(1, &[0], 10, 0, 0, 0)).unwrap();
    t.started(OpKey(1), 0).unwrap();
    // A guest's op queued ahead of the owner's (higher priority), on both GPUs.
    assert_eq!(t.commit(op(2, &[0, 1], 30, 5, 1, 0)).unwrap(), (10, 40));
    assert_eq!(t.commit(op(3, &[0], 20, 0, 0, 0)).unwrap(), (40, 60));
    // It depends on op 1, which finishes; op 1 is kept while op 2 waits for it.
    let mut dep = op(4, &[1], 5, 0, 1, 0);
    dep.deps = smallvec![(OpKey(2), 0)];
    t.commit(dep).unwrap();
    t.withdraw(OpKey(2)).unwrap();
    t.refresh();
    // The owner's op moves up; the dependent no longer waits; the key is gone.
    assert_eq!(t.predicted(OpKey(3)), Some((10, 30)));
    assert_eq!(t.predicted(OpKey(4)), Some((0, 5)));
    assert_eq!(t.predicted(OpKey(2)), None);
    assert_eq!(t.len(), 3);
    assert!(matches!(t.withdraw(OpKey(2)), Err(TimelineError::UnknownKey(_))));
    assert!(matches!(t.withdraw(OpKey(1)), Err(TimelineError::AlreadyStarted(_))));
    // What it asks now matches a full resimulation without the withdrawn op.
    ask(&t, &[op(9, &[1], 7, 0, 2, 0)]);
    // The key may be committed again.
    t.commit(op(2, &[1], 30, 0, 1, 0)).unwrap();
}
