//! A goodput sweep: for each policy and violation target, the same search as
//! `slicesched sweep` (`slicesched_report::search`), one replay at a time so that several
//! runs share the blocking pool fairly. Stores `sweep.json` as the run's summary. With
//! `seeds` K > 1, each point replays K draws of the scenario and counts their requests
//! together (`slicesched_report::pool_draws`, as `slicesched sweep --seeds`).

use super::replay::replay_blocking;
use super::{succeed, Ctx, Inner, Outcome};
use slicesched_report::search::{search, Outcome as Found, Points, SearchOpts};
use slicesched_report::{pool_draws, DrawFigures, SweepPoint, SweepReport, SweepResult, SweepTiming};
use slicesched_sim::ReplayOptions;
use std::sync::Arc;
use std::time::Instant;

/// Replays of one search, roughly (bracketing plus bisection to 3%): for the progress bar.
const REPLAYS_PER_SEARCH: f64 = 10.0;

pub(super) async fn run(inner: &Arc<Inner>, spec: &crate::db::runs::RunSpec, ctx: Ctx) -> Outcome {
    let mut policies = Vec::new();
    for name in &spec.policies {
        match crate::policies::instantiate(&inner.db, name).await {
            Ok(_) => policies.push(name.clone()),
            Err(e) => return Outcome::Failed(e),
        }
    }
    let targets = spec.violation_targets.clone().unwrap_or_else(|| vec![0.01, 0.09]);
    // A sweep is judged like a replay: against the SLAs the tenants registered, with
    // its parameters and attribution recorded when it starts.
    let mut params = match super::replay::params_of(inner, spec).await {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e),
    };
    let (scenario, (kv_migration, replan, plan)) = match super::replay::start(inner, spec, &mut params).await {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e),
    };
    // Every draw judged against the same registered SLAs as the first.
    let mut draws = vec![scenario];
    for k in 1..params.seeds.max(1) {
        let seed = slicesched_sim::draw_seed(params.seed, k);
        match super::replay::load_draw(inner, spec, Some(seed)).await {
            Ok(s) => draws.push(super::params::apply(s, &params.tenants)),
            Err(e) => return Outcome::Failed(format!("draw {k} (seed {seed}): {e}")),
        }
    }
    let seeds: Vec<u64> = if draws.len() > 1 { draws.iter().map(|d| d.spec.seed).collect() } else { Vec::new() };
    let db = inner.db.clone();
    let run_id = spec.id;
    let handle = tokio::runtime::Handle::current();
    let cancel = ctx.cancel.clone();
    let cancelled = move || cancel.load(std::sync::atomic::Ordering::Relaxed);
    let joined = tokio::task::spawn_blocking(move || {
        let opts = SearchOpts::default();
        let started = Instant::now();
        let searches = (policies.len() * targets.len()) as f64;
        let mut replays = 0usize;
        let mut results = Vec::new();
        let mut points_out = Vec::new();
        for policy in &policies {
            // One draw at one scale: its figures, None when the run was cancelled.
            let replay_draw = |draw: &slicesched_sim::Scenario, scale: f64| -> Result<Option<DrawFigures>, String> {
                let pol = handle.block_on(crate::policies::instantiate(&db, policy));
                let r = pol.and_then(|mut p| {
                    let mut make =
                        || handle.block_on(crate::policies::instantiate(&db, policy)).map(|i| i.into_policy());
                    let r = replay_blocking(
                        &draw.with_rate_scale(scale),
                        p.policy(),
                        &mut make,
                        &ctx,
                        ReplayOptions { kv_migration, replan, plan, ..ReplayOptions::default() },
                        &mut |_| {},
                    );
                    if let Some((plugin, q)) = p.quarantined() {
                        let back = crate::plugin_host::write_back_quarantine(&db, plugin, run_id, &q);
                        if let Err(e) = handle.block_on(back) {
                            tracing::error!(error = %e, %plugin, "writing the plugin's quarantine back failed");
                        }
                        // Its points from here on would measure the fallback, and the
                        // next replay would find no active plugin: end the sweep
                        // saying why.
                        return Err(format!(
                            "policy `{policy}` was quarantined during its replay at rate scale {scale}: {}",
                            q.cause
                        ));
                    }
                    r
                });
                let r = r?;
                if r.cancelled {
                    return Ok(None);
                }
                let s = &r.summary;
                Ok(Some(DrawFigures {
                    requests: s.requests,
                    violation_rate: s.violation_rate,
                    violation_at_stop: None,
                    prompt_tokens_per_s: s.prompt_tokens_per_s,
                    output_tokens_per_s: s.output_tokens_per_s,
                    oom_events: s.oom_events,
                    wall_s: s.timing.sim_wall_s,
                }))
            };
            let mut points = Points::default();
            let mut measured: Vec<SweepPoint> = Vec::new();
            let mut failure = None;
            for &target in &targets {
                let outcome = search(
                    |scale| {
                        if ctx.cancelled() || failure.is_some() {
                            return 1.0; // stops the search quickly; the run is discarded
                        }
                        if let Some(m) = measured.iter().find(|m| m.rate_scale == scale) {
                            return m.violation_rate;
                        }
                        let mut figures = Vec::with_capacity(draws.len());
                        for draw in &draws {
                            match replay_draw(draw, scale) {
                                Ok(Some(f)) => figures.push(f),
                                Ok(None) => return 1.0, // cancelled: the run is discarded
                                Err(e) => {
                                    failure = Some(e);
                                    return 1.0;
                                }
                            }
                        }
                        replays += 1;
                        let done = results.len() as f64 + (replays as f64 / REPLAYS_PER_SEARCH).min(0.95);
                        let _ = ctx.progress.send((done / searches).min(0.99));
                        let point = SweepPoint::new(policy, scale, pool_draws(&figures));
                        let v = point.violation_rate;
                        measured.push(point);
                        v
                    },
                    target,
                    &opts,
                    &mut points,
                );
                if let Some(e) = failure.take() {
                    return Err(e);
                }
                if ctx.cancelled() {
                    return Ok(None);
                }
                results.push(result(policy, target, outcome, &opts, &measured));
            }
            measured.sort_by(|a, b| a.rate_scale.total_cmp(&b.rate_scale));
            points_out.extend(measured);
        }
        let ratios = slicesched_report::goodput_ratios(&results);
        let replay_wall_s = points_out.iter().map(|p| p.wall_s).sum();
        Ok(Some(SweepReport {
            scenario: draws[0].spec.name.clone(),
            precision: opts.precision,
            min_scale: opts.min_scale,
            max_scale: opts.max_scale,
            refused_share: draws[0].refused_share(),
            kv_migration: kv_migration.name().into(),
            replan: replan.name().into(),
            plan: plan.name().into(),
            scenario_sha256: None,
            duration_s: draws[0].spec.duration_s,
            seeds,
            results,
            ratios,
            points: points_out,
            timing: SweepTiming { wall_s: started.elapsed().as_secs_f64(), replay_wall_s, jobs: 1 },
        }))
    })
    .await;
    let report = match joined {
        Ok(Ok(Some(r))) => r,
        Ok(Ok(None)) => return Outcome::Cancelled,
        Ok(Err(e)) => return Outcome::Failed(e),
        Err(e) => return Outcome::Failed(format!("the sweep panicked: {e}")),
    };
    let summary = match serde_json::to_value(&report) {
        Ok(v) => v,
        Err(e) => return Outcome::Failed(format!("sweep report: {e}")),
    };
    let stored = super::retry::with_backoff("storing the sweep", &cancelled, || async {
        let mut tx = inner.db.begin().await?;
        succeed(&mut tx, spec.id, &summary).await?;
        tx.commit().await
    });
    match stored.await {
        Ok(()) => Outcome::Done(summary),
        Err(_) if cancelled() => Outcome::Cancelled,
        Err(e) => Outcome::Failed(format!("storing the sweep: {e}")),
    }
}

/// One (policy, target) answer, with the figures of the replay at the answer (or of the
/// lowest scale tried when even that violates), as the CLI reports it.
fn result(policy: &str, target: f64, outcome: Found, opts: &SearchOpts, measured: &[SweepPoint]) -> SweepResult {
    let (rate_scale, status) = match outcome {
        Found::Found(s) => (s, "found"),
        Found::CappedAtMax => (opts.max_scale, "capped_at_max_scale"),
        Found::ViolatesAtMin => (0.0, "violates_at_min_scale"),
    };
    let at = measured.iter().find(|m| (m.rate_scale - rate_scale).abs() <= 1e-9 * rate_scale.abs());
    let lowest = measured.iter().min_by(|a, b| a.rate_scale.total_cmp(&b.rate_scale));
    let m = if rate_scale > 0.0 { at } else { lowest };
    let served = rate_scale > 0.0;
    SweepResult {
        policy: policy.to_string(),
        target,
        rate_scale,
        prompt_tokens_per_s: if served { m.map_or(0.0, |m| m.prompt_tokens_per_s) } else { 0.0 },
        output_tokens_per_s: if served { m.map_or(0.0, |m| m.output_tokens_per_s) } else { 0.0 },
        violation_rate: m.map_or(0.0, |m| m.violation_rate),
        oom_events: m.map_or(0, |m| m.oom_events),
        status: status.into(),
    }
}
