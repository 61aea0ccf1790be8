//! One replay: plan the policy's replicas, replay on the blocking pool, store the
//! records, series (and the recorded ops and sampled decisions) in one transaction.

use super::params::{self, RunParams};
use super::{succeed, Ctx, Inner, Outcome};
use slicesched_sim::{OpWindow, ReplayOptions, ReplayResult, Scenario};
use std::collections::BTreeMap;

/// Every this many policy calls one is kept in the run's decision history.
pub const DECISION_SAMPLE: u64 = 16;
use std::sync::Arc;
use std::time::Instant;

/// Fresh instances of a run's policy, for the planner's what-if (`choose_plan`).
pub type MakePolicy<'a> = dyn FnMut() -> Result<Box<dyn slicesched_policy::Policy>, String> + 'a;

/// Replays `scenario` under `policy`, reporting progress, on the plan the planner's
/// what-if chose (each candidate replayed under an instance from `make`), as the CLI
/// does; the wall-clock timing figures are filled as the CLI fills them.
pub fn replay_blocking(
    scenario: &Scenario,
    policy: &mut dyn slicesched_policy::Policy,
    make: &mut MakePolicy,
    ctx: &Ctx,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<ReplayResult, String> {
    let cost = slicesched_cost::CostModel::default_a100();
    let t0 = Instant::now();
    let (planned, choice) = slicesched_sim::choose_plan(scenario, policy.replicas(), cost, &opts, make)
        .map_err(|e| format!("planning replicas: {e}"))?;
    let whatif_s = t0.elapsed().as_secs_f64();
    let started = Instant::now();
    let opts = ReplayOptions { cancel: Some(ctx.cancel.clone()), ..opts };
    let mut r = slicesched_sim::replay(&planned, policy, cost, opts, &mut |p| {
        progress(p.sim_ns.min(p.horizon_ns) as f64 / p.horizon_ns.max(1) as f64)
    });
    let wall = started.elapsed().as_secs_f64();
    r.summary.timing.sim_wall_s = wall;
    r.summary.timing.op_events_per_s = r.summary.op_events as f64 / wall.max(1e-9);
    (r.summary.plan, r.summary.timing.plan_whatif_s) = (choice, whatif_s);
    Ok(r)
}

/// The run's parameters: as stored when it was accepted, else (a run queued before
/// parameters were recorded) resolved now.
pub(super) async fn params_of(inner: &Inner, spec: &crate::db::runs::RunSpec) -> Result<RunParams, String> {
    if let Some(p) = spec.params.as_ref().and_then(|v| serde_json::from_value::<RunParams>(v.clone()).ok()) {
        return Ok(p);
    }
    let mut policies = Vec::new();
    for name in &spec.policies {
        let p = params::resolve_policy(&inner.db, name).await.map_err(|e| e.to_string())?;
        policies.push(p.ok_or_else(|| format!("no active policy or plugin named `{name}`"))?);
    }
    Ok(RunParams {
        scenario: spec.scenario.clone(),
        scenario_sha256: params::sha256_hex(&spec.scenario_toml),
        seed: 0,
        rate_scale: spec.rate_scale,
        violation_targets: spec.violation_targets.clone(),
        seeds: 1,
        draw: 0,
        policies,
        // Queued before runs recorded their parameters: the core's defaults then.
        core: params::core_options(
            inner.config.record_max_ops,
            (Default::default(), Default::default(), slicesched_sim::PlanPick::BEFORE_WHATIF),
        ),
        tenants: Vec::new(),
        inputs: Vec::new(),
    })
}

/// Loads the run's scenario (blocking: it reads trace files) with its rate scale, and
/// its seed replaced by `seed` where one is given (another draw of the scenario: a
/// replay's `draw`, a sweep's `seeds`).
pub(super) async fn load_draw(
    inner: &Inner,
    spec: &crate::db::runs::RunSpec,
    seed: Option<u64>,
) -> Result<Scenario, String> {
    let dir = inner.config.scenarios_dir.clone();
    let (name, text, scale) = (spec.scenario.clone(), spec.scenario_toml.clone(), spec.rate_scale);
    tokio::task::spawn_blocking(move || {
        let scenario = crate::scenarios::load(&dir, &name, &text, seed)?;
        Ok(match scale {
            Some(s) => scenario.with_rate_scale(s),
            None => scenario,
        })
    })
    .await
    .map_err(|e| format!("loading the scenario panicked: {e}"))?
}

/// The scenario tenants' registered tenants, attributed when the run starts.
fn requested_tenants(spec: &crate::db::runs::RunSpec) -> BTreeMap<String, uuid::Uuid> {
    spec.tenant_map.as_ref().and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
}

/// What a replay and a sweep do before their first replay: the scenario loaded,
/// its tenants attributed to the registered ones, the parameters recorded, the tenants'
/// SLAs applied and the core's modes read.
pub(super) async fn start(
    inner: &Inner,
    spec: &crate::db::runs::RunSpec,
    params: &mut params::RunParams,
) -> Result<(Scenario, params::Modes), String> {
    let scenario = load_draw(inner, spec, params.drawn_seed()).await?;
    if params.draw == 0 {
        params.seed = scenario.spec.seed;
    }
    params.tenants = params::attribute(&inner.db, &params::scenario_slas(&scenario), &requested_tenants(spec)).await?;
    params::record_start(&inner.db, spec.id, params)
        .await
        .map_err(|e| format!("recording the run's parameters: {e}"))?;
    let scenario = params::apply(scenario, &params.tenants);
    Ok((scenario, params.core.modes()?))
}

pub(super) async fn run(inner: &Arc<Inner>, spec: &crate::db::runs::RunSpec, ctx: Ctx) -> Outcome {
    let mut params = match params_of(inner, spec).await {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e),
    };
    let Some(policy) = params.policies.first().cloned() else {
        return Outcome::Failed("a replay needs one policy".into());
    };
    let (scenario, (kv_migration, replan, plan)) = match start(inner, spec, &mut params).await {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e),
    };
    // A trial (`plugin:{id}`) runs its component while it is still inactive.
    let pinned = policy.trial;
    let mut instance = match params::instantiate(&inner.db, &policy, !pinned).await {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e),
    };
    let record = OpWindow::all(inner.config.record_max_ops as usize);
    let (db, handle) = (inner.db.clone(), tokio::runtime::Handle::current());
    let joined = tokio::task::spawn_blocking(move || {
        let mut make = || handle.block_on(params::instantiate(&db, &policy, false)).map(|i| i.into_policy());
        let names: Vec<String> = scenario.tenants.iter().map(|t| t.name.clone()).collect();
        let opts = ReplayOptions {
            time_decisions: true,
            progress_every: 1 << 16,
            record_ops: Some(record),
            record_busy: true,
            sample_decisions_every: DECISION_SAMPLE,
            kv_migration,
            replan,
            plan,
            ..ReplayOptions::default()
        };
        let r = replay_blocking(&scenario, instance.policy(), &mut make, &ctx, opts, &mut |f| {
            let _ = ctx.progress.send(f * 0.95);
        });
        (r, names, ctx, instance)
    })
    .await;
    let (r, names, ctx, instance) = match joined {
        Ok(x) => x,
        Err(e) => return Outcome::Failed(format!("the replay panicked: {e}")),
    };
    // The host quarantined the plugin during the replay: its row says so from now on,
    // whatever becomes of this run.
    if let Some((plugin, q)) = instance.quarantined() {
        if let Err(e) = crate::plugin_host::write_back_quarantine(&inner.db, plugin, spec.id, &q).await {
            tracing::error!(error = %e, %plugin, "writing the plugin's quarantine back failed");
        }
    }
    let fallback = params::fallback_of(&instance);
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
    super::fault::pause("store").await;
    let stored = super::retry::with_backoff(
        "storing the results",
        || ctx.cancelled(),
        || store(inner, spec, &r, &names, &summary, fallback.as_ref(), &ctx),
    );
    match stored.await {
        Ok(windows) => {
            inner.metrics.record_replay(&r.summary);
            for w in windows {
                super::spawn_window(inner, w);
            }
            Outcome::Done(summary)
        }
        Err(_) if ctx.cancelled() => Outcome::Cancelled,
        Err(e) => Outcome::Failed(format!("storing the results: {e}")),
    }
}

async fn store(
    inner: &Inner,
    spec: &crate::db::runs::RunSpec,
    r: &ReplayResult,
    names: &[String],
    summary: &serde_json::Value,
    fallback: Option<&params::Fallback>,
    ctx: &Ctx,
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    let id = spec.id;
    let mut tx = inner.db.begin().await?;
    // The simulation reported 0–95 %; the store moves the bar on to 99 % (the commit,
    // which marks the run succeeded, is the rest). Progress goes through its own
    // connection: the transaction does not lock the run's row until its last statement.
    let progress = |f: f64| {
        let _ = ctx.progress.send(0.95 + 0.04 * f);
    };
    crate::db::results::store_replay_reporting(&mut tx, id, r, names, &progress).await?;
    crate::db::latency::store(&mut tx, id, None).await?;
    if let Some(b) = &r.busy {
        crate::db::busy::store(&mut tx, id, b).await?;
    }
    let max_ops = inner.config.record_max_ops as usize;
    crate::db::windows::insert_start(&mut tx, id, &r.ops, max_ops, &spec.created_by).await?;
    let start_to = (!r.ops.is_empty()).then(|| {
        let to = r.ops.iter().map(|o| o.end_ns).max().unwrap_or(0) + 1;
        crate::db::windows::recorded_to(&r.ops, to, max_ops)
    });
    let windows = super::window::queue_automatic(&mut tx, id, r, start_to).await?;
    if let Some(f) = fallback {
        f.store(&mut tx, id, true).await?;
    }
    succeed(&mut tx, id, summary).await?;
    tx.commit().await?;
    Ok(windows)
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
