//! The `runs` table: the rows the API lists and the state changes the job runner makes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgExecutor, PgPool};
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    Replay,
    Sweep,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Replay => "replay",
            RunKind::Sweep => "sweep",
        }
    }
}

/// What a stored run is: a replay or a sweep (asked for with `POST /runs`), or the
/// traffic a live cluster served (stored when it stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StoredKind {
    Replay,
    Sweep,
    Live,
}

impl StoredKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StoredKind::Replay => "replay",
            StoredKind::Sweep => "sweep",
            StoredKind::Live => "live",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// A replay or sweep and where it stands.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct Run {
    pub id: Uuid,
    #[schema(value_type = StoredKind)]
    pub kind: String,
    /// The shipped scenario's name, or the inline scenario's `name`.
    pub scenario: String,
    pub policies: Vec<String>,
    #[schema(value_type = RunStatus)]
    pub status: String,
    /// 0..1
    pub progress: f64,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    /// The replay's `summary.json`, the sweep's `sweep.json`, or null until it finishes; a
    /// live run's figures so far while it serves (over the requests that ended).
    #[schema(value_type = Option<Object>)]
    pub summary: Option<serde_json::Value>,
    /// Replays: the arrival-rate multiplier asked for (null: 1×).
    pub rate_scale: Option<f64>,
    /// How the run ran (see [`crate::jobs::params::RunParams`]): scenario and its
    /// SHA-256, rate scale, seed, the policy as resolved, the core's options, and from
    /// its start the registered tenants whose SLA it applied. Null for runs stored
    /// before parameters were recorded.
    #[schema(value_type = Option<crate::jobs::params::RunParams>)]
    pub params: Option<serde_json::Value>,
    /// Set when the policy's plugin failed or was quarantined and the fallback decided
    /// instead (see [`crate::jobs::params::Fallback`]): such a run's figures are partly
    /// the fallback's. Null when the policy took every decision.
    #[schema(value_type = Option<crate::jobs::params::Fallback>)]
    pub fallback: Option<serde_json::Value>,
}

pub const RUN_COLUMNS: &str = "id, kind, scenario, policies, status, progress, created_at, started_at, finished_at, \
                               error, summary, rate_scale, params, fallback";

/// What a job needs to execute a run (kept in the row, so queued runs survive restarts).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunSpec {
    pub id: Uuid,
    pub kind: String,
    pub scenario: String,
    pub scenario_toml: String,
    pub policies: Vec<String>,
    pub rate_scale: Option<f64>,
    pub violation_targets: Option<Vec<f64>>,
    pub params: Option<serde_json::Value>,
    pub tenant_map: Option<serde_json::Value>,
    pub created_by: String,
}

pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<Run>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("select {RUN_COLUMNS} from runs where id = $1")))
        .bind(id)
        .fetch_optional(db)
        .await
}

pub async fn spec(db: &PgPool, id: Uuid) -> Result<Option<RunSpec>, sqlx::Error> {
    sqlx::query_as(
        "select id, kind, scenario, scenario_toml, policies, rate_scale, violation_targets, params, tenant_map, \
         created_by from runs where id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Moves a queued run to running; false when it is no longer queued (cancelled meanwhile).
pub async fn start(db: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let r = sqlx::query(
        "update runs set status = 'running', started_at = now() where id = $1 and status = 'queued' \
         and not cancel_requested",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

pub async fn set_progress(db: &PgPool, id: Uuid, progress: f64) -> Result<(), sqlx::Error> {
    sqlx::query("update runs set progress = $2 where id = $1 and status = 'running'")
        .bind(id)
        .bind(progress.clamp(0.0, 1.0))
        .execute(db)
        .await?;
    Ok(())
}

/// Ends a run that stores no results (failed, cancelled).
pub async fn finish(db: &PgPool, id: Uuid, status: RunStatus, error: Option<&str>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update runs set status = $2, error = $3, finished_at = now() \
         where id = $1 and status in ('queued', 'running')",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(error.map(|e| crate::text::clean(e, crate::text::MAX_MESSAGE)))
    .execute(db)
    .await?;
    Ok(())
}

/// At start-up: runs a previous process left running can never finish; mark them.
/// Queued runs are returned to be queued again (they hold everything they need).
pub async fn recover(db: &PgPool) -> Result<(u64, Vec<Uuid>), sqlx::Error> {
    let interrupted = sqlx::query(
        "update runs set status = 'interrupted', finished_at = now(), \
         error = 'the service stopped while this run was running' where status = 'running'",
    )
    .execute(db)
    .await?
    .rows_affected();
    let queued: Vec<(Uuid,)> =
        sqlx::query_as("select id from runs where status = 'queued' order by created_at").fetch_all(db).await?;
    Ok((interrupted, queued.into_iter().map(|r| r.0).collect()))
}
