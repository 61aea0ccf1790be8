//! One replay: plan the policy's replicas, replay on the blocking pool, store the
//! records, series (and the recorded ops and sampled decisions) in one transaction.

use super::{succeed, Ctx, Inner, Outcome};
use slicesched_sim::{OpWindow, ReplayOptions, ReplayResult, Scenario};

/// Every this many policy calls one is kept in the run's decision history.
pub const DECISION_SAMPLE: u64 = 16;
use std::sync::Arc;
use std::time::Instant;

/// Replays `scenario` under `policy`, reporting progress; the wall-clock timing figures
/// are filled as the CLI fills them.
pub fn replay_blocking(
    scenario: &Scenario,
    policy: &mut dyn slicesched_policy::Policy,
    ctx: &Ctx,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<ReplayResult, String> {
    let planned = slicesched_sim::plan(scenario, policy.replicas()).map_err(|e| format!("planning replicas: {e}"))?;
    let started = Instant::now();
    let opts = ReplayOptions { cancel: Some(ctx.cancel.clone()), ..opts };
    let mut r = slicesched_sim::replay(&planned, policy, slicesched_cost::CostModel::default_a100(), opts, &mut |p| {
        progress(p.sim_ns.min(p.horizon_ns) as f64 / p.horizon_ns.max(1) as f64)
    });
    let wall = started.elapsed().as_secs_f64();
    r.summary.timing.sim_wall_s = wall;
    r.summary.timing.op_events_per_s = r.summary.op_events as f64 / wall.max(1e-9);
    Ok(r)
}

pub(super) async fn run(inner: &Arc<Inner>, spec: &crate::db::runs::RunSpec, ctx: Ctx) -> Outcome {
    let Some(policy_name) = spec.policies.first().cloned() else {
        return Outcome::Failed("a replay needs one policy".into());
    };
    let mut instance = match crate::policies::instantiate(&inner.db, &policy_name).await {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e),
    };
    let dir = inner.config.scenarios_dir.clone();
    let (name, text, scale) = (spec.scenario.clone(), spec.scenario_toml.clone(), spec.rate_scale);
    let record = OpWindow::all(inner.config.record_max_ops as usize);
    let joined = tokio::task::spawn_blocking(move || {
        let scenario = crate::scenarios::load(&dir, &name, &text)?;
        let scenario = match scale {
            Some(s) => scenario.with_rate_scale(s),
            None => scenario,
        };
        let names: Vec<String> = scenario.tenants.iter().map(|t| t.name.clone()).collect();
        let opts = ReplayOptions {
            time_decisions: true,
            progress_every: 1 << 16,
            record_ops: Some(record),
            sample_decisions_every: DECISION_SAMPLE,
            ..ReplayOptions::default()
        };
        let r = replay_blocking(&scenario, instance.policy(), &ctx, opts, &mut |f| {
            let _ = ctx.progress.send(f * 0.95);
        });
        Ok::<_, String>((r, names, ctx, instance))
    })
    .await;
    let (r, names, ctx, instance) = match joined {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return Outcome::Failed(e),
        Err(e) => return Outcome::Failed(format!("the replay panicked: {e}")),
    };
    // The host quarantined the plugin during the replay: its row says so from now on,
    // whatever becomes of this run.
    if let Some((plugin, q)) = instance.quarantined() {
        if let Err(e) = crate::plugin_host::write_back_quarantine(&inner.db, plugin, spec.id, &q).await {
            tracing::error!(error = %e, %plugin, "writing the plugin's quarantine back failed");
        }
    }
    let r = match r {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(e),
    };
    if r.cancelled || ctx.cancelled() {
        return Outcome::Cancelled;
    }
    trace_decisions(&r, DECISION_SPANS);
    let summary = match serde_json::to_value(&r.summary) {
        Ok(v) => v,
        Err(e) => return Outcome::Failed(format!("summary: {e}")),
    };
    // Through an outage the results wait in memory and the store is tried again (the
    // transaction is whole or nothing); a cancel meanwhile stops the waiting.
    let stored = super::retry::with_backoff(
        "storing the results",
        || ctx.cancelled(),
        || store(inner, spec.id, &r, &names, &summary),
    );
    match stored.await {
        Ok(()) => {
            inner.metrics.record_replay(&r.summary);
            Outcome::Done(summary)
        }
        Err(_) if ctx.cancelled() => Outcome::Cancelled,
        Err(e) => Outcome::Failed(format!("storing the results: {e}")),
    }
}

async fn store(
    inner: &Inner,
    id: uuid::Uuid,
    r: &ReplayResult,
    names: &[String],
    summary: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    let mut tx = inner.db.begin().await?;
    crate::db::results::store_replay(&mut tx, id, r, names).await?;
    crate::db::latency::store(&mut tx, id, None).await?;
    succeed(&mut tx, id, summary).await?;
    tx.commit().await
}

/// Most spans of sampled decisions one replay emits: the sampled decisions of a long
/// replay run to hundreds of thousands, so they are thinned evenly to this many.
pub const DECISION_SPANS: usize = 1000;

/// The replay's scheduling as a span (a child of the run's span) with one child span per
/// sampled decision (at most `max`, evenly spread over the replay): exported over OTLP
/// with the run's trace.
pub fn trace_decisions(r: &ReplayResult, max: usize) {
    let s = &r.summary;
    let span = tracing::info_span!(
        "scheduling",
        policy = %s.policy,
        decisions = s.scheduling.decisions,
        sampled = r.decisions.len(),
        placements = s.scheduling.placements,
        borrowed_ops = s.scheduling.borrowed_ops,
        decision_p50_us = s.timing.decision_p50_us,
        decision_p99_us = s.timing.decision_p99_us,
    );
    let _enter = span.enter();
    let n = r.decisions.len();
    let step = n.div_ceil(max.max(1)).max(1);
    for (seq, d) in r.decisions.iter().enumerate().step_by(step) {
        let _d = tracing::info_span!(
            "decision",
            seq,
            at_ns = d.at_ns,
            ready_ops = d.ready_ops,
            borrowed = d.borrowed,
            rejected = d.rejected,
        )
        .entered();
    }
}
