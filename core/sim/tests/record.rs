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
    let window = OpWindow::once(2_000_000_000, 6_000_000_000, usize::MAX);
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

/// A goodput search stops a replay once more requests violate than its largest target
/// allows: the rate known then is a lower bound over that target, and a replay that stays
/// under the limit is the plain replay.
#[test]
fn a_replay_stops_once_its_violations_pass_the_limit() {
    let scn = scenario(TWO_TENANTS).with_rate_scale(8.0);
    let full = run(&scn, ReplayOptions { progress_every: 1_000, ..Default::default() });
    let rate = full.summary.violation_rate;
    assert!(rate > 0.2, "the overloaded replay violates: {rate}");
    let limit = rate / 4.0;
    let r = run(&scn, ReplayOptions { progress_every: 1_000, stop_above_violation: Some(limit), ..Default::default() });
    let v = r.violation_at_stop.expect("stopped");
    assert!(v > limit && v <= rate, "{v} against limit {limit}, whole run {rate}");
    assert!(r.summary.op_events < full.summary.op_events, "{} vs {}", r.summary.op_events, full.summary.op_events);
    assert!(full.violation_at_stop.is_none());
    let under =
        run(&scn, ReplayOptions { progress_every: 1_000, stop_above_violation: Some(rate), ..Default::default() });
    assert!(under.violation_at_stop.is_none());
    assert_eq!(without_timing(&under.summary), without_timing(&full.summary));
}

#[test]
fn busy_buckets_cover_the_whole_run_and_change_nothing() {
    let scn = scenario(TWO_TENANTS);
    let plain = run(&scn, ReplayOptions::default());
    let r = run(&scn, ReplayOptions { record_busy: true, ..Default::default() });
    assert_eq!(without_timing(&plain.summary), without_timing(&r.summary), "recording must not change the replay");
    assert!(plain.busy.is_none());
    let b = r.busy.expect("recorded");
    assert!(b.bucket_ns <= 10_000_000 && b.buckets as u64 <= 65_536, "{} ns × {}", b.bucket_ns, b.buckets);
    assert!(b.buckets as f64 * b.bucket_ns as f64 >= r.summary.duration_s * 1e9);
    // Under dedicated each GPU runs one tenant, one op at a time: its row is the GPU's
    // busy time and op count, and no bucket holds more than its width.
    assert_eq!(b.rows.iter().map(|x| (x.gpu, x.tenant)).collect::<Vec<_>>(), vec![(0, 0), (1, 1), (2, 1)]);
    for row in &b.rows {
        let g = &r.summary.gpus[row.gpu as usize];
        let busy: u64 = row.busy_ns.iter().map(|&v| v as u64).sum();
        assert!((busy as f64 / 1e9 - g.busy_s).abs() < 1e-6, "GPU {}: {busy} ns vs {} s", row.gpu, g.busy_s);
        assert_eq!(row.ops.iter().map(|&v| v as u64).sum::<u64>(), g.ops);
        assert!(row.busy_ns.iter().all(|&v| v as u64 <= b.bucket_ns));
        assert!(row.borrowed_ns.iter().all(|&v| v == 0));
        assert!(row.busy_ns.len() == b.buckets && row.ops.len() == b.buckets);
    }
    // The late part of the run is there (not only the first ops).
    let tail = &b.rows[0].busy_ns[b.buckets * 3 / 4..];
    assert!(tail.iter().any(|&v| v > 0));
}

#[test]
fn a_window_replayed_up_to_its_end_records_the_same_ops() {
    let scn = scenario(TWO_TENANTS);
    let window = OpWindow::once(30_000_000_000, 30_500_000_000, usize::MAX);
    let whole = run(&scn, ReplayOptions { record_ops: Some(window), ..Default::default() });
    let stop = window.to_ns + 2_000_000_000;
    let part = run(&scn, ReplayOptions { record_ops: Some(window), stop_after_ns: Some(stop), ..Default::default() });
    assert!(!whole.ops.is_empty());
    assert_eq!(whole.ops, part.ops, "a deterministic prefix records the same ops");
    assert!(part.summary.op_events < whole.summary.op_events);
}
