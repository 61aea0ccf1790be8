//! `/api/v1/live` (admin only): start, inspect and stop the live cluster that serves
//! `/v1`; switch its policy at the next decision boundary. Starting and stopping are
//! audited.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::ApiJson;
use crate::live::{Cluster, LiveConfig, Snapshot};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(status, start, stop)).routes(routes!(switch_policy))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ServedModel {
    pub tenant: String,
    pub tenant_id: Uuid,
    pub model: String,
    pub max_model_len: u32,
    pub max_pending: u32,
}

/// A live cluster: what it serves and its engines now.
#[derive(Debug, Serialize, ToSchema)]
pub struct LiveStatus {
    pub id: Uuid,
    /// `running`, or `stopped` in the answer of a stop.
    pub state: String,
    pub started_at: DateTime<Utc>,
    pub policy: String,
    pub config: LiveConfig,
    pub models: Vec<ServedModel>,
    pub now: Snapshot,
    /// The run (kind `live`, id = this cluster's) its traffic is stored under while
    /// serving: records written, and let go when the database could not keep up.
    pub history: crate::live::history::HistorySnapshot,
}

fn status_of(c: &Cluster, state: &str) -> LiveStatus {
    LiveStatus {
        id: c.id,
        state: state.into(),
        started_at: c.started_at,
        policy: c.policy.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        config: c.config.clone(),
        models: c
            .tenants
            .iter()
            .map(|t| ServedModel {
                tenant: t.name.clone(),
                tenant_id: t.tenant_id,
                model: t.model_id.clone(),
                max_model_len: t.max_model_len,
                max_pending: t.max_pending,
            })
            .collect(),
        now: c.snapshot(),
        history: c.history.snapshot(),
    }
}

fn none() -> ApiError {
    ApiError::Missing("no live cluster is running".into())
}

#[utoipa::path(get, path = "/api/v1/live", tag = "live",
    responses((status = 200, body = LiveStatus), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn status(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<LiveStatus>> {
    caller.admin()?;
    let c = st.live.current().ok_or_else(none)?;
    Ok(Json(status_of(&c, "running")))
}

#[utoipa::path(post, path = "/api/v1/live", tag = "live", request_body = LiveConfig,
    responses((status = 201, body = LiveStatus), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 409, body = Problem), (status = 413, body = Problem),
              (status = 415, body = Problem), (status = 422, body = Problem)))]
async fn start(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(cfg): ApiJson<LiveConfig>,
) -> ApiResult<(StatusCode, Json<LiveStatus>)> {
    caller.admin()?;
    let c = crate::live::start(&st, cfg, &caller.actor()).await?;
    let detail = serde_json::to_value(&c.config).unwrap_or_default();
    if let Err(e) = crate::db::audit(&st.db, &caller.actor(), "live.start", &c.id.to_string(), detail).await {
        // Nothing was changed that the log does not say: the cluster goes again.
        st.live.stop().await;
        return Err(e.into());
    }
    Ok((StatusCode::CREATED, Json(status_of(&c, "running"))))
}

#[utoipa::path(delete, path = "/api/v1/live", tag = "live",
    responses((status = 200, description = "Stopped: in-flight requests finished or failed", body = LiveStatus),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)))]
async fn stop(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<LiveStatus>> {
    caller.admin()?;
    let (c, served) = st.live.stop().await.ok_or_else(none)?;
    let s = status_of(&c, "stopped");
    let detail = serde_json::to_value(&s.now).unwrap_or_default();
    crate::db::audit(&st.db, &caller.actor(), "live.stop", &c.id.to_string(), detail).await?;
    if let Some(r) = served {
        crate::live::history::store(&st, &c, &r, &caller.actor()).await?;
    }
    Ok(Json(s))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicySwitch {
    /// A policy named as a run names one; it must use the running one's replicas and
    /// device sharing (the deployment was planned for them).
    pub policy: String,
}

#[utoipa::path(put, path = "/api/v1/live/policy", tag = "live", request_body = PolicySwitch,
    responses((status = 200, description = "Queued: it decides from the next decision on", body = LiveStatus),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
async fn switch_policy(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<PolicySwitch>,
) -> ApiResult<Json<LiveStatus>> {
    caller.admin()?;
    let c = st.live.current().ok_or_else(none)?;
    let (next, watched) = match crate::policies::instantiate(&st.db, &body.policy).await {
        Ok(i) => crate::live::watch::watch(i),
        Err(e) => return Err(ApiError::invalid("policy", e)),
    };
    let (replicas, sharing) = c.policy_shape;
    if next.replicas() != replicas || next.spatial_sharing() != sharing {
        return Err(ApiError::conflict(
            "policy",
            format!(
                "`{}` needs another deployment (replicas or device sharing): stop and start the cluster",
                body.policy
            ),
        ));
    }
    let mut tx = st.db.begin().await?;
    crate::db::audit(
        &mut *tx,
        &caller.actor(),
        "live.policy",
        &c.id.to_string(),
        serde_json::json!({"policy": body.policy}),
    )
    .await?;
    tx.commit().await?;
    *c.policy.lock().unwrap_or_else(|e| e.into_inner()) = body.policy;
    if let Some(w) = watched {
        crate::live::watch::write_back_when_told(&st, &c, w);
    }
    c.switch.request(next);
    Ok(Json(status_of(&c, "running")))
}
