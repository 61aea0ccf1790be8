//! The per-GPU timeline of a replay: which tenant's ops filled which slices, over the
//! whole run. Inside a recorded window (`run_windows`) with few enough ops the answer
//! is op by op (columnar arrays); elsewhere it is about 2,000 buckets per GPU summed
//! from the whole run's fine busy buckets (`run_busy`: busy time per tenant, the part
//! borrowed, ops started). Runs stored before whole-run buckets existed answer buckets
//! from their recorded ops and say which span that is (`recorded`), so no client draws
//! unrecorded time as idle. Any other window can be recorded op by op on demand
//! (`POST .../timeline/windows`: a job that replays the run up to the window's end).
//!
//! Answers are gzip-compressed when the client accepts it, carry an ETag, and — for a
//! finished run asked with the meta's `version` — `Cache-Control: immutable`: that URL's
//! answer can never change (a newly recorded window bumps the version).

use crate::auth::Caller;
use crate::db::windows::Window;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
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
    OpenApiRouter::new()
        .routes(routes!(meta))
        .routes(routes!(timeline))
        .routes(routes!(list_windows, create_window))
        .routes(routes!(get_window, cancel_window))
        .layer(tower_http::compression::CompressionLayer::new())
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TimelineMeta {
    /// What the timeline spans: the whole run when `whole_run`, else (runs stored
    /// before whole-run buckets) the recorded ops' bounds (0 and 0 when none).
    pub from_ns: i64,
    pub to_ns: i64,
    /// The replay's simulated length (0 when unknown).
    pub run_end_ns: i64,
    /// Busy buckets cover every op of the run.
    pub whole_run: bool,
    /// Width of the stored whole-run buckets (null without them).
    pub bucket_ns: Option<i64>,
    /// Ops recorded one by one (over all windows).
    pub ops: i64,
    pub gpus: Vec<i32>,
    /// Tenant names; an op's `tenant` indexes this list.
    pub tenants: Vec<String>,
    /// Windows of op-level detail, recorded or being recorded.
    pub windows: Vec<Window>,
    /// Changes whenever a window is recorded: pass it as `v` to get cacheable answers.
    pub version: i64,
    /// The run's status (only a finished run's answers are immutable).
    pub status: String,
}

#[derive(sqlx::FromRow)]
struct MetaRow {
    status: String,
    ops_from_ns: Option<i64>,
    ops_to_ns: Option<i64>,
    ops_count: i64,
    ops_max_ns: i64,
    gpus: i32,
    tenant_names: Vec<String>,
    busy_bucket_ns: Option<i64>,
    busy_buckets: i32,
    run_end_ns: Option<i64>,
    version: i64,
}

async fn meta_row(st: &AppState, caller: &Caller, id: Uuid) -> ApiResult<MetaRow> {
    caller.reader()?;
    sqlx::query_as(
        "select status, ops_from_ns, ops_to_ns, ops_count, ops_max_ns, gpus, tenant_names, busy_bucket_ns, \
         busy_buckets, ((summary ->> 'duration_s')::float8 * 1e9)::int8 as run_end_ns, \
         (select count(*) from run_windows w where w.run_id = r.id and w.status = 'recorded') as version \
         from runs r where id = $1",
    )
    .bind(id)
    .fetch_optional(&st.db)
    .await?
    .ok_or_else(|| ApiError::missing("run", id))
}

impl MetaRow {
    fn whole_run(&self) -> bool {
        self.busy_bucket_ns.is_some() && self.busy_buckets > 0
    }
    /// The span the timeline covers.
    fn span(&self) -> (i64, i64) {
        if self.whole_run() {
            let end = self.run_end_ns.unwrap_or(0).max(self.busy_bucket_ns.unwrap_or(1) * self.busy_buckets as i64);
            (0, self.run_end_ns.filter(|&e| e > 0).unwrap_or(end))
        } else {
            (self.ops_from_ns.unwrap_or(0), self.ops_to_ns.unwrap_or(0))
        }
    }
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/timeline/meta", tag = "runs", params(("id" = Uuid, Path)),
    responses((status = 200, body = TimelineMeta), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn meta(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<TimelineMeta>> {
    let m = meta_row(&st, &caller, id).await?;
    let windows = crate::db::windows::list(&st.db, id).await?;
    let (mut from_ns, mut to_ns) = m.span();
    if !m.whole_run() {
        // A recorded window is covered whole (a live run's sample starts before its first op).
        for w in windows.iter().filter(|w| w.status == "recorded") {
            from_ns = from_ns.min(w.from_ns);
            to_ns = to_ns.max(w.recorded_to_ns.unwrap_or(w.to_ns));
        }
    }
    Ok(Json(TimelineMeta {
        from_ns,
        to_ns,
        run_end_ns: m.run_end_ns.unwrap_or(0),
        whole_run: m.whole_run(),
        bucket_ns: m.busy_bucket_ns,
        ops: m.ops_count,
        gpus: (0..m.gpus).collect(),
        windows,
        tenants: m.tenant_names,
        version: m.version,
        status: m.status,
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
    /// The meta's `version`: when it is current and the run finished, the answer is
    /// marked immutable.
    v: Option<i64>,
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
    /// Op time in the bucket, all tenants (under MPS lanes it can exceed the width).
    pub busy_ns: Vec<i64>,
    /// Per bucket, busy ns of each tenant (indexed like `tenants` of the meta).
    pub tenant_busy_ns: Vec<Vec<i64>>,
    /// Of `busy_ns`, ops that ran away from their home (borrowed slices).
    pub borrowed_ns: Vec<i64>,
    /// Ops that started in the bucket.
    pub ops: Vec<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Timeline {
    /// Every op in the window (it lies inside a recorded window).
    Ops { from_ns: i64, to_ns: i64, recorded: Vec<[i64; 2]>, ops: OpColumns },
    /// Busy time in buckets. `recorded`: the spans within the window this covers
    /// (the whole window with whole-run buckets); time outside them is unrecorded,
    /// not idle.
    Buckets { from_ns: i64, to_ns: i64, bucket_ns: i64, recorded: Vec<[i64; 2]>, buckets: BucketColumns },
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
    responses((status = 200, body = Timeline, headers(("ETag" = String), ("Cache-Control" = String))),
              (status = 304, description = "Not modified (If-None-Match)"), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn timeline(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<WindowQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let m = meta_row(&st, &caller, id).await?;
    let max_ops = q.max_ops.unwrap_or(DEFAULT_MAX_OPS);
    if !(1..=MAX_MAX_OPS).contains(&max_ops) {
        return Err(ApiError::bad("max_ops", format!("must be between 1 and {MAX_MAX_OPS}")));
    }
    let (span_from, span_to) = m.span();
    let from = q.from_ns.unwrap_or(span_from);
    let to = q.to_ns.unwrap_or(span_to);
    if from < 0 || to < from || to > MAX_NS {
        return Err(ApiError::bad("to_ns", format!("need 0 <= from_ns <= to_ns <= {MAX_NS}")));
    }
    let gpus = parse_gpus(&q.gpus, m.gpus)?;
    // The answer depends on the run's state, its recorded windows and the query only.
    let key = format!("{id}|{}|{}|{from}|{to}|{gpus:?}|{max_ops}", m.status, m.version);
    let etag = format!("\"{}\"", &hex::encode(crate::auth::sha256(&key))[..32]);
    let finished = m.status == "succeeded";
    let cache = if finished && q.v == Some(m.version) { "private, max-age=31536000, immutable" } else { "no-cache" };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        Json(answer(&st, id, &m, &gpus, from, to, max_ops).await?).into_response()
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, HeaderValue::from_str(&etag).expect("hex is a header value"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(header::VARY, HeaderValue::from_static("Authorization, Accept-Encoding"));
    Ok(resp)
}

const WHERE: &str = "run_id = $1 and gpu = any($2) and start_ns >= $3 and start_ns < $4 and end_ns > $5";

async fn answer(
    st: &AppState,
    id: Uuid,
    m: &MetaRow,
    gpus: &[i32],
    from: i64,
    to: i64,
    max_ops: i64,
) -> ApiResult<Timeline> {
    let recorded: Vec<[i64; 2]> = crate::db::windows::list(&st.db, id)
        .await?
        .into_iter()
        .filter(|w| w.status == "recorded")
        .filter_map(|w| Some([w.from_ns, w.recorded_to_ns?]))
        .collect();
    // An op overlaps the window when it starts before its end and ends after its start;
    // no op lasts longer than ops_max_ns, which bounds the index range scanned.
    let lo = from.saturating_sub(m.ops_max_ns);
    let inside = recorded.iter().any(|w| w[0] <= from && to <= w[1]);
    if inside || !m.whole_run() {
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select count(*) from (select 1 from run_ops where {WHERE} limit $6) t"
        )))
        .bind(id)
        .bind(gpus)
        .bind(lo)
        .bind(to)
        .bind(from)
        .bind(max_ops + 1)
        .fetch_one(&st.db)
        .await?;
        if inside && n <= max_ops {
            return Ok(Timeline::Ops {
                from_ns: from,
                to_ns: to,
                recorded: vec![[from, to]],
                ops: ops(st, id, gpus, lo, from, to).await?,
            });
        }
    }
    if m.whole_run() {
        let fine = m.busy_bucket_ns.unwrap_or(1).max(1);
        let factor = crate::db::busy::factor_for(to - from, fine, BUCKETS);
        let tenants = m.tenant_names.len();
        let rows = crate::db::busy::window(&st.db, id, gpus, tenants, fine, from, to, factor).await?;
        let width = fine * factor;
        let mut c = BucketColumns::default();
        for f in rows {
            c.gpu.push(f.gpu);
            c.t0_ns.push(f.index * width);
            c.busy_ns.push(f.tenant_busy_ns.iter().sum());
            c.tenant_busy_ns.push(f.tenant_busy_ns);
            c.borrowed_ns.push(f.borrowed_ns);
            c.ops.push(f.ops);
        }
        let (_, end) = m.span();
        let recorded = vec![[from.min(end), to.min(end)]];
        return Ok(Timeline::Buckets { from_ns: from, to_ns: to, bucket_ns: width, recorded, buckets: c });
    }
    legacy_buckets(st, id, m, gpus, lo, from, to, recorded).await
}

async fn ops(st: &AppState, id: Uuid, gpus: &[i32], lo: i64, from: i64, to: i64) -> ApiResult<OpColumns> {
    let rows: Vec<OpRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select gpu, start_ns, end_ns, tenant, kind, layer, predicted_ns, transfer_ns, borrowed, prefill_tokens, \
         decodes from run_ops where {WHERE} order by gpu, start_ns"
    )))
    .bind(id)
    .bind(gpus)
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
    Ok(c)
}

/// Runs stored before whole-run buckets: buckets from the recorded ops, and the spans
/// they cover (`recorded`), so a client shows the rest as not recorded.
#[allow(clippy::too_many_arguments)]
async fn legacy_buckets(
    st: &AppState,
    id: Uuid,
    m: &MetaRow,
    gpus: &[i32],
    lo: i64,
    from: i64,
    to: i64,
    windows: Vec<[i64; 2]>,
) -> ApiResult<Timeline> {
    let bucket_ns = (((to - from) + BUCKETS - 1) / BUCKETS).max(1);
    // Busy time clipped to the window and split over the buckets an op spans (one
    // series row for almost every op: ops are short next to buckets at this scale).
    let rows: Vec<(i32, i64, i32, i64, i64, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select gpu, b, tenant, sum(least(end_ns, $4, $5 + (b + 1) * $6) - greatest(start_ns, $5 + b * $6))::int8, \
         sum(case when borrowed then least(end_ns, $4, $5 + (b + 1) * $6) - greatest(start_ns, $5 + b * $6) else 0 end)::int8, \
         count(*) filter (where start_ns >= $5 + b * $6) \
         from run_ops cross join lateral generate_series((greatest(start_ns, $5) - $5) / $6, \
                                                        (least(end_ns, $4) - 1 - $5) / $6) as b \
         where {WHERE} group by 1, 2, 3 order by 1, 2, 3"
    )))
    .bind(id)
    .bind(gpus)
    .bind(lo)
    .bind(to)
    .bind(from)
    .bind(bucket_ns)
    .fetch_all(&st.db)
    .await?;
    let tenants = m.tenant_names.len();
    let mut c = BucketColumns::default();
    for (gpu, b, tenant, busy, borrowed, n) in rows {
        let t0 = from + b * bucket_ns;
        if c.gpu.last() != Some(&gpu) || c.t0_ns.last() != Some(&t0) {
            c.gpu.push(gpu);
            c.t0_ns.push(t0);
            c.busy_ns.push(0);
            c.borrowed_ns.push(0);
            c.ops.push(0);
            c.tenant_busy_ns.push(vec![0; tenants.max(tenant as usize + 1)]);
        }
        let last = c.busy_ns.len() - 1;
        c.busy_ns[last] += busy;
        c.borrowed_ns[last] += borrowed;
        c.ops[last] += n;
        if let Some(slot) = c.tenant_busy_ns[last].get_mut(tenant as usize) {
            *slot += busy;
        }
    }
    let recorded =
        windows.into_iter().filter(|w| w[1] > from && w[0] < to).map(|w| [w[0].max(from), w[1].min(to)]).collect();
    Ok(Timeline::Buckets { from_ns: from, to_ns: to, bucket_ns, recorded, buckets: c })
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWindow {
    pub from_ns: i64,
    pub to_ns: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WindowList {
    pub items: Vec<Window>,
}

/// Longest window recorded on demand (simulated): its ops must fit the op cap.
pub const MAX_WINDOW_NS: i64 = 60_000_000_000;

#[utoipa::path(get, path = "/api/v1/runs/{id}/timeline/windows", tag = "runs", params(("id" = Uuid, Path)),
    responses((status = 200, body = WindowList), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn list_windows(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<WindowList>> {
    meta_row(&st, &caller, id).await?;
    Ok(Json(WindowList { items: crate::db::windows::list(&st.db, id).await? }))
}

/// Records a window of a finished replay op by op (admin): a job replays the run with
/// its stored parameters up to the window's end. 202 with the queued window (200 with
/// the existing one when that span is already recorded or queued); poll its progress.
#[utoipa::path(post, path = "/api/v1/runs/{id}/timeline/windows", tag = "runs", params(("id" = Uuid, Path)),
    request_body = NewWindow,
    responses((status = 202, description = "Queued", body = Window), (status = 200, description = "Already recorded or queued", body = Window),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, body = Problem), (status = 422, body = Problem)))]
async fn create_window(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<NewWindow>,
) -> ApiResult<(StatusCode, Json<Window>)> {
    let m = meta_row(&st, &caller, id).await?;
    caller.admin()?;
    if m.status != "succeeded" {
        return Err(ApiError::conflict(
            "status",
            format!("run {id} is {}: only a finished replay's windows can be recorded", m.status),
        ));
    }
    let (kind, params): (String, Option<serde_json::Value>) =
        sqlx::query_as("select kind, params from runs where id = $1").bind(id).fetch_one(&st.db).await?;
    if kind != "replay" || params.is_none() {
        return Err(ApiError::conflict("run", "only replays stored with their parameters can be replayed exactly"));
    }
    let end = m.run_end_ns.unwrap_or(0);
    if body.from_ns < 0 || body.to_ns <= body.from_ns || body.from_ns >= end.max(1) {
        return Err(ApiError::invalid(
            "to_ns",
            format!("need 0 <= from_ns < to_ns and from_ns before the run's end ({end} ns)"),
        ));
    }
    if body.to_ns - body.from_ns > MAX_WINDOW_NS {
        return Err(ApiError::invalid("to_ns", format!("a window spans at most {} s", MAX_WINDOW_NS / 1_000_000_000)));
    }
    let to = body.to_ns.min(end.max(body.from_ns + 1));
    let (w, new) = crate::db::windows::queue(&st.db, id, "requested", body.from_ns, to, &caller.actor()).await?;
    if new {
        st.jobs.submit_window(w.id);
    }
    Ok((if new { StatusCode::ACCEPTED } else { StatusCode::OK }, Json(w)))
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/timeline/windows/{window_id}", tag = "runs",
    params(("id" = Uuid, Path), ("window_id" = Uuid, Path)),
    responses((status = 200, body = Window), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn get_window(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath((id, window_id)): ApiPath<(Uuid, Uuid)>,
) -> ApiResult<Json<Window>> {
    meta_row(&st, &caller, id).await?;
    crate::db::windows::get(&st.db, window_id)
        .await?
        .filter(|w| w.run_id == id)
        .map(Json)
        .ok_or_else(|| ApiError::missing("timeline window", window_id))
}

#[utoipa::path(delete, path = "/api/v1/runs/{id}/timeline/windows/{window_id}", tag = "runs",
    params(("id" = Uuid, Path), ("window_id" = Uuid, Path)),
    responses((status = 200, description = "Cancellation requested", body = Window), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)))]
async fn cancel_window(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath((id, window_id)): ApiPath<(Uuid, Uuid)>,
) -> ApiResult<Json<Window>> {
    meta_row(&st, &caller, id).await?;
    caller.admin()?;
    let w = crate::db::windows::get(&st.db, window_id)
        .await?
        .filter(|w| w.run_id == id)
        .ok_or_else(|| ApiError::missing("timeline window", window_id))?;
    if !st.jobs.cancel_window(w.id).await? {
        return Err(ApiError::conflict("status", format!("window {window_id} already ended ({})", w.status)));
    }
    crate::db::audit(
        &st.db,
        &caller.actor(),
        "timeline.window.cancel",
        &id.to_string(),
        serde_json::json!({ "window_id": window_id }),
    )
    .await?;
    crate::db::windows::get(&st.db, window_id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::missing("timeline window", window_id))
}
