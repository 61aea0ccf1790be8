//! Exports of a finished run as CSV or JSON files: a replay's summary, requests and
//! series, a sweep's summary and points. Rows are streamed from Postgres into the
//! response in chunks (a replay can hold millions of requests): nothing builds the whole
//! body in memory, and a client that goes away stops the query.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{ApiPath, ApiQuery};
use crate::http::run_data::RequestRecord;
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(export))
}

/// What to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// A replay's totals and per-tenant figures, or a sweep's goodput results.
    Summary,
    /// A replay's per-request records, in request order.
    Requests,
    /// A replay's per-second counters, with per-GPU busy time.
    Series,
    /// A sweep's measured points (one per replay of the search).
    Points,
}

impl Part {
    fn as_str(self) -> &'static str {
        match self {
            Part::Summary => "summary",
            Part::Requests => "requests",
            Part::Series => "series",
            Part::Points => "points",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Csv,
    Json,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// `csv` (default) or `json`.
    #[param(inline)]
    format: Option<Format>,
}

/// Bytes gathered before a chunk goes out: big enough to keep syscalls few, small
/// enough that a slow client holds little memory.
const CHUNK: usize = 64 * 1024;

/// A run's results as a file. CSV has a header row; JSON is an array of row objects,
/// except a summary in JSON, which is the stored summary document itself. Only a run
/// that succeeded has results (409 otherwise); requests and series are a replay's,
/// points a sweep's (422 for the other kind).
#[utoipa::path(get, path = "/api/v1/runs/{id}/export/{part}", tag = "runs",
    params(("id" = Uuid, Path), ("part" = inline(Part), Path), ExportQuery),
    responses((status = 200, description = "The file, streamed; Content-Disposition names it",
                content((String = "text/csv"), (Object = "application/json"))),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem), (status = 409, description = "The run has no results", body = Problem),
              (status = 422, description = "This kind of run has no such part", body = Problem)))]
async fn export(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath((id, part)): ApiPath<(Uuid, Part)>,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> ApiResult<Response> {
    caller.reader()?;
    let (kind, status, gpus): (String, String, i32) =
        sqlx::query_as("select kind, status, gpus from runs where id = $1")
            .bind(id)
            .fetch_optional(&st.db)
            .await?
            .ok_or(ApiError::NotFound)?;
    if status != "succeeded" {
        return Err(ApiError::conflict(
            "status",
            format!("the run is {status}: only a run that succeeded has results"),
        ));
    }
    let replay = kind == "replay";
    match (part, replay) {
        (Part::Requests | Part::Series, false) => {
            return Err(ApiError::invalid(
                "part",
                format!("a sweep has no {}: export its summary or points", part.as_str()),
            ))
        }
        (Part::Points, true) => {
            return Err(ApiError::invalid("part", "a replay has no points: export its summary, requests or series"))
        }
        _ => {}
    }
    let fmt = q.format.unwrap_or_default();
    let db = st.db.clone();
    let body = match (part, fmt) {
        (Part::Summary, Format::Json) => {
            // One bounded document, decoded and written as GET /runs/{id} writes it, so
            // the file holds the very figures the API answers.
            let (doc,): (Json<serde_json::Value>,) =
                sqlx::query_as("select summary from runs where id = $1").bind(id).fetch_one(&st.db).await?;
            Body::from(serde_json::to_vec(&doc.0).map_err(|e| ApiError::Internal(e.to_string()))?)
        }
        (Part::Summary, Format::Csv) if replay => {
            pump(db, replay_summary_sql(), id, Encoder::new(fmt, None), |enc, r: ScopedFigures| {
                enc.row(&ReplaySummaryRow::from(r))
            })
        }
        (Part::Summary, Format::Csv) => {
            pump(db, sweep_results_sql(), id, Encoder::new(fmt, None), |enc, r: ResultWithRatio| {
                let mut row = r.e.0;
                row.goodput_vs_dedicated = r.ratio.and_then(|j| j.0);
                enc.row(&row)
            })
        }
        (Part::Requests, _) => stream::<RequestRecord>(db, REQUESTS_SQL.to_string(), id, fmt),
        (Part::Series, _) => stream_series(db, id, gpus.max(0) as usize, fmt),
        (Part::Points, _) => {
            pump(db, elements_sql("points"), id, Encoder::new(fmt, None), |enc, (p,): (Json<PointRow>,)| enc.row(&p.0))
        }
    };
    let (ext, ct) = match fmt {
        Format::Csv => ("csv", "text/csv; charset=utf-8"),
        Format::Json => ("json", "application/json"),
    };
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    let name = format!("attachment; filename=\"run-{id}-{}.{ext}\"", part.as_str());
    h.insert(header::CONTENT_DISPOSITION, HeaderValue::from_str(&name).expect("ascii"));
    // A succeeded run's results never change.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=86400, immutable"));
    Ok(resp)
}

const REQUESTS_SQL: &str =
    "select request_id as id, tenant, arrival_ns, prompt_tokens, output_tokens, first_token_ns, \
     finish_ns, ttft_ms, tpot_ms, preemptions, dropped, violated, ttft_target_ms, tpot_target_ms \
     from run_requests where run_id = $1 order by request_id";

/// Elements of a stored summary's array, in order. They are decoded with serde_json, as
/// `GET /runs/{id}` decodes the summary, so an exported figure is the very number the
/// JSON routes answer (a cast to float8 in SQL can differ in the last digit).
fn elements_sql(array: &str) -> String {
    format!(
        "select x.e from runs, jsonb_array_elements(summary -> '{array}') with ordinality as x(e, n) \
         where id = $1 order by x.n"
    )
}

/// The run's own figures first, then each tenant's.
fn replay_summary_sql() -> String {
    "select 'run' as scope, summary as e, 0::int8 as n from runs where id = $1 \
     union all select 'tenant', x.e, x.n from runs, jsonb_array_elements(summary -> 'tenants') with ordinality as x(e, n) \
     where id = $1 order by n"
        .to_string()
}

/// Every result with the ratio the sweep found for its policy and target.
fn sweep_results_sql() -> String {
    "select x.e, (select q -> 'goodput_vs_dedicated' from jsonb_array_elements(summary -> 'ratios') q \
       where q -> 'policy' = x.e -> 'policy' and q -> 'target' = x.e -> 'target' limit 1) as ratio \
     from runs, jsonb_array_elements(summary -> 'results') with ordinality as x(e, n) where id = $1 order by x.n"
        .to_string()
}

/// The figures a replay's summary has for the whole run (named by its policy) and for each tenant.
#[derive(Debug, Deserialize)]
struct Figures {
    #[serde(alias = "policy")]
    name: Option<String>,
    requests: Option<u64>,
    completed: Option<u64>,
    dropped: Option<u64>,
    violation_rate: Option<f64>,
    prompt_tokens_per_s: Option<f64>,
    output_tokens_per_s: Option<f64>,
    ttft_p50_ms: Option<f64>,
    ttft_p90_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    tpot_p50_ms: Option<f64>,
    tpot_p90_ms: Option<f64>,
    tpot_p99_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
struct ReplaySummaryRow {
    /// `run` for the whole run (name: the policy), `tenant` per tenant.
    scope: String,
    name: Option<String>,
    requests: Option<u64>,
    completed: Option<u64>,
    dropped: Option<u64>,
    violation_rate: Option<f64>,
    prompt_tokens_per_s: Option<f64>,
    output_tokens_per_s: Option<f64>,
    ttft_p50_ms: Option<f64>,
    ttft_p90_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    tpot_p50_ms: Option<f64>,
    tpot_p90_ms: Option<f64>,
    tpot_p99_ms: Option<f64>,
}

#[derive(FromRow)]
struct ScopedFigures {
    scope: String,
    e: Json<Figures>,
}

impl From<ScopedFigures> for ReplaySummaryRow {
    fn from(r: ScopedFigures) -> Self {
        let f = r.e.0;
        ReplaySummaryRow {
            scope: r.scope,
            name: f.name,
            requests: f.requests,
            completed: f.completed,
            dropped: f.dropped,
            violation_rate: f.violation_rate,
            prompt_tokens_per_s: f.prompt_tokens_per_s,
            output_tokens_per_s: f.output_tokens_per_s,
            ttft_p50_ms: f.ttft_p50_ms,
            ttft_p90_ms: f.ttft_p90_ms,
            ttft_p99_ms: f.ttft_p99_ms,
            tpot_p50_ms: f.tpot_p50_ms,
            tpot_p90_ms: f.tpot_p90_ms,
            tpot_p99_ms: f.tpot_p99_ms,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct SweepResultRow {
    policy: Option<String>,
    target: Option<f64>,
    rate_scale: Option<f64>,
    prompt_tokens_per_s: Option<f64>,
    output_tokens_per_s: Option<f64>,
    violation_rate: Option<f64>,
    oom_events: Option<u64>,
    status: Option<String>,
    #[serde(default)]
    goodput_vs_dedicated: Option<f64>,
}

#[derive(FromRow)]
struct ResultWithRatio {
    e: Json<SweepResultRow>,
    ratio: Option<Json<Option<f64>>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct PointRow {
    policy: Option<String>,
    rate_scale: Option<f64>,
    violation_rate: Option<f64>,
    prompt_tokens_per_s: Option<f64>,
    output_tokens_per_s: Option<f64>,
    oom_events: Option<u64>,
}

/// One bucket of a replay's series; in CSV the GPUs' busy time is one column per GPU.
#[derive(Debug, Serialize, FromRow)]
struct SeriesRow {
    bucket: i32,
    t_s: f64,
    prompt_tokens: i64,
    output_tokens: i64,
    completed: i64,
    violations: i64,
    gpu_busy_ns: Vec<i64>,
}

/// Rows of `sql` (bound to the run id) encoded as they arrive.
fn stream<T>(db: PgPool, sql: String, id: Uuid, fmt: Format) -> Body
where
    T: for<'r> FromRow<'r, PgRow> + Serialize + Send + Unpin + 'static,
{
    pump(db, sql, id, Encoder::new(fmt, None), |enc, row: T| enc.row(&row))
}

fn stream_series(db: PgPool, id: Uuid, gpus: usize, fmt: Format) -> Body {
    let sql = format!(
        "select bucket, bucket * {:?}::float8 as t_s, prompt_tokens, output_tokens, completed, violations, gpu_busy_ns \
         from run_series where run_id = $1 order by bucket",
        slicesched_sim::SERIES_BUCKET_NS as f64 / 1e9
    );
    let mut head: Vec<String> =
        ["bucket", "t_s", "prompt_tokens", "output_tokens", "completed", "violations"].map(String::from).to_vec();
    head.extend((0..gpus).map(|g| format!("gpu{g}_busy_ns")));
    pump(db, sql, id, Encoder::new(fmt, Some(head)), move |enc, r: SeriesRow| match enc.fmt {
        Format::Json => enc.row(&r),
        Format::Csv => {
            let mut rec = vec![
                r.bucket.to_string(),
                r.t_s.to_string(),
                r.prompt_tokens.to_string(),
                r.output_tokens.to_string(),
                r.completed.to_string(),
                r.violations.to_string(),
            ];
            rec.extend((0..gpus).map(|g| r.gpu_busy_ns.get(g).copied().unwrap_or(0).to_string()));
            enc.record(&rec)
        }
    })
}

/// Runs the query on its own task and hands the encoded chunks to the response body
/// through a small bounded channel: the query advances only as fast as the client reads.
fn pump<T, F>(db: PgPool, sql: String, id: Uuid, mut enc: Encoder, mut encode: F) -> Body
where
    T: for<'r> FromRow<'r, PgRow> + Send + Unpin + 'static,
    F: FnMut(&mut Encoder, T) -> Result<(), String> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        let fail = |e: String| {
            tracing::error!(run = %id, error = %e, "export stopped");
            Err(std::io::Error::other(e))
        };
        let mut rows = sqlx::query_as::<_, T>(sqlx::AssertSqlSafe(sql)).bind(id).fetch(&db);
        while let Some(row) = rows.next().await {
            let step = row.map_err(|e| e.to_string()).and_then(|r| encode(&mut enc, r));
            if let Err(e) = step {
                // The body ends with an error: the client sees a truncated transfer,
                // never a file that looks complete.
                let _ = tx.send(fail(e)).await;
                return;
            }
            if enc.pending() >= CHUNK && tx.send(Ok(enc.take())).await.is_err() {
                return; // the client went away
            }
        }
        let last = enc.finish();
        let _ = tx.send(last.map_err(std::io::Error::other)).await;
    });
    Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// CSV (header from the first row's field names, or given) or a JSON array of objects.
struct Encoder {
    fmt: Format,
    csv: csv::Writer<Vec<u8>>,
    json: Vec<u8>,
    rows: u64,
    head: Option<Vec<String>>,
}

impl Encoder {
    fn new(fmt: Format, head: Option<Vec<String>>) -> Encoder {
        // A given header is written at once, so an empty export still names its columns.
        let csv = csv::WriterBuilder::new().has_headers(head.is_none()).from_writer(Vec::new());
        let mut e = Encoder { fmt, csv, json: b"[".to_vec(), rows: 0, head };
        if let (Format::Csv, Some(h)) = (fmt, e.head.take()) {
            let _ = e.csv.write_record(&h);
        }
        e
    }

    fn row<T: Serialize>(&mut self, row: &T) -> Result<(), String> {
        match self.fmt {
            Format::Csv => self.csv.serialize(row).map_err(|e| e.to_string())?,
            Format::Json => {
                if self.rows > 0 {
                    self.json.push(b',');
                }
                serde_json::to_writer(&mut self.json, row).map_err(|e| e.to_string())?;
            }
        }
        self.rows += 1;
        Ok(())
    }

    fn record(&mut self, rec: &[String]) -> Result<(), String> {
        self.rows += 1;
        self.csv.write_record(rec).map_err(|e| e.to_string())
    }

    fn pending(&mut self) -> usize {
        match self.fmt {
            Format::Csv => {
                let _ = self.csv.flush();
                self.csv.get_ref().len()
            }
            Format::Json => self.json.len(),
        }
    }

    fn take(&mut self) -> Bytes {
        match self.fmt {
            Format::Csv => {
                // The header, if any, is written: the next writer writes rows only.
                let next = csv::WriterBuilder::new().has_headers(false).from_writer(Vec::new());
                let done = std::mem::replace(&mut self.csv, next);
                // Flushing into a Vec cannot fail.
                Bytes::from(done.into_inner().unwrap_or_default())
            }
            Format::Json => Bytes::from(std::mem::take(&mut self.json)),
        }
    }

    fn finish(&mut self) -> Result<Bytes, String> {
        match self.fmt {
            Format::Csv => self.csv.flush().map_err(|e| e.to_string())?,
            Format::Json => self.json.push(b']'),
        }
        Ok(self.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct R {
        a: i32,
        b: Option<String>,
    }

    #[test]
    fn csv_quotes_what_needs_quoting_and_keeps_one_header() {
        let mut e = Encoder::new(Format::Csv, None);
        e.row(&R { a: 1, b: Some("x, \"y\"".into()) }).unwrap();
        let first = e.take();
        e.row(&R { a: 2, b: None }).unwrap();
        let rest = e.finish().unwrap();
        let all = [first, rest].concat();
        assert_eq!(String::from_utf8(all).unwrap(), "a,b\n1,\"x, \"\"y\"\"\"\n2,\n");
    }

    #[test]
    fn json_is_one_array_across_chunks() {
        let mut e = Encoder::new(Format::Json, None);
        let mut out = Vec::new();
        for a in 0..3 {
            e.row(&R { a, b: None }).unwrap();
            out.extend_from_slice(&e.take());
        }
        out.extend_from_slice(&e.finish().unwrap());
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 3);
        let empty = Encoder::new(Format::Json, None).finish().unwrap();
        assert_eq!(&empty[..], b"[]");
    }

    #[test]
    fn a_given_header_is_written_even_without_rows() {
        let mut e = Encoder::new(Format::Csv, Some(vec!["bucket".into(), "gpu0_busy_ns".into()]));
        assert_eq!(&e.finish().unwrap()[..], b"bucket,gpu0_busy_ns\n");
    }
}
