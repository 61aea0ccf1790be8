//! Recording ops and decisions, and cancelling: what the control plane stores.

mod common;
use common::*;
use slicesched_sim::{replay, OpWindow, ReplayOptions};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[test]
fn recording_changes_nothing_and_covers_the_window() {
    let scn = scenario(TWO_TENANTS);
    let plain = run(&scn, ReplayOptions::default());
    let window = OpWindow { from_ns: 2_000_000_000, to_ns: 6_000_000_000, max_ops: usize::MAX };
    let rec = run(&scn, ReplayOptions { record_ops: Some(window), sample_decisions_every: 10, ..checked() });
    assert_eq!(without_timing(&plain.summary), without_timing(&rec.summary), "recording must not change the replay");
    assert!(plain.ops.is_empty() && plain.decisions.is_empty() && !plain.cancelled);
    assert!(rec.ops.len() > 1_000, "{} ops", rec.ops.len());
    assert!(rec.ops.windows(2).all(|w| w[0].start_ns <= w[1].start_ns), "sorted by start");
    for o in &rec.ops {
        assert!((window.from_ns..window.to_ns).contains(&o.start_ns));
        assert!(o.end_ns > o.start_ns && o.gpu < 3);
        assert_eq!(o.tenant == 0, o.gpu == 0, "dedicated runs every op on its own tenant's GPUs");
        assert!(!o.borrowed);
    }
    // Tenant b's ops run on both GPUs of its TP group: one record per GPU, same span.
    let on1 = rec.ops.iter().filter(|o| o.gpu == 1).count();
    let on2 = rec.ops.iter().filter(|o| o.gpu == 2).count();
    assert_eq!(on1, on2);
    // Ops on one GPU never overlap under dedicated (one stream per container).
    let mut g0: Vec<_> = rec.ops.iter().filter(|o| o.gpu == 0).collect();
    g0.sort_by_key(|o| o.start_ns);
    assert!(g0.windows(2).all(|w| w[0].end_ns <= w[1].start_ns));
    let d = plain.summary.scheduling.decisions;
    assert_eq!(rec.decisions.len() as u64, d.div_ceil(10));
    assert!(rec.decisions.iter().all(|x| x.ready_ops > 0));
}

#[test]
fn the_op_cap_bounds_memory() {
    let scn = scenario(TWO_TENANTS);
    let r = run(&scn, ReplayOptions { record_ops: Some(OpWindow::all(500)), ..Default::default() });
    assert_eq!(r.ops.len(), 500);
}

#[test]
fn a_cancelled_replay_stops_early_and_says_so() {
    let scn = scenario(TWO_TENANTS);
    let full = run(&scn, ReplayOptions::default());
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let mut policy = slicesched_policy::builtin("dedicated").unwrap();
    let opts = ReplayOptions { progress_every: 1_000, cancel: Some(cancel), ..Default::default() };
    let mut reports = 0;
    let r = replay(&scn, policy.as_mut(), slicesched_cost::CostModel::default_a100(), opts, &mut |_| {
        reports += 1;
        if reports == 3 {
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(r.cancelled);
    assert!(r.summary.op_events < full.summary.op_events / 2, "{} vs {}", r.summary.op_events, full.summary.op_events);
}
