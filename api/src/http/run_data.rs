//! A run's results: per-request records (filtered, keyset-paginated), the per-second
//! series, sampled scheduling decisions, per-GPU idle-slice figures and the whole run's
//! latency distributions.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{ApiPath, ApiQuery};
use crate::http::pagination;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, QueryBuilder};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_requests))
        .routes(routes!(series))
        .routes(routes!(list_decisions))
        .routes(routes!(gpus))
        .routes(routes!(latency))
}

/// 404 unless the run exists (and the caller may read runs at all).
pub async fn readable_run(st: &AppState, caller: &Caller, id: Uuid) -> ApiResult<()> {
    caller.reader()?;
    let found: Option<(Uuid,)> =
        sqlx::query_as("select id from runs where id = $1").bind(id).fetch_optional(&st.db).await?;
    found.map(|_| ()).ok_or(ApiError::NotFound)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RequestQuery {
    /// Only this tenant's requests (scenario tenant name).
    tenant: Option<String>,
    /// Only requests that violated (true) or met (false) their SLA.
    violated: Option<bool>,
    /// 1..=1000, default 50.
    limit: Option<i64>,
    cursor: Option<String>,
}

/// One request of a replay.
#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct RequestRecord {
    /// The request's id within the run.
    pub id: i32,
    pub tenant: String,
    pub arrival_ns: i64,
    pub prompt_tokens: i32,
    pub output_tokens: i32,
    pub first_token_ns: Option<i64>,
    pub finish_ns: Option<i64>,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub preemptions: i32,
    /// Why it was dropped, if it was.
    pub dropped: Option<String>,
    pub violated: bool,
    pub ttft_target_ms: f64,
    pub tpot_target_ms: f64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RequestPage {
    pub items: Vec<RequestRecord>,
    pub next_cursor: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/requests", tag = "runs", params(("id" = Uuid, Path), RequestQuery),
    responses((status = 200, body = RequestPage), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn list_requests(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<RequestQuery>,
) -> ApiResult<Json<RequestPage>> {
    readable_run(&st, &caller, id).await?;
    let limit = pagination::limit(q.limit)?;
    let after: i32 = match &q.cursor {
        Some(c) => pagination::decode(c, 1)?[0].parse().map_err(|_| ApiError::bad("cursor", "not a cursor"))?,
        None => -1,
    };
    // Only the filters given appear in the SQL, so the planner picks the matching index.
    let mut qb: QueryBuilder<Postgres> = QueryBuilder::new(
        "select request_id as id, tenant, arrival_ns, prompt_tokens, output_tokens, first_token_ns, finish_ns, ttft_ms, \
         tpot_ms, preemptions, dropped, violated, ttft_target_ms, tpot_target_ms from run_requests where run_id = ",
    );
    qb.push_bind(id).push(" and request_id > ").push_bind(after);
    if let Some(t) = &q.tenant {
        qb.push(" and tenant = ").push_bind(t);
    }
    if let Some(v) = q.violated {
        qb.push(" and violated = ").push_bind(v);
    }
    qb.push(" order by request_id limit ").push_bind(limit + 1);
    let rows: Vec<RequestRecord> = qb.build_query_as().fetch_all(&st.db).await?;
    let (items, more) = pagination::split(rows, limit);
    let next_cursor = more.then(|| items.last().map(|r| pagination::encode(&r.id.to_string()))).flatten();
    Ok(Json(RequestPage { items, next_cursor }))
}

/// Per-bucket counters (columnar: index i is bucket i).
#[derive(Debug, Serialize, ToSchema)]
pub struct Series {
    pub bucket_s: f64,
    pub prompt_tokens: Vec<i64>,
    pub output_tokens: Vec<i64>,
    pub completed: Vec<i64>,
    pub violations: Vec<i64>,
    /// Per GPU, busy ns in each bucket.
    pub gpu_busy_ns: Vec<Vec<i64>>,
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/series", tag = "runs", params(("id" = Uuid, Path)),
    responses((status = 200, body = Series), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn series(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<Series>> {
    readable_run(&st, &caller, id).await?;
    #[allow(clippy::type_complexity)]
    let rows: Vec<(i64, i64, i64, i64, Vec<i64>)> = sqlx::query_as(
        "select prompt_tokens, output_tokens, completed, violations, gpu_busy_ns from run_series \
         where run_id = $1 order by bucket",
    )
    .bind(id)
    .fetch_all(&st.db)
    .await?;
    let gpus = rows.iter().map(|r| r.4.len()).max().unwrap_or(0);
    let mut s = Series {
        bucket_s: slicesched_sim::SERIES_BUCKET_NS as f64 / 1e9,
        prompt_tokens: Vec::with_capacity(rows.len()),
        output_tokens: Vec::with_capacity(rows.len()),
        completed: Vec::with_capacity(rows.len()),
        violations: Vec::with_capacity(rows.len()),
        gpu_busy_ns: vec![Vec::with_capacity(rows.len()); gpus],
    };
    for (p, o, c, v, busy) in rows {
        s.prompt_tokens.push(p);
        s.output_tokens.push(o);
        s.completed.push(c);
        s.violations.push(v);
        for (g, col) in s.gpu_busy_ns.iter_mut().enumerate() {
            col.push(busy.get(g).copied().unwrap_or(0));
        }
    }
    Ok(Json(s))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// 1..=1000, default 50.
    limit: Option<i64>,
    cursor: Option<String>,
}

/// One sampled policy decision batch.
#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct Decision {
    pub seq: i32,
    pub at_ns: i64,
    /// Ready ops offered to the policy.
    pub ready_ops: i32,
    /// Placements onto another tenant's GPU.
    pub borrowed: i32,
    /// Placements the core refused.
    pub rejected: i32,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionPage {
    pub items: Vec<Decision>,
    pub next_cursor: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/decisions", tag = "runs", params(("id" = Uuid, Path), PageQuery),
    responses((status = 200, body = DecisionPage), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn list_decisions(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> ApiResult<Json<DecisionPage>> {
    readable_run(&st, &caller, id).await?;
    let limit = pagination::limit(q.limit)?;
    let after: i32 = match &q.cursor {
        Some(c) => pagination::decode(c, 1)?[0].parse().map_err(|_| ApiError::bad("cursor", "not a cursor"))?,
        None => -1,
    };
    let rows: Vec<Decision> = sqlx::query_as(
        "select seq, at_ns, ready_ops, borrowed, rejected from run_decisions where run_id = $1 and seq > $2 \
         order by seq limit $3",
    )
    .bind(id)
    .bind(after)
    .bind(limit + 1)
    .fetch_all(&st.db)
    .await?;
    let (items, more) = pagination::split(rows, limit);
    let next_cursor = more.then(|| items.last().map(|r| pagination::encode(&r.seq.to_string()))).flatten();
    Ok(Json(DecisionPage { items, next_cursor }))
}

/// One GPU's busy fraction and idle-gap distribution.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GpuIdle {
    pub gpu: u32,
    pub sku: String,
    pub busy_fraction: f64,
    pub busy_s: f64,
    /// Busy time spent on other tenants' ops (borrowed slices).
    pub guest_busy_s: f64,
    pub idle_gaps: u64,
    pub idle_gap_p50_ms: f64,
    pub idle_gap_p90_ms: f64,
    pub idle_gap_p99_ms: f64,
    pub idle_share_le_1ms: f64,
    pub idle_share_le_10ms: f64,
    pub idle_share_le_100ms: f64,
    pub idle_share_le_1s: f64,
    #[serde(skip_deserializing)]
    pub histogram: GapHistogram,
    #[serde(skip_serializing, rename = "gap_histogram")]
    #[schema(ignore)]
    raw: RawHistogram,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct GapHistogram {
    /// Upper edge of each bucket, ms (log-spaced, 10 per decade from 1 µs).
    pub upper_edge_ms: Vec<f64>,
    pub count: Vec<u64>,
    pub idle_ns: Vec<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct RawHistogram {
    count: Vec<u64>,
    idle_ns: Vec<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GpuList {
    /// Empty until the run succeeded (and for sweeps).
    pub items: Vec<GpuIdle>,
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/gpus", tag = "runs", params(("id" = Uuid, Path)),
    responses((status = 200, body = GpuList), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn gpus(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<GpuList>> {
    readable_run(&st, &caller, id).await?;
    let row: Option<(Option<serde_json::Value>,)> =
        sqlx::query_as("select summary -> 'gpus' from runs where id = $1 and kind = 'replay'")
            .bind(id)
            .fetch_optional(&st.db)
            .await?;
    let raw = row.and_then(|r| r.0).unwrap_or(serde_json::Value::Array(vec![]));
    let mut items: Vec<GpuIdle> =
        serde_json::from_value(raw).map_err(|e| ApiError::Internal(format!("stored summary: {e}")))?;
    for g in &mut items {
        let n = g.raw.count.len();
        g.histogram = GapHistogram {
            upper_edge_ms: (0..n).map(|b| slicesched_sim::gap_bucket_edge_ns(b) / 1e6).collect(),
            count: std::mem::take(&mut g.raw.count),
            idle_ns: std::mem::take(&mut g.raw.idle_ns),
        };
    }
    Ok(Json(GpuList { items }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LatencyQuery {
    /// Only this tenant's requests (scenario tenant name).
    tenant: Option<String>,
}

/// TTFT, TPOT and end-to-end latency of every request of the run (or of one tenant), as
/// log-spaced histograms (10 bins per decade) with p50/p90/p99, computed in SQL over all
/// of the run's records and kept once the run has succeeded.
#[utoipa::path(get, path = "/api/v1/runs/{id}/latency", tag = "runs", params(("id" = Uuid, Path), LatencyQuery),
    responses((status = 200, body = crate::db::latency::RunLatency), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn latency(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<LatencyQuery>,
) -> ApiResult<Json<crate::db::latency::RunLatency>> {
    caller.reader()?;
    if q.tenant.as_ref().is_some_and(|t| t.is_empty() || t.len() > 200) {
        return Err(ApiError::bad("tenant", "1 to 200 characters"));
    }
    let run: Option<(String, String, Vec<String>)> =
        sqlx::query_as("select kind, status, tenant_names from runs where id = $1")
            .bind(id)
            .fetch_optional(&st.db)
            .await?;
    let (kind, status, tenants) = run.ok_or(ApiError::NotFound)?;
    // Kept only for a stored replay, and per tenant only for the run's own tenants (an
    // arbitrary name must not grow the table).
    let keep =
        kind == "replay" && status == "succeeded" && q.tenant.as_ref().is_none_or(|t| tenants.iter().any(|n| n == t));
    Ok(Json(crate::db::latency::get(&st.db, id, q.tenant.as_deref(), keep).await?))
}
