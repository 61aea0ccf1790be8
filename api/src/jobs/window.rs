//! Recording a window of a finished replay op by op: the replay is deterministic, so
//! replaying the run's scenario with its stored parameters (the same plugin bytes, rate
//! scale and applied SLAs) up to the window's end records exactly the ops the run had
//! there. After each replay the busiest second and the stretch before its worst
//! violation spike are queued this way; users queue any other window through the API.

use super::params::{self, RunParams};
use super::replay::{load_draw, replay_blocking};
use super::{Ctx, Inner};
use crate::db::windows::{self, Window};
use slicesched_sim::{OpWindow, ReplayOptions, ReplayResult};
use std::sync::Arc;
use uuid::Uuid;

/// Length of the automatic windows.
pub const AUTO_WINDOW_NS: i64 = 1_000_000_000;
/// Replayed past a window's end so every op that started in it has finished.
const DRAIN_NS: u64 = 1_000_000_000;

/// The busiest `AUTO_WINDOW_NS` of the run (all GPUs' busy time together).
pub fn busiest(b: &slicesched_sim::BusyBuckets) -> Option<(i64, i64)> {
    let w = b.bucket_ns as i64;
    let k = ((AUTO_WINDOW_NS / w).max(1) as usize).min(b.buckets.max(1));
    let mut total = vec![0u64; b.buckets];
    for row in &b.rows {
        for (i, &v) in row.busy_ns.iter().enumerate() {
            total[i] += v as u64;
        }
    }
    let (mut best, mut at, mut sum) = (0u64, 0usize, 0u64);
    for i in 0..total.len() {
        sum += total[i];
        if i >= k {
            sum -= total[i - k];
        }
        if i + 1 >= k && sum > best {
            (best, at) = (sum, i + 1 - k);
        }
    }
    (best > 0).then(|| (at as i64 * w, (at + k) as i64 * w))
}

/// The two seconds around the series bucket with the most violations (the ops that
/// delayed those requests ran just before they completed).
pub fn violation_spike(v: &[u64]) -> Option<(i64, i64)> {
    let (i, &n) = v.iter().enumerate().max_by_key(|(i, &n)| (n, std::cmp::Reverse(*i)))?;
    if n == 0 {
        return None;
    }
    let s = slicesched_sim::SERIES_BUCKET_NS as i64;
    Some(((i as i64 - 1).max(0) * s, (i as i64 + 1) * s))
}

/// The automatic windows of a replay, in its results' transaction: queued rows for the
/// busiest second and the stretch before the worst violation spike, unless the start
/// window already holds them. The caller spawns them once the transaction commits.
pub(super) async fn queue_automatic(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    run: Uuid,
    r: &ReplayResult,
    start_to_ns: Option<u64>,
) -> Result<Vec<Uuid>, sqlx::Error> {
    let busy = r.busy.as_ref().and_then(busiest);
    let mut out = Vec::new();
    let mut seen: Vec<(i64, i64)> = Vec::new();
    for (reason, span) in [("busiest", busy), ("violations", violation_spike(&r.series.violations))] {
        let Some((from, to)) = span else { continue };
        let covered = start_to_ns.is_some_and(|e| to as u64 <= e) || seen.iter().any(|&(a, b)| a <= from && to <= b);
        if covered {
            continue;
        }
        seen.push((from, to));
        out.push(windows::insert_queued(tx, run, reason, from, to, &format!("system:run:{run}")).await?);
    }
    Ok(out)
}

/// Records one window; the caller holds a run slot.
pub(super) async fn execute(inner: &Arc<Inner>, w: Window, ctx: Ctx) -> Result<(), String> {
    let spec = crate::db::runs::spec(&inner.db, w.run_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("run {} no longer exists", w.run_id))?;
    let p: RunParams = spec
        .params
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .ok_or("this run stored no parameters (it predates them), so it cannot be replayed exactly")?;
    let policy = p.policies.first().cloned().ok_or("the run names no policy")?;
    // The window replays what the run replayed, modes included.
    let (kv_migration, replan, plan) = p.core.modes()?;
    let scenario = params::apply(load_draw(inner, &spec, p.drawn_seed()).await?, &p.tenants);
    let mut instance = params::instantiate(&inner.db, &policy, false).await?;
    let max_ops = inner.config.record_max_ops as usize;
    let window = OpWindow::once(w.from_ns as u64, w.to_ns as u64, max_ops);
    let stop = w.to_ns as u64 + DRAIN_NS;
    let (db, handle) = (inner.db.clone(), tokio::runtime::Handle::current());
    let joined = tokio::task::spawn_blocking(move || {
        // The what-if is deterministic: it chooses the plan the run chose.
        let mut make = || handle.block_on(params::instantiate(&db, &policy, false)).map(|i| i.into_policy());
        let opts = ReplayOptions {
            progress_every: 1 << 16,
            record_ops: Some(window),
            stop_after_ns: Some(stop),
            kv_migration,
            replan,
            plan,
            ..ReplayOptions::default()
        };
        let r = replay_blocking(&scenario, instance.policy(), &mut make, &ctx, opts, &mut |f| {
            let _ = ctx.progress.send(f * 0.97);
        });
        (r, ctx)
    })
    .await
    .map_err(|e| format!("the replay panicked: {e}"))?;
    let (r, ctx) = joined;
    let r = r?;
    if r.cancelled || ctx.cancelled() {
        return Err("cancelled".into());
    }
    windows::store(&inner.db, &w, &r.ops, max_ops).await.map_err(|e| format!("storing the window's ops: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_second_is_found_in_the_buckets() {
        let mut row = slicesched_sim::BusyRow {
            gpu: 0,
            tenant: 0,
            busy_ns: vec![0; 5000],
            borrowed_ns: vec![0; 5000],
            ops: vec![0; 5000],
        };
        for v in &mut row.busy_ns[3200..3700] {
            *v = 900_000;
        }
        let busy = slicesched_sim::BusyBuckets { bucket_ns: 1_000_000, buckets: 5000, rows: vec![row] };
        let (a, b) = busiest(&busy).expect("a window");
        assert_eq!(b - a, AUTO_WINDOW_NS);
        assert!(a <= 3_200_000_000 && b >= 3_700_000_000, "{a}..{b}");
        assert_eq!(violation_spike(&[0, 0, 0]), None);
        assert_eq!(violation_spike(&[0, 3, 7, 7, 1]), Some((1_000_000_000, 3_000_000_000)));
    }
}
