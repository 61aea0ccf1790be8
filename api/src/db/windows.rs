//! Timeline windows (`run_windows`): the spans of a replay whose ops are recorded one by
//! one in `run_ops`, and the jobs that record more of them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use slicesched_sim::OpRecord;
use sqlx::{PgExecutor, PgPool, Postgres, Transaction};
use utoipa::ToSchema;
use uuid::Uuid;

/// One window of op-level detail.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct Window {
    pub id: Uuid,
    pub run_id: Uuid,
    /// `start` (recorded with the run), `busiest` (the busiest second), `violations`
    /// (the stretch before the worst violation spike), `requested` (a user's) or
    /// `sampled` (a live run's, recorded while it served).
    pub reason: String,
    pub from_ns: i64,
    pub to_ns: i64,
    /// `queued`, `running`, `recorded`, `failed`, `cancelled` or `interrupted`.
    pub status: String,
    /// 0..1 while it is being recorded.
    pub progress: f64,
    /// Ops are recorded one by one from `from_ns` to here (`to_ns` unless the op cap
    /// cut the window short); null until recorded.
    pub recorded_to_ns: Option<i64>,
    /// Op records (one per op per GPU).
    pub ops: i64,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
}

pub const WINDOW_COLUMNS: &str = "id, run_id, reason, from_ns, to_ns, status, progress, recorded_to_ns, ops, \
                                  created_by, created_at, finished_at, error";

pub async fn list(db: impl PgExecutor<'_>, run: Uuid) -> Result<Vec<Window>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {WINDOW_COLUMNS} from run_windows where run_id = $1 order by from_ns, created_at"
    )))
    .bind(run)
    .fetch_all(db)
    .await
}

pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Window>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("select {WINDOW_COLUMNS} from run_windows where id = $1")))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Where a capped recording's detail is complete: every op that started before the
/// returned instant had finished before the last recorded one did, so it was recorded.
pub fn recorded_to(ops: &[OpRecord], to_ns: u64, max_ops: usize) -> u64 {
    if ops.len() < max_ops {
        return to_ns;
    }
    let last_end = ops.iter().map(|o| o.end_ns).max().unwrap_or(0);
    let longest = ops.iter().map(|o| o.end_ns - o.start_ns).max().unwrap_or(0);
    last_end.saturating_sub(2 * longest).min(to_ns)
}

/// The run's first ops, recorded with it: its `start` window.
pub async fn insert_start(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    ops: &[OpRecord],
    max_ops: usize,
    actor: &str,
) -> Result<(), sqlx::Error> {
    let Some(from) = ops.iter().map(|o| o.start_ns).min() else { return Ok(()) };
    let to = ops.iter().map(|o| o.end_ns).max().unwrap_or(from) + 1;
    let rec_to = recorded_to(ops, to, max_ops).max(from + 1);
    sqlx::query(
        "insert into run_windows (id, run_id, reason, from_ns, to_ns, status, progress, recorded_to_ns, ops, \
         created_by, finished_at) values ($1, $2, 'start', $3, $4, 'recorded', 1, $5, $6, $7, now())",
    )
    .bind(Uuid::new_v4())
    .bind(run)
    .bind(from as i64)
    .bind(rec_to as i64)
    .bind(rec_to as i64)
    .bind(ops.len() as i64)
    .bind(actor)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Inserts a queued window inside the caller's transaction (a run's automatic windows
/// are stored with its results, so they are listed the moment it has succeeded).
pub async fn insert_queued(
    tx: &mut Transaction<'_, Postgres>,
    run: Uuid,
    reason: &str,
    from: i64,
    to: i64,
    actor: &str,
) -> Result<Uuid, sqlx::Error> {
    let id = Uuid::new_v4();
    sqlx::query(
        "insert into run_windows (id, run_id, reason, from_ns, to_ns, created_by) values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(run)
    .bind(reason)
    .bind(from)
    .bind(to)
    .bind(actor)
    .execute(&mut **tx)
    .await?;
    Ok(id)
}

/// Queues a window to record; None when the same span is already recorded or queued
/// (the existing window is returned instead).
pub async fn queue(
    db: &PgPool,
    run: Uuid,
    reason: &str,
    from: i64,
    to: i64,
    actor: &str,
) -> Result<(Window, bool), sqlx::Error> {
    let mut tx = db.begin().await?;
    // Serialises requests for one run: two identical requests make one job.
    sqlx::query("select id from runs where id = $1 for update").bind(run).execute(&mut *tx).await?;
    let existing: Option<Window> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {WINDOW_COLUMNS} from run_windows where run_id = $1 and from_ns <= $2 and $3 <= coalesce(recorded_to_ns, to_ns) \
         and status in ('queued', 'running', 'recorded') order by created_at limit 1"
    )))
    .bind(run)
    .bind(from)
    .bind(to)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(w) = existing {
        return Ok((w, false));
    }
    let id = Uuid::new_v4();
    sqlx::query(
        "insert into run_windows (id, run_id, reason, from_ns, to_ns, created_by) values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(run)
    .bind(reason)
    .bind(from)
    .bind(to)
    .bind(actor)
    .execute(&mut *tx)
    .await?;
    crate::db::audit(
        &mut *tx,
        actor,
        "timeline.window.create",
        &run.to_string(),
        serde_json::json!({ "window_id": id, "reason": reason, "from_ns": from, "to_ns": to }),
    )
    .await?;
    tx.commit().await?;
    Ok((get(db, id).await?.ok_or(sqlx::Error::RowNotFound)?, true))
}

/// Moves a queued window to running; false when it is no longer queued.
pub async fn start(db: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let r = sqlx::query("update run_windows set status = 'running' where id = $1 and status = 'queued'")
        .bind(id)
        .execute(db)
        .await?;
    Ok(r.rows_affected() == 1)
}

pub async fn set_progress(db: &PgPool, id: Uuid, p: f64) -> Result<(), sqlx::Error> {
    sqlx::query("update run_windows set progress = $2 where id = $1 and status = 'running'")
        .bind(id)
        .bind(p.clamp(0.0, 1.0))
        .execute(db)
        .await?;
    Ok(())
}

/// Ends a window without ops (failed, cancelled, interrupted).
pub async fn finish(db: &PgPool, id: Uuid, status: &str, error: Option<&str>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update run_windows set status = $2, error = $3, finished_at = now() where id = $1 \
         and status in ('queued', 'running')",
    )
    .bind(id)
    .bind(status)
    .bind(error)
    .execute(db)
    .await?;
    Ok(())
}

/// Stores a window's ops in one transaction: ops of that span recorded before (an
/// overlapping window; the replay is deterministic, so they are the same) are replaced,
/// the window marked recorded, the run's op bounds widened, the change audited.
pub async fn store(db: &PgPool, w: &Window, ops: &[OpRecord], max_ops: usize) -> Result<bool, sqlx::Error> {
    let rec_to = recorded_to(ops, w.to_ns as u64, max_ops).max(w.from_ns as u64 + 1) as i64;
    let kept: Vec<OpRecord> = ops.iter().filter(|o| (o.start_ns as i64) < rec_to).copied().collect();
    let mut tx = db.begin().await?;
    let r = sqlx::query(
        "update run_windows set status = 'recorded', progress = 1, recorded_to_ns = $2, ops = $3, finished_at = now() \
         where id = $1 and status = 'running'",
    )
    .bind(w.id)
    .bind(rec_to)
    .bind(kept.len() as i64)
    .execute(&mut *tx)
    .await?;
    if r.rows_affected() == 0 {
        return Ok(false); // cancelled or interrupted meanwhile
    }
    sqlx::query("delete from run_ops where run_id = $1 and start_ns >= $2 and start_ns < $3")
        .bind(w.run_id)
        .bind(w.from_ns)
        .bind(rec_to)
        .execute(&mut *tx)
        .await?;
    crate::db::results::insert_ops(&mut tx, w.run_id, &kept).await?;
    crate::db::results::refresh_op_bounds(&mut tx, w.run_id).await?;
    crate::db::audit(
        &mut *tx,
        &format!("system:window:{}", w.id),
        "timeline.window.record",
        &w.run_id.to_string(),
        serde_json::json!({ "window_id": w.id, "from_ns": w.from_ns, "recorded_to_ns": rec_to, "ops": kept.len() }),
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// At start-up: windows a dead process was recording are marked; queued ones returned.
pub async fn recover(db: &PgPool) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query(
        "update run_windows set status = 'interrupted', finished_at = now(), \
         error = 'the service stopped while this window was being recorded' where status = 'running'",
    )
    .execute(db)
    .await?;
    let q: Vec<(Uuid,)> =
        sqlx::query_as("select id from run_windows where status = 'queued' order by created_at").fetch_all(db).await?;
    Ok(q.into_iter().map(|r| r.0).collect())
}
