//! Whole-run latency distributions: TTFT, TPOT and end-to-end latency of every request
//! record of a run (or of one tenant), as log-spaced histograms with percentiles,
//! computed in SQL over the completed requests with the summary's definition (nearest
//! rank: `percentile_disc`), so a page's cards (from the summary) and its histogram
//! notes show one p99 per figure. A run's records never change once it succeeded, so the answer is
//! computed once — in the run's own transaction when it is stored, or on first read for
//! runs stored before — and kept in `run_latency`.

use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgPool};
use utoipa::ToSchema;
use uuid::Uuid;

/// Histogram bins per decade (bin b covers [10^(b/10), 10^((b+1)/10)) ms).
pub const BINS_PER_DECADE: i32 = 10;

/// One latency's distribution over the requests that have it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LatencyHistogram {
    /// Requests with this latency (completed; TPOT needs two output tokens).
    pub count: i64,
    pub min_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Bin edges, ms, log-spaced (`bins_per_decade` per decade); one more than `counts`.
    pub edges_ms: Vec<f64>,
    /// Requests per bin, from the lowest non-empty bin to the highest.
    pub counts: Vec<i64>,
}

/// A run's latency distributions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunLatency {
    pub run_id: Uuid,
    /// The tenant asked for; null for all of the run's requests.
    pub tenant: Option<String>,
    /// Request records considered (every one of the run's, or the tenant's).
    pub requests: i64,
    pub bins_per_decade: i32,
    /// Time to first token.
    pub ttft_ms: LatencyHistogram,
    /// Mean time per output token after the first.
    pub tpot_ms: LatencyHistogram,
    /// Arrival to last token.
    pub e2e_ms: LatencyHistogram,
}

/// The three latencies as SQL expressions over `run_requests`.
const METRICS: [&str; 3] = ["ttft_ms", "tpot_ms", "(finish_ns - arrival_ns) / 1e6::float8"];

async fn histogram(
    conn: &mut PgConnection,
    run: Uuid,
    tenant: Option<&str>,
    expr: &str,
) -> Result<LatencyHistogram, sqlx::Error> {
    let from = format!(
        "(select {expr} as v from run_requests where run_id = $1 and ($2::text is null or tenant = $2) \
         and finish_ns is not null) s where v > 0"
    );
    #[allow(clippy::type_complexity)]
    let (count, min, max, mean, pct): (i64, Option<f64>, Option<f64>, Option<f64>, Option<Vec<f64>>) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select count(*), min(v), max(v), avg(v), \
             percentile_disc(array[0.5, 0.9, 0.99]) within group (order by v) from {from}"
        )))
        .bind(run)
        .bind(tenant)
        .fetch_one(&mut *conn)
        .await?;
    let bins: Vec<(i32, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select floor(log(v) * {BINS_PER_DECADE})::int as b, count(*) from {from} group by b order by b"
    )))
    .bind(run)
    .bind(tenant)
    .fetch_all(&mut *conn)
    .await?;
    let (mut edges_ms, mut counts) = (Vec::new(), Vec::new());
    if let (Some(lo), Some(hi)) = (bins.first().map(|b| b.0), bins.last().map(|b| b.0)) {
        counts = vec![0; (hi - lo + 1) as usize];
        for (b, n) in &bins {
            counts[(b - lo) as usize] = *n;
        }
        edges_ms = (lo..=hi + 1).map(|b| 10f64.powf(b as f64 / BINS_PER_DECADE as f64)).collect();
    }
    let p = |i: usize| pct.as_ref().and_then(|p| p.get(i).copied());
    Ok(LatencyHistogram {
        count,
        min_ms: min,
        max_ms: max,
        mean_ms: mean,
        p50_ms: p(0),
        p90_ms: p(1),
        p99_ms: p(2),
        edges_ms,
        counts,
    })
}

/// Computes a run's distributions (inside the caller's transaction: the percentiles sort
/// in memory under a larger `work_mem` for it).
pub async fn compute(conn: &mut PgConnection, run: Uuid, tenant: Option<&str>) -> Result<RunLatency, sqlx::Error> {
    sqlx::query("set local work_mem = '64MB'").execute(&mut *conn).await?;
    let (requests,): (i64,) =
        sqlx::query_as("select count(*) from run_requests where run_id = $1 and ($2::text is null or tenant = $2)")
            .bind(run)
            .bind(tenant)
            .fetch_one(&mut *conn)
            .await?;
    let ttft_ms = histogram(conn, run, tenant, METRICS[0]).await?;
    let tpot_ms = histogram(conn, run, tenant, METRICS[1]).await?;
    let e2e_ms = histogram(conn, run, tenant, METRICS[2]).await?;
    Ok(RunLatency {
        run_id: run,
        tenant: tenant.map(str::to_string),
        requests,
        bins_per_decade: BINS_PER_DECADE,
        ttft_ms,
        tpot_ms,
        e2e_ms,
    })
}

/// Computes and keeps a finished run's distributions (in its storing transaction).
pub async fn store(conn: &mut PgConnection, run: Uuid, tenant: Option<&str>) -> Result<RunLatency, sqlx::Error> {
    let l = compute(conn, run, tenant).await?;
    let json = serde_json::to_value(&l).map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
    sqlx::query("insert into run_latency (run_id, tenant, latency) values ($1, $2, $3) on conflict do nothing")
        .bind(run)
        .bind(tenant.unwrap_or(""))
        .bind(json)
        .execute(&mut *conn)
        .await?;
    Ok(l)
}

/// The distributions of a run: kept ones when the run succeeded (computed and kept now if
/// it has none yet); computed and not kept otherwise (a run still going, or a tenant the
/// run does not have, has no records: empty histograms).
pub async fn get(db: &PgPool, run: Uuid, tenant: Option<&str>, keep: bool) -> Result<RunLatency, sqlx::Error> {
    if keep {
        let kept: Option<(serde_json::Value,)> =
            sqlx::query_as("select latency from run_latency where run_id = $1 and tenant = $2")
                .bind(run)
                .bind(tenant.unwrap_or(""))
                .fetch_optional(db)
                .await?;
        if let Some(l) = kept.and_then(|(v,)| serde_json::from_value(v).ok()) {
            return Ok(l);
        }
    }
    let mut tx = db.begin().await?;
    let l = if keep { store(&mut tx, run, tenant).await? } else { compute(&mut tx, run, tenant).await? };
    tx.commit().await?;
    Ok(l)
}
