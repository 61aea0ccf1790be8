//! Bulk writes of a finished run, in one transaction: a run is stored whole (results,
//! summary, status) or not at all.

use slicesched_sim::ReplayResult;
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

/// Rows per multi-row insert: large enough to amortise round trips, small enough to keep
/// each statement's parameter arrays modest.
const CHUNK: usize = 20_000;

/// Writes a replay's per-request records and time series.
pub async fn store_replay(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    r: &ReplayResult,
    tenant_names: &[String],
) -> Result<(), sqlx::Error> {
    store_replay_reporting(tx, run, r, tenant_names, &|_| {}).await
}

/// [`store_replay`] telling `progress` the share written so far (0–1, by statement: the
/// request chunks, then series, decisions and ops), so a long store is seen moving.
pub async fn store_replay_reporting(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    r: &ReplayResult,
    tenant_names: &[String],
    progress: &(dyn Fn(f64) + Sync),
) -> Result<(), sqlx::Error> {
    let steps = r.records.len().div_ceil(CHUNK) + 3;
    let mut done = 0usize;
    let mut step = || {
        done += 1;
        progress(done as f64 / steps as f64);
    };
    for chunk in r.records.chunks(CHUNK) {
        insert_requests(tx, run, chunk, tenant_names, false).await?;
        step();
    }
    store_series(tx, run, &r.series, 0, false).await?;
    step();
    store_decisions(tx, run, &r.decisions).await?;
    step();
    store_ops(tx, run, &r.ops).await?;
    step();
    Ok(())
}

/// Writes request records; with `skip_existing`, records already stored are left as they
/// are (a live run writes its records as they end, and all of them again at its stop).
pub async fn insert_requests(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    records: &[slicesched_sim::RequestRecord],
    tenant_names: &[String],
    skip_existing: bool,
) -> Result<(), sqlx::Error> {
    let conflict = if skip_existing { " on conflict (run_id, request_id) do nothing" } else { "" };
    for chunk in records.chunks(CHUNK) {
        let name = |t: u32| tenant_names.get(t as usize).cloned().unwrap_or_else(|| format!("tenant-{t}"));
        let ns = |v: u64| v.min(i64::MAX as u64) as i64;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "insert into run_requests (run_id, request_id, tenant, arrival_ns, prompt_tokens, output_tokens, \
             first_token_ns, finish_ns, ttft_ms, tpot_ms, preemptions, dropped, violated, ttft_target_ms, \
             tpot_target_ms) \
             select $1, * from unnest($2::int[], $3::text[], $4::int8[], $5::int[], $6::int[], $7::int8[], \
             $8::int8[], $9::float8[], $10::float8[], $11::int[], $12::text[], $13::bool[], $14::float8[], \
             $15::float8[]){conflict}"
        )))
        .bind(run)
        .bind(chunk.iter().map(|x| x.id as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| name(x.tenant)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| ns(x.arrival_ns)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.prompt_tokens as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.output_tokens as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.first_token_ns.map(ns)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.finish_ns.map(ns)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.ttft_ns().map(|v| v as f64 / 1e6)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.tpot_ns().map(|v| v as f64 / 1e6)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.preemptions as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.dropped.map(str::to_string)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.violates()).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.ttft_target_ns as f64 / 1e6).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.tpot_target_ns as f64 / 1e6).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

async fn store_decisions(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    d: &[slicesched_sim::DecisionRecord],
) -> Result<(), sqlx::Error> {
    for (c, chunk) in d.chunks(CHUNK).enumerate() {
        let seq0 = (c * CHUNK) as i32;
        sqlx::query(
            "insert into run_decisions (run_id, seq, at_ns, ready_ops, borrowed, rejected) \
             select $1, * from unnest($2::int[], $3::int8[], $4::int[], $5::int[], $6::int[])",
        )
        .bind(run)
        .bind((0..chunk.len() as i32).map(|i| seq0 + i).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.at_ns.min(i64::MAX as u64) as i64).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.ready_ops as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.borrowed as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|x| x.rejected as i32).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The recorded ops, and their window's bounds on the run (what the timeline's meta
/// answers and what bounds a window query's index scan).
async fn store_ops(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    ops: &[slicesched_sim::OpRecord],
) -> Result<(), sqlx::Error> {
    insert_ops(tx, run, ops).await?;
    refresh_op_bounds(tx, run).await
}

pub async fn insert_ops(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    ops: &[slicesched_sim::OpRecord],
) -> Result<(), sqlx::Error> {
    let ns = |v: u64| v.min(i64::MAX as u64) as i64;
    for chunk in ops.chunks(CHUNK) {
        sqlx::query(
            "insert into run_ops (run_id, gpu, start_ns, end_ns, tenant, kind, layer, iteration, predicted_ns, \
             transfer_ns, borrowed, prefill_tokens, decodes) \
             select $1, * from unnest($2::int[], $3::int8[], $4::int8[], $5::int[], $6::text[], $7::int[], \
             $8::int8[], $9::int8[], $10::int8[], $11::bool[], $12::int[], $13::int[])",
        )
        .bind(run)
        .bind(chunk.iter().map(|o| o.gpu as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| ns(o.start_ns)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| ns(o.end_ns)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| o.tenant as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| o.kind.name()).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| o.layer.map(|l| l as i32)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| ns(o.iteration)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| ns(o.predicted_ns)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| ns(o.transfer_ns)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| o.borrowed).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| o.prefill_tokens as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|o| o.decodes as i32).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The run's recorded-op bounds, count and longest op, from what `run_ops` holds.
pub async fn refresh_op_bounds(tx: &mut Transaction<'_, Postgres>, run: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update runs r set ops_from_ns = o.lo, ops_to_ns = o.hi, ops_count = o.n, ops_max_ns = o.longest \
         from (select min(start_ns) lo, max(end_ns) hi, count(*) n, coalesce(max(end_ns - start_ns), 0) longest \
               from run_ops where run_id = $1) o where r.id = $1",
    )
    .bind(run)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Buckets the longest of a series' counters has.
pub fn series_len(s: &slicesched_sim::TimeSeries) -> usize {
    s.end() - s.first
}

/// Writes the series' buckets (a bucket past a counter's end is 0), numbered from
/// `first` (a live run writes its series a slice at a time); with `upsert`, a bucket
/// already stored is overwritten (the second still filling is written again).
pub async fn store_series(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    s: &slicesched_sim::TimeSeries,
    first: usize,
    upsert: bool,
) -> Result<(), sqlx::Error> {
    let at = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0) as i64;
    let buckets: Vec<usize> = (0..series_len(s)).collect();
    let conflict = if upsert {
        " on conflict (run_id, bucket) do update set prompt_tokens = excluded.prompt_tokens, \
         output_tokens = excluded.output_tokens, completed = excluded.completed, \
         violations = excluded.violations, gpu_busy_ns = excluded.gpu_busy_ns"
    } else {
        ""
    };
    for chunk in buckets.chunks(CHUNK) {
        // Postgres has no arrays of arrays of different lengths: each bucket's per-GPU
        // busy time travels as a text array literal.
        let busy: Vec<String> = chunk
            .iter()
            .map(|&i| {
                let v: Vec<String> = s.gpu_busy_ns.iter().map(|g| at(g, i).to_string()).collect();
                format!("{{{}}}", v.join(","))
            })
            .collect();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "insert into run_series (run_id, bucket, prompt_tokens, output_tokens, completed, violations, \
             gpu_busy_ns) select $1, b, p, o, c, v, g::int8[] \
             from unnest($2::int[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::text[]) as t(b, p, o, c, v, g)\
             {conflict}"
        )))
        .bind(run)
        .bind(chunk.iter().map(|&i| (first + i) as i32).collect::<Vec<_>>())
        .bind(chunk.iter().map(|&i| at(&s.prompt_tokens, i)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|&i| at(&s.output_tokens, i)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|&i| at(&s.completed, i)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|&i| at(&s.violations, i)).collect::<Vec<_>>())
        .bind(busy)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
