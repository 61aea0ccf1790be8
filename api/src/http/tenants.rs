//! Tenants (admin creates them and gets their key once, and removes them), their
//! versioned SLAs (a tenant reads and changes only its own) and their statistics across
//! runs. A removed tenant is kept (its SLA history, and the runs that replayed it), its
//! keys are revoked, and its routes answer 404 as for a tenant that never existed.

use crate::auth::{Caller, Role};
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
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
    OpenApiRouter::new()
        .routes(routes!(list_tenants, create_tenant))
        .routes(routes!(get_tenant, remove_tenant))
        .routes(routes!(get_sla, put_sla))
        .routes(routes!(sla_history))
        .routes(routes!(stats))
}

/// Names of tenants, models, clusters, keys: what a scenario and a URL can carry safely.
pub fn check_name(field: &str, s: &str) -> ApiResult<()> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !s.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(field, "1 to 64 letters, digits, `-`, `_` or `.`, not starting with `.`"))
    }
}

/// SLA targets. A request violates when its TTFT exceeds `ttft_ms + ttft_ms_per_1k ×
/// prompt_tokens / 1000` or its mean TPOT exceeds `tpot_ms`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SlaTargets {
    /// (0, 600000]
    pub ttft_ms: f64,
    /// [0, 600000], default 0.
    #[serde(default)]
    pub ttft_ms_per_1k: f64,
    /// (0, 10000]
    pub tpot_ms: f64,
}

impl SlaTargets {
    pub fn check(&self, prefix: &str) -> ApiResult<()> {
        let f = |n: &str| format!("{prefix}{n}");
        if !(self.ttft_ms.is_finite() && self.ttft_ms > 0.0 && self.ttft_ms <= 600_000.0) {
            return Err(ApiError::invalid(f("ttft_ms"), "must be in (0, 600000]"));
        }
        if !(self.ttft_ms_per_1k.is_finite() && (0.0..=600_000.0).contains(&self.ttft_ms_per_1k)) {
            return Err(ApiError::invalid(f("ttft_ms_per_1k"), "must be in [0, 600000]"));
        }
        if !(self.tpot_ms.is_finite() && self.tpot_ms > 0.0 && self.tpot_ms <= 10_000.0) {
            return Err(ApiError::invalid(f("tpot_ms"), "must be in (0, 10000]"));
        }
        Ok(())
    }
}

/// One version of a tenant's SLA.
#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct SlaVersion {
    pub version: i32,
    pub ttft_ms: f64,
    pub ttft_ms_per_1k: f64,
    pub tpot_ms: f64,
    pub changed_by: String,
    pub changed_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct Tenant {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// When an admin removed the tenant (only listed with `include_removed=true`).
    pub removed_at: Option<DateTime<Utc>>,
    /// The current SLA version.
    #[sqlx(skip)]
    pub sla: Option<SlaVersion>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    pub items: Vec<Tenant>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    pub name: String,
    pub sla: SlaTargets,
}

/// A created tenant and its API key: the key is shown here once and never again.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedTenant {
    pub tenant: Tenant,
    pub api_key: String,
}

const TENANT_COLUMNS: &str = "id, name, created_at, removed_at";
const SLA_COLUMNS: &str = "version, ttft_ms, ttft_ms_per_1k, tpot_ms, changed_by, changed_at";

async fn current_sla(st: &AppState, id: Uuid) -> ApiResult<Option<SlaVersion>> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {SLA_COLUMNS} from sla_versions where tenant_id = $1 order by version desc limit 1"
    )))
    .bind(id)
    .fetch_optional(&st.db)
    .await?)
}

/// The tenant, if it exists and the caller may see it (404 otherwise, whichever it is).
async fn visible(st: &AppState, caller: &Caller, id: Uuid) -> ApiResult<Tenant> {
    // Another tenant's id gets the very answer an unknown id gets.
    caller.sees_tenant(id).map_err(|_| ApiError::missing("tenant", id))?;
    let mut t: Tenant = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {TENANT_COLUMNS} from tenants where id = $1 and removed_at is null"
    )))
    .bind(id)
    .fetch_optional(&st.db)
    .await?
    .ok_or_else(|| ApiError::missing("tenant", id))?;
    t.sla = current_sla(st, id).await?;
    Ok(t)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TenantQuery {
    /// Admins and analysts: list removed tenants too (with `removed_at` and their last
    /// SLA), so the history of runs that replayed them stays readable.
    include_removed: Option<bool>,
}

#[utoipa::path(get, path = "/api/v1/tenants", tag = "tenants", params(TenantQuery),
    responses((status = 200, description = "All tenants (a tenant sees only itself)", body = TenantList),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 403, body = Problem)))]
async fn list_tenants(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> ApiResult<Json<TenantList>> {
    let removed = q.include_removed.unwrap_or(false);
    if removed {
        caller.reader()?;
    }
    let mut items: Vec<Tenant> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {TENANT_COLUMNS} from tenants where ($1::uuid is null or id = $1) and ($2 or removed_at is null) \
         order by name, created_at"
    )))
    .bind(if caller.role == Role::Tenant { caller.tenant_id } else { None })
    .bind(removed)
    .fetch_all(&st.db)
    .await?;
    for t in &mut items {
        t.sla = current_sla(&st, t.id).await?;
    }
    Ok(Json(TenantList { items }))
}

#[utoipa::path(post, path = "/api/v1/tenants", tag = "tenants", request_body = NewTenant,
    responses((status = 201, body = CreatedTenant), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
async fn create_tenant(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewTenant>,
) -> ApiResult<(StatusCode, Json<CreatedTenant>)> {
    caller.admin()?;
    check_name("name", &body.name)?;
    body.sla.check("sla.")?;
    let actor = caller.actor();
    let mut tx = st.db.begin().await?;
    let (id, token) = register(&mut tx, &body.name, &body.sla, &actor).await?;
    crate::db::audit(
        &mut *tx,
        &actor,
        "tenant.create",
        &id.to_string(),
        serde_json::json!({ "name": body.name, "sla": body.sla }),
    )
    .await?;
    tx.commit().await?;
    let tenant = visible(&st, &caller, id).await?;
    Ok((StatusCode::CREATED, Json(CreatedTenant { tenant, api_key: token })))
}

/// A new tenant, its first SLA and its first key (returned: shown once, stored as its
/// SHA-256), in the caller's transaction (which writes the audit entry).
pub(crate) async fn register(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    name: &str,
    sla: &SlaTargets,
    actor: &str,
) -> Result<(Uuid, String), sqlx::Error> {
    let id = Uuid::new_v4();
    let token = crate::auth::new_token();
    sqlx::query("insert into tenants (id, name) values ($1, $2)").bind(id).bind(name).execute(&mut **tx).await?;
    insert_sla(tx, id, 1, sla, actor).await?;
    sqlx::query(
        "insert into api_keys (id, token_sha256, role, name, tenant_id, created_by) values ($1, $2, 'tenant', $3, $4, $5)",
    )
    .bind(Uuid::new_v4())
    .bind(&crate::auth::sha256(&token)[..])
    .bind(name)
    .bind(id)
    .bind(actor)
    .execute(&mut **tx)
    .await?;
    Ok((id, token))
}

async fn insert_sla(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    id: Uuid,
    version: i32,
    s: &SlaTargets,
    actor: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into sla_versions (tenant_id, version, ttft_ms, ttft_ms_per_1k, tpot_ms, changed_by) \
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(version)
    .bind(s.ttft_ms)
    .bind(s.ttft_ms_per_1k)
    .bind(s.tpot_ms)
    .bind(actor)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[utoipa::path(get, path = "/api/v1/tenants/{id}", tag = "tenants", params(("id" = Uuid, Path)),
    responses((status = 200, body = Tenant), (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn get_tenant(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<Tenant>> {
    visible(&st, &caller, id).await.map(Json)
}

/// Removes a tenant (admin only): a soft delete. The tenant's SLA history and the runs that
/// replayed it stay; its keys are revoked at once; its routes answer 404 from then on.
#[utoipa::path(delete, path = "/api/v1/tenants/{id}", tag = "tenants", params(("id" = Uuid, Path)),
    responses((status = 200, description = "The removed tenant", body = Tenant), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn remove_tenant(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Tenant>> {
    caller.admin()?;
    let actor = caller.actor();
    let mut tx = st.db.begin().await?;
    let mut t: Tenant = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "update tenants set removed_at = now(), removed_by = $2 where id = $1 and removed_at is null \
         returning {TENANT_COLUMNS}"
    )))
    .bind(id)
    .bind(&actor)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| ApiError::missing("tenant", id))?;
    let revoked = sqlx::query(
        "update api_keys set revoked_at = now(), revoked_by = $2 where tenant_id = $1 and revoked_at is null",
    )
    .bind(id)
    .bind(&actor)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    crate::db::audit(
        &mut *tx,
        &actor,
        "tenant.remove",
        &id.to_string(),
        serde_json::json!({ "name": t.name, "keys_revoked": revoked }),
    )
    .await?;
    tx.commit().await?;
    t.sla = current_sla(&st, id).await?;
    Ok(Json(t))
}

#[utoipa::path(get, path = "/api/v1/tenants/{id}/sla", tag = "tenants", params(("id" = Uuid, Path)),
    responses((status = 200, body = SlaVersion), (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn get_sla(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<SlaVersion>> {
    visible(&st, &caller, id).await?.sla.map(Json).ok_or_else(|| ApiError::missing("tenant", id))
}

#[utoipa::path(put, path = "/api/v1/tenants/{id}/sla", tag = "tenants", params(("id" = Uuid, Path)),
    request_body = SlaTargets,
    responses((status = 200, description = "The new version", body = SlaVersion), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 422, body = Problem)))]
async fn put_sla(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<SlaTargets>,
) -> ApiResult<Json<SlaVersion>> {
    visible(&st, &caller, id).await?;
    caller.require(&[Role::Admin, Role::Tenant])?;
    body.check("")?;
    let actor = caller.actor();
    let mut tx = st.db.begin().await?;
    // Serialises concurrent changes of one tenant's SLA: versions stay dense.
    // (And a removal that won the race leaves nothing to change.)
    let locked: Option<(Uuid,)> =
        sqlx::query_as("select id from tenants where id = $1 and removed_at is null for update")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    locked.ok_or_else(|| ApiError::missing("tenant", id))?;
    let (last,): (Option<i32>,) = sqlx::query_as("select max(version) from sla_versions where tenant_id = $1")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    let version = last.unwrap_or(0) + 1;
    insert_sla(&mut tx, id, version, &body, &actor).await?;
    crate::db::audit(
        &mut *tx,
        &actor,
        "sla.update",
        &id.to_string(),
        serde_json::json!({ "version": version, "sla": body }),
    )
    .await?;
    tx.commit().await?;
    // A tenant served live is judged against its new SLA from its next request on.
    if let Some(c) = st.live.current() {
        let sla = slicesched_engine::Sla {
            ttft_ms: body.ttft_ms,
            ttft_ms_per_1k: body.ttft_ms_per_1k,
            tpot_ms: body.tpot_ms,
        };
        if c.set_sla(id, sla) {
            crate::live::history::sla_changed(&st.db, c.id, id, version, &sla).await?;
        }
    }
    current_sla(&st, id).await?.map(Json).ok_or_else(|| ApiError::missing("tenant", id))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SlaHistory {
    /// Newest first.
    pub items: Vec<SlaVersion>,
}

#[utoipa::path(get, path = "/api/v1/tenants/{id}/sla/history", tag = "tenants", params(("id" = Uuid, Path)),
    responses((status = 200, body = SlaHistory), (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn sla_history(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<SlaHistory>> {
    visible(&st, &caller, id).await?;
    let items = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {SLA_COLUMNS} from sla_versions where tenant_id = $1 order by version desc"
    )))
    .bind(id)
    .fetch_all(&st.db)
    .await?;
    Ok(Json(SlaHistory { items }))
}

/// The tenant's figures in one replay attributed to it (the replay's per-tenant summary)
/// and the SLA version they were judged against.
#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct TenantRunStats {
    pub run_id: Uuid,
    pub scenario: String,
    pub policies: Vec<String>,
    pub rate_scale: Option<f64>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The tenant's name in the scenario.
    pub scenario_tenant: String,
    /// `request` (named in the run request) or `name` (matched by name).
    pub matched_by: String,
    /// The SLA version in force when the run started, applied to its requests.
    pub sla_version: i32,
    pub sla_ttft_ms: f64,
    pub sla_ttft_ms_per_1k: f64,
    pub sla_tpot_ms: f64,
    /// Share of the tenant's requests within that SLA (1 − violation rate).
    pub attainment: f64,
    /// The run's plugin failed and the fallback took some decisions.
    pub fallback: bool,
    /// requests, completed, violation_rate, TTFT/TPOT percentiles, tokens/s, SLA used.
    #[schema(value_type = Object)]
    pub stats: serde_json::Value,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantStats {
    pub tenant_id: Uuid,
    pub name: String,
    /// Succeeded replays attributed to this tenant (named in the run request, or
    /// matched by name when the run started: never runs from before the tenant
    /// existed) and the live runs that served it (a running one with its figures so
    /// far), newest first (at most 100).
    pub runs: Vec<TenantRunStats>,
    /// Every SLA version, oldest first: what the attainment chart marks.
    pub sla_versions: Vec<SlaVersion>,
}

#[utoipa::path(get, path = "/api/v1/tenants/{id}/stats", tag = "tenants", params(("id" = Uuid, Path)),
    responses((status = 200, body = TenantStats), (status = 401, body = Problem), (status = 404, body = Problem)))]
async fn stats(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<TenantStats>> {
    let t = visible(&st, &caller, id).await?;
    let runs = sqlx::query_as(
        "select r.id as run_id, r.scenario, r.policies, r.rate_scale, r.started_at, r.finished_at, rt.scenario_tenant, \
                rt.matched_by, rt.sla_version, rt.ttft_ms as sla_ttft_ms, rt.ttft_ms_per_1k as sla_ttft_ms_per_1k, \
                rt.tpot_ms as sla_tpot_ms, 1 - coalesce((e.value ->> 'violation_rate')::float8, 1) as attainment, \
                r.fallback is not null as fallback, e.value as stats \
         from run_tenants rt join runs r on r.id = rt.run_id \
         cross join lateral jsonb_array_elements(r.summary -> 'tenants') e \
         where rt.tenant_id = $1 and (r.status = 'succeeded' and r.kind in ('replay', 'live') \
                or r.status = 'running' and r.kind = 'live') \
           and e.value ->> 'name' = rt.scenario_tenant \
         order by r.started_at desc, r.id desc limit 100",
    )
    .bind(t.id)
    .fetch_all(&st.db)
    .await?;
    let sla_versions = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {SLA_COLUMNS} from sla_versions where tenant_id = $1 order by version"
    )))
    .bind(t.id)
    .fetch_all(&st.db)
    .await?;
    Ok(Json(TenantStats { tenant_id: t.id, name: t.name, runs, sla_versions }))
}
