//! The per-GPU timeline of a replay's recorded ops: which tenant's ops filled which
//! slices. A window with few enough ops comes back op by op (columnar arrays); a larger
//! one as about 2,000 buckets per GPU with busy time per tenant (level of detail).

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

pub const DEFAULT_MAX_OPS: i64 = 50_000;
pub const MAX_MAX_OPS: i64 = 500_000;
/// Buckets per GPU in level-of-detail answers.
pub const BUCKETS: i64 = 2_000;
/// Latest time a window may reach (2^52 ns, 52 simulated days): keeps bucket arithmetic
/// far from overflow.
pub const MAX_NS: i64 = 1 << 52;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(meta)).routes(routes!(timeline))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TimelineMeta {
    /// Bounds of the recorded window (0 and 0 when nothing was recorded).
    pub from_ns: i64,
    pub to_ns: i64,
    /// Recorded ops.
    pub ops: i64,
    pub gpus: Vec<i32>,
    /// Tenant names; an op's `tenant` indexes this list.
    pub tenants: Vec<String>,
}

#[derive(sqlx::FromRow)]
struct MetaRow {
    ops_from_ns: Option<i64>,
    ops_to_ns: Option<i64>,
    ops_count: i64,
    ops_max_ns: i64,
    gpus: i32,
    tenant_names: Vec<String>,
}

async fn meta_row(st: &AppState, caller: &Caller, id: Uuid) -> ApiResult<MetaRow> {
    caller.reader()?;
    sqlx::query_as("select ops_from_ns, ops_to_ns, ops_count, ops_max_ns, gpus, tenant_names from runs where id = $1")
        .bind(id)
        .fetch_optional(&st.db)
        .await?
        .ok_or(ApiError::NotFound)
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/timeline/meta", tag = "runs", params(("id" = Uuid, Path)),
    responses((status = 200, body = TimelineMeta), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn meta(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<TimelineMeta>> {
    let m = meta_row(&st, &caller, id).await?;
    Ok(Json(TimelineMeta {
        from_ns: m.ops_from_ns.unwrap_or(0),
        to_ns: m.ops_to_ns.unwrap_or(0),
        ops: m.ops_count,
        gpus: (0..m.gpus).collect(),
        tenants: m.tenant_names,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WindowQuery {
    /// Window start (default: the recorded window's start).
    from_ns: Option<i64>,
    /// Window end (default: the recorded window's end).
    to_ns: Option<i64>,
    /// Comma-separated GPU indices (default: all).
    gpus: Option<String>,
    /// Most ops returned one by one, default 50,000, at most 500,000.
    max_ops: Option<i64>,
}

/// Ops in the window, columnar: index i of every array is op i.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct OpColumns {
    pub gpu: Vec<i32>,
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    pub tenant: Vec<i32>,
    /// Operator kind name.
    pub kind: Vec<String>,
    pub layer: Vec<Option<i32>>,
    pub predicted_ns: Vec<i64>,
    pub transfer_ns: Vec<i64>,
    /// Ran on a GPU that is not its tenant's home.
    pub borrowed: Vec<bool>,
    pub prefill_tokens: Vec<i32>,
    pub decodes: Vec<i32>,
}

/// Busy time per (GPU, bucket), columnar; only buckets with work are listed.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct BucketColumns {
    pub gpu: Vec<i32>,
    pub t0_ns: Vec<i64>,
    pub busy_ns: Vec<i64>,
    /// Per bucket, busy ns of each tenant (indexed like `tenants` of the meta).
    pub tenant_busy_ns: Vec<Vec<i64>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Timeline {
    Ops { from_ns: i64, to_ns: i64, ops: OpColumns },
    Buckets { from_ns: i64, to_ns: i64, bucket_ns: i64, buckets: BucketColumns },
}

#[derive(sqlx::FromRow)]
struct OpRow {
    gpu: i32,
    start_ns: i64,
    end_ns: i64,
    tenant: i32,
    kind: String,
    layer: Option<i32>,
    predicted_ns: i64,
    transfer_ns: i64,
    borrowed: bool,
    prefill_tokens: i32,
    decodes: i32,
}

fn parse_gpus(s: &Option<String>, count: i32) -> ApiResult<Vec<i32>> {
    let Some(s) = s.as_deref().filter(|s| !s.is_empty()) else { return Ok((0..count).collect()) };
    let mut v = Vec::new();
    for part in s.split(',') {
        let g: i32 = part.trim().parse().map_err(|_| {
            ApiError::bad("gpus", format!("`{}` is not a GPU index", part.chars().take(20).collect::<String>()))
        })?;
        if !(0..count).contains(&g) {
            return Err(ApiError::bad("gpus", format!("GPU {g} is not in this run (0..{count})")));
        }
        if !v.contains(&g) {
            v.push(g);
        }
    }
    Ok(v)
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/timeline", tag = "runs", params(("id" = Uuid, Path), WindowQuery),
    responses((status = 200, body = Timeline), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn timeline(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<WindowQuery>,
) -> ApiResult<Json<Timeline>> {
    let m = meta_row(&st, &caller, id).await?;
    let max_ops = q.max_ops.unwrap_or(DEFAULT_MAX_OPS);
    if !(1..=MAX_MAX_OPS).contains(&max_ops) {
        return Err(ApiError::bad("max_ops", format!("must be between 1 and {MAX_MAX_OPS}")));
    }
    let from = q.from_ns.unwrap_or(m.ops_from_ns.unwrap_or(0));
    let to = q.to_ns.unwrap_or(m.ops_to_ns.unwrap_or(0));
    if from < 0 || to < from || to > MAX_NS {
        return Err(ApiError::bad("to_ns", format!("need 0 <= from_ns <= to_ns <= {MAX_NS}")));
    }
    let gpus = parse_gpus(&q.gpus, m.gpus)?;
    // An op overlaps the window when it starts before its end and ends after its start;
    // no op lasts longer than ops_max_ns, which bounds the index range scanned.
    let lo = from.saturating_sub(m.ops_max_ns);
    const WHERE: &str = "run_id = $1 and gpu = any($2) and start_ns >= $3 and start_ns < $4 and end_ns > $5";
    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select count(*) from (select 1 from run_ops where {WHERE} limit $6) t"
    )))
    .bind(id)
    .bind(&gpus)
    .bind(lo)
    .bind(to)
    .bind(from)
    .bind(max_ops + 1)
    .fetch_one(&st.db)
    .await?;
    if n <= max_ops {
        let rows: Vec<OpRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select gpu, start_ns, end_ns, tenant, kind, layer, predicted_ns, transfer_ns, borrowed, prefill_tokens, \
             decodes from run_ops where {WHERE} order by gpu, start_ns"
        )))
        .bind(id)
        .bind(&gpus)
        .bind(lo)
        .bind(to)
        .bind(from)
        .fetch_all(&st.db)
        .await?;
        let mut c = OpColumns::default();
        for r in rows {
            c.gpu.push(r.gpu);
            c.start_ns.push(r.start_ns);
            c.end_ns.push(r.end_ns);
            c.tenant.push(r.tenant);
            c.kind.push(r.kind);
            c.layer.push(r.layer);
            c.predicted_ns.push(r.predicted_ns);
            c.transfer_ns.push(r.transfer_ns);
            c.borrowed.push(r.borrowed);
            c.prefill_tokens.push(r.prefill_tokens);
            c.decodes.push(r.decodes);
        }
        return Ok(Json(Timeline::Ops { from_ns: from, to_ns: to, ops: c }));
    }
    let bucket_ns = ((to - from) + BUCKETS - 1) / BUCKETS;
    let bucket_ns = bucket_ns.max(1);
    // Busy time clipped to the window and split over the buckets an op spans (one
    // series row for almost every op: ops are short next to buckets at this scale).
    let rows: Vec<(i32, i64, i32, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select gpu, b, tenant, sum(least(end_ns, $4, $5 + (b + 1) * $6) - greatest(start_ns, $5 + b * $6))::int8 \
         from run_ops cross join lateral generate_series((greatest(start_ns, $5) - $5) / $6, \
                                                        (least(end_ns, $4) - 1 - $5) / $6) as b \
         where {WHERE} group by 1, 2, 3 order by 1, 2, 3"
    )))
    .bind(id)
    .bind(&gpus)
    .bind(lo)
    .bind(to)
    .bind(from)
    .bind(bucket_ns)
    .fetch_all(&st.db)
    .await?;
    let tenants = m.tenant_names.len();
    let mut c = BucketColumns::default();
    for (gpu, b, tenant, busy) in rows {
        let t0 = from + b * bucket_ns;
        if c.gpu.last() != Some(&gpu) || c.t0_ns.last() != Some(&t0) {
            c.gpu.push(gpu);
            c.t0_ns.push(t0);
            c.busy_ns.push(0);
            c.tenant_busy_ns.push(vec![0; tenants.max(tenant as usize + 1)]);
        }
        let last = c.busy_ns.len() - 1;
        c.busy_ns[last] += busy;
        if let Some(slot) = c.tenant_busy_ns[last].get_mut(tenant as usize) {
            *slot += busy;
        }
    }
    Ok(Json(Timeline::Buckets { from_ns: from, to_ns: to, bucket_ns, buckets: c }))
}
