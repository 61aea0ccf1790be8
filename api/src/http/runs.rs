//! Runs: list (filtered, keyset-paginated), read, start (admin), cancel (admin).

use crate::auth::Caller;
use crate::db::runs::{Run, RunKind, RunStatus, StoredKind, RUN_COLUMNS};
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::http::pagination;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_runs, create_run)).routes(routes!(get_run)).routes(routes!(cancel_run))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunQuery {
    /// Replays, sweeps or live traffic only.
    kind: Option<StoredKind>,
    /// Runs that used this policy.
    policy: Option<String>,
    /// Runs whose scenario name contains this (case-insensitive).
    scenario: Option<String>,
    status: Option<RunStatus>,
    /// Created at or after (RFC 3339).
    since: Option<DateTime<Utc>>,
    /// Created before (RFC 3339).
    until: Option<DateTime<Utc>>,
    /// 1..=1000, default 50.
    limit: Option<i64>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunPage {
    pub items: Vec<Run>,
    pub next_cursor: Option<String>,
}

/// Most draws a sweep replays at every scale (`NewRun::seeds`): each costs a whole
/// sweep's replays.
pub const MAX_SEEDS: u32 = 8;
/// Highest draw a replay may name (`NewRun::draw`): a draw is any seed, this only keeps
/// the number one a person would type.
pub const MAX_DRAW: u32 = 1_000_000;

/// What to run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRun {
    pub kind: RunKind,
    /// A shipped scenario's name (GET /api/v1/scenarios) or a whole scenario as TOML text.
    pub scenario: String,
    /// The policy of a replay.
    pub policy: Option<String>,
    /// The policies of a sweep (or a one-element list for a replay).
    pub policies: Option<Vec<String>>,
    /// Replays only: arrival-rate multiplier, (0, 64].
    pub rate_scale: Option<f64>,
    /// Sweeps only: fractions of requests allowed to violate, each in (0, 1); default [0.01, 0.09].
    pub violation_targets: Option<Vec<f64>>,
    /// Sweeps only: draws of the scenario replayed at every rate scale, 1 to 8
    /// (default 1). Draw 0 is the scenario's own seed, draw k its seed plus
    /// k·0x9E3779B97F4A7C15 modulo 2^63 (as `slicesched sweep --seeds`): synthetic loads are drawn
    /// again, file traces keep their requests. A point's violation rate is that of all
    /// the draws' requests together, so a target of 1% is judged on K times the
    /// requests; the run costs K times the replays. The summary's `seeds` lists them.
    pub seeds: Option<u32>,
    /// Replays only: which draw of the scenario to replay, 0 (default: its own `seed`) or
    /// k (seed + k·0x9E3779B97F4A7C15 modulo 2^63: the draw a sweep of more than k `seeds`
    /// replays as its (k+1)-th), so one draw of a sweep's point can be looked at alone.
    /// As `slicesched replay --draw`.
    pub draw: Option<u32>,
    /// Which registered tenant each scenario tenant is: scenario tenant name → tenant
    /// id. A scenario tenant not named here is the registered tenant of the same name,
    /// if there is one. Either way the tenant's SLA in force when the run starts
    /// replaces the scenario file's, and the run is listed in the tenant's statistics.
    #[schema(value_type = Option<Object>)]
    pub tenants: Option<std::collections::BTreeMap<String, Uuid>>,
    /// When a running request's KV may move between its tenant's instances: `off`
    /// (default), `memory` (when a queue waits for KV blocks), `load` (also to shed the
    /// load of an instance that is behind). As `slicesched replay --kv-migration`.
    pub kv_migration: Option<String>,
    /// Whether the planner's copies stay for the whole run, `static` (default), or come
    /// and go with the metered load, `online`. As `slicesched replay --replan`.
    pub replan: Option<String>,
    /// Which of the planner's candidate plans an operator-level policy runs on: `whatif`
    /// (default: each candidate replayed on the busiest two minutes of the load, the one
    /// with the fewest violations kept; the summary's `plan` says which), or one fixed:
    /// `tier-first`, `serving-first`, `serving-only`. As `slicesched replay --plan`.
    pub plan: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", params(RunQuery),
    responses((status = 200, body = RunPage), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem)))]
async fn list_runs(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<RunQuery>,
) -> ApiResult<Json<RunPage>> {
    caller.reader()?;
    let limit = pagination::limit(q.limit)?;
    let (cur_ts, cur_id) = match &q.cursor {
        Some(c) => {
            let k = pagination::decode(c, 2)?;
            let bad = || ApiError::bad("cursor", "not a cursor this API returned");
            let micros: i64 = k[0].parse().map_err(|_| bad())?;
            let ts = DateTime::<Utc>::from_timestamp_micros(micros).ok_or_else(bad)?;
            (Some(ts), Some(Uuid::parse_str(&k[1]).map_err(|_| bad())?))
        }
        None => (None, None),
    };
    let rows: Vec<Run> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {RUN_COLUMNS} from runs \
         where ($1::text is null or $1 = any(policies)) and ($2::text is null or strpos(lower(scenario), lower($2)) > 0) \
           and ($3::text is null or status = $3) and ($4::timestamptz is null or created_at >= $4) \
           and ($5::timestamptz is null or created_at < $5) \
           and ($6::timestamptz is null or (created_at, id) < ($6, $7)) and ($9::text is null or kind = $9) \
         order by created_at desc, id desc limit $8"
    )))
    .bind(&q.policy)
    .bind(&q.scenario)
    .bind(q.status.map(RunStatus::as_str))
    .bind(q.since)
    .bind(q.until)
    .bind(cur_ts)
    .bind(cur_id)
    .bind(limit + 1)
    .bind(q.kind.map(StoredKind::as_str))
    .fetch_all(&st.db)
    .await?;
    let (items, more) = pagination::split(rows, limit);
    let next_cursor = more
        .then(|| items.last().map(|r| pagination::encode(&format!("{}|{}", r.created_at.timestamp_micros(), r.id))))
        .flatten();
    Ok(Json(RunPage { items, next_cursor }))
}

#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs", params(("id" = Uuid, Path)),
    responses((status = 200, body = Run), (status = 404, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem)))]
async fn get_run(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<Run>> {
    caller.reader()?;
    crate::db::runs::get(&st.db, id).await?.map(Json).ok_or_else(|| ApiError::missing("run", id))
}

#[utoipa::path(post, path = "/api/v1/runs", tag = "runs", request_body = NewRun,
    responses((status = 202, description = "Queued", body = Run), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 413, body = Problem),
              (status = 415, body = Problem), (status = 422, body = Problem)))]
async fn create_run(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewRun>,
) -> ApiResult<(StatusCode, Json<Run>)> {
    caller.admin()?;
    let policies = check_policies(&st, &body).await?;
    start(&st, &caller, &body, policies).await
}

/// Queues a run of `policies` (already checked: by name, or pinned to a plugin row by a
/// trial) after checking the rest of the request.
pub(crate) async fn start(
    st: &AppState,
    caller: &Caller,
    body: &NewRun,
    policies: Vec<String>,
) -> ApiResult<(StatusCode, Json<Run>)> {
    let (rate_scale, targets) = check_knobs(body)?;
    if body.scenario.trim().is_empty() {
        return Err(ApiError::invalid("scenario", "empty"));
    }
    let cfg = st.config.clone();
    let text = body.scenario.clone();
    let searches = match body.kind {
        RunKind::Replay => 0,
        RunKind::Sweep => (policies.len() * targets.as_ref().map_or(1, Vec::len)) as u64,
    };
    let scale = rate_scale.unwrap_or(1.0);
    let draws = body.seeds.unwrap_or(1);
    let resolved =
        tokio::task::spawn_blocking(move || crate::scenarios::resolve(&cfg, &text, searches, u64::from(draws), scale))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
    let tenant_map = check_tenants(st, body, &resolved.tenant_names).await?;
    let modes = check_modes(body)?;
    let mut params = run_params(st, &resolved, &policies, rate_scale, &targets, modes).await?;
    params.seeds = draws;
    params.draw = body.draw.unwrap_or(0);
    let params_json = serde_json::to_value(&params).map_err(|e| ApiError::Internal(e.to_string()))?;
    let id = Uuid::new_v4();
    let kind = body.kind.as_str();
    let mut tx = st.db.begin().await?;
    sqlx::query(
        "insert into runs (id, kind, scenario, scenario_toml, policies, rate_scale, violation_targets, \
         tenant_names, gpus, created_by, params, tenant_map) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(id)
    .bind(kind)
    .bind(&resolved.name)
    .bind(&resolved.toml)
    .bind(&policies)
    .bind(rate_scale)
    .bind(&targets)
    .bind(&resolved.tenant_names)
    .bind(resolved.gpus as i32)
    .bind(caller.actor())
    .bind(&params_json)
    .bind(tenant_map.as_ref().map(|m| serde_json::json!(m)))
    .execute(&mut *tx)
    .await?;
    let detail = serde_json::json!({
        "kind": kind, "scenario": resolved.name, "policies": policies, "params": params_json, "tenants": tenant_map,
    });
    crate::db::audit(&mut *tx, &caller.actor(), "run.create", &id.to_string(), detail).await?;
    tx.commit().await?;
    // Read back before the job starts: the answer shows the run as queued.
    let run = crate::db::runs::get(&st.db, id).await?.ok_or(ApiError::NotFound)?;
    st.jobs.submit(id);
    Ok((StatusCode::ACCEPTED, Json(run)))
}

/// The named scenario tenants exist in the scenario, and the tenants they name exist.
async fn check_tenants(
    st: &AppState,
    body: &NewRun,
    scenario_tenants: &[String],
) -> ApiResult<Option<std::collections::BTreeMap<String, Uuid>>> {
    let Some(map) = &body.tenants else { return Ok(None) };
    for (name, id) in map {
        let shown: String = name.chars().take(64).collect();
        if !scenario_tenants.contains(name) {
            return Err(ApiError::invalid(
                format!("tenants.{shown}"),
                format!("the scenario has no tenant `{shown}` (it has: {})", scenario_tenants.join(", ")),
            ));
        }
        let found: Option<(Uuid,)> = sqlx::query_as("select id from tenants where id = $1 and removed_at is null")
            .bind(id)
            .fetch_optional(&st.db)
            .await?;
        if found.is_none() {
            return Err(ApiError::invalid(format!("tenants.{shown}"), format!("no registered tenant with id {id}")));
        }
    }
    Ok(Some(map.clone()))
}

/// The run's parameters as resolved now (the policy rows that will decide).
async fn run_params(
    st: &AppState,
    resolved: &crate::scenarios::Resolved,
    policies: &[String],
    rate_scale: Option<f64>,
    targets: &Option<Vec<f64>>,
    modes: crate::jobs::params::Modes,
) -> ApiResult<crate::jobs::params::RunParams> {
    use crate::jobs::params;
    let mut out = Vec::new();
    for p in policies {
        let r = params::resolve_policy(&st.db, p).await?;
        out.push(r.ok_or_else(|| ApiError::invalid("policy", format!("no active policy or plugin named `{p}`")))?);
    }
    let seed = toml::from_str::<slicesched_sim::ScenarioSpec>(&resolved.toml).map(|s| s.seed).unwrap_or_default();
    Ok(params::RunParams {
        scenario: resolved.name.clone(),
        scenario_sha256: params::sha256_hex(&resolved.toml),
        seed,
        // A replay says its scale even when it is the default; a sweep searches it.
        rate_scale: if targets.is_none() { Some(rate_scale.unwrap_or(1.0)) } else { None },
        violation_targets: targets.clone(),
        seeds: 1,
        draw: 0,
        policies: out,
        core: params::core_options(st.config.record_max_ops, modes),
        tenants: Vec::new(),
        inputs: resolved.inputs.clone(),
    })
}

async fn check_policies(st: &AppState, body: &NewRun) -> ApiResult<Vec<String>> {
    let (field, named) = match (&body.policy, &body.policies) {
        (Some(p), None) => ("policy", vec![p.clone()]),
        (None, Some(ps)) => ("policies", ps.clone()),
        (Some(_), Some(_)) => return Err(ApiError::invalid("policies", "give `policy` or `policies`, not both")),
        (None, None) => return Err(ApiError::invalid("policy", "required")),
    };
    let mut out: Vec<String> = Vec::new();
    for p in named {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    match body.kind {
        RunKind::Replay if out.len() != 1 => return Err(ApiError::invalid(field, "a replay runs exactly one policy")),
        RunKind::Sweep if out.is_empty() || out.len() > 10 => {
            return Err(ApiError::invalid(field, "a sweep compares 1 to 10 policies"))
        }
        _ => {}
    }
    let available = crate::policies::available(&st.db).await?;
    if let Some(p) = out.iter().find(|p| !available.contains(p)) {
        let shown: String = p.chars().take(64).collect();
        return Err(ApiError::invalid(
            field,
            format!("unknown policy `{shown}` (available: {})", available.join(", ")),
        ));
    }
    Ok(out)
}

/// The replay modes a run asks for (the defaults where it names none).
fn check_modes(body: &NewRun) -> ApiResult<crate::jobs::params::Modes> {
    fn mode<T: std::str::FromStr<Err = String> + Default>(field: &str, v: &Option<String>) -> ApiResult<T> {
        v.as_deref().map_or(Ok(T::default()), |m| m.parse().map_err(|e| ApiError::invalid(field, e)))
    }
    Ok((mode("kv_migration", &body.kv_migration)?, mode("replan", &body.replan)?, mode("plan", &body.plan)?))
}

fn check_knobs(body: &NewRun) -> ApiResult<(Option<f64>, Option<Vec<f64>>)> {
    match body.kind {
        RunKind::Replay => {
            if body.violation_targets.is_some() {
                return Err(ApiError::invalid("violation_targets", "only sweeps take violation targets"));
            }
            if body.seeds.is_some() {
                return Err(ApiError::invalid("seeds", "only sweeps replay several draws"));
            }
            if body.draw.is_some_and(|k| k > MAX_DRAW) {
                return Err(ApiError::invalid("draw", format!("0 to {MAX_DRAW}")));
            }
            if let Some(s) = body.rate_scale {
                if !(s.is_finite() && s > 0.0 && s <= 64.0) {
                    return Err(ApiError::invalid("rate_scale", "must be in (0, 64]"));
                }
            }
            Ok((body.rate_scale, None))
        }
        RunKind::Sweep => {
            if body.rate_scale.is_some() {
                return Err(ApiError::invalid("rate_scale", "a sweep searches the rate scale itself"));
            }
            let t = body.violation_targets.clone().unwrap_or_else(|| vec![0.01, 0.09]);
            if t.is_empty() || t.len() > 5 || t.iter().any(|x| !(x.is_finite() && *x > 0.0 && *x < 1.0)) {
                return Err(ApiError::invalid("violation_targets", "1 to 5 fractions, each in (0, 1)"));
            }
            if body.draw.is_some() {
                return Err(ApiError::invalid("draw", "a sweep names its draws by `seeds`"));
            }
            if body.seeds.is_some_and(|k| !(1..=MAX_SEEDS).contains(&k)) {
                return Err(ApiError::invalid("seeds", format!("1 to {MAX_SEEDS} draws")));
            }
            Ok((None, Some(t)))
        }
    }
}

#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", tag = "runs", params(("id" = Uuid, Path)),
    responses((status = 200, description = "Cancellation requested", body = Run), (status = 404, body = Problem),
              (status = 409, description = "The run already ended", body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem)))]
async fn cancel_run(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<Run>> {
    caller.admin()?;
    let run = crate::db::runs::get(&st.db, id).await?.ok_or(ApiError::NotFound)?;
    if run.kind == "live" && run.status == "running" {
        return Err(ApiError::conflict("kind", "a live run ends when its cluster stops (DELETE /api/v1/live)"));
    }
    if !st.jobs.cancel(id).await? {
        return Err(ApiError::conflict("status", "the run already ended"));
    }
    crate::db::audit(&st.db, &caller.actor(), "run.cancel", &id.to_string(), serde_json::json!({})).await?;
    crate::db::runs::get(&st.db, id).await?.map(Json).ok_or_else(|| ApiError::missing("run", id))
}
