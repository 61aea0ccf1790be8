//! The audit log (admin only): every change, who made it and when, newest first,
//! filtered by actor, action, target (the changed entity's id) and time, keyset-paginated.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::ApiQuery;
use crate::http::pagination;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, QueryBuilder};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Who made the change: any part of it, ignoring case (`admin`, `tenant:chat`,
    /// `system:run:…`).
    actor: Option<String>,
    /// What was done (`tenant.create`, `tenant.remove`, `sla.update`, `key.create`,
    /// `key.revoke`, `plugin.upload`, `plugin.active`, `plugin.disabled`,
    /// `plugin.quarantine`, `run.create`, `run.cancel`, `cluster.create`, `model.create`).
    action: Option<String>,
    /// The entity changed: its id (a tenant, key, plugin, run, cluster or model).
    target: Option<String>,
    /// At or after (RFC 3339).
    since: Option<DateTime<Utc>>,
    /// Before (RFC 3339).
    until: Option<DateTime<Utc>>,
    /// 1..=1000, default 50.
    limit: Option<i64>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// One change.
#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    /// The entity changed (its id).
    pub target: String,
    /// What changed (the action's own fields).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub items: Vec<AuditEntry>,
    pub next_cursor: Option<String>,
}

/// Longest filter value accepted (actors, actions and ids are far shorter).
const MAX_FILTER: usize = 200;

#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", params(AuditQuery),
    responses((status = 200, body = AuditPage), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem)))]
async fn list_audit(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<Json<AuditPage>> {
    caller.admin()?;
    let limit = pagination::limit(q.limit)?;
    for (field, v) in [("actor", &q.actor), ("action", &q.action), ("target", &q.target)] {
        if v.as_ref().is_some_and(|v| v.is_empty() || v.len() > MAX_FILTER) {
            return Err(ApiError::bad(field, format!("1 to {MAX_FILTER} characters")));
        }
    }
    if let (Some(a), Some(b)) = (q.since, q.until) {
        if a > b {
            return Err(ApiError::bad("until", "before `since`"));
        }
    }
    let before: Option<i64> = match &q.cursor {
        Some(c) => Some(pagination::decode(c, 1)?[0].parse().map_err(|_| ApiError::bad("cursor", "not a cursor"))?),
        None => None,
    };
    // Only the filters given appear in the SQL, so the planner can use the matching index.
    let mut qb: QueryBuilder<Postgres> =
        QueryBuilder::new("select id, at, actor, action, target, detail from audit_log where true");
    if let Some(a) = &q.actor {
        // A part of the name, as a search box means it (no LIKE: `_` and `%` are literal).
        qb.push(" and strpos(lower(actor), lower(").push_bind(a).push(")) > 0");
    }
    if let Some(a) = &q.action {
        qb.push(" and action = ").push_bind(a);
    }
    if let Some(t) = &q.target {
        qb.push(" and target = ").push_bind(t);
    }
    if let Some(s) = q.since {
        qb.push(" and at >= ").push_bind(s);
    }
    if let Some(u) = q.until {
        qb.push(" and at < ").push_bind(u);
    }
    if let Some(b) = before {
        qb.push(" and id < ").push_bind(b);
    }
    qb.push(" order by id desc limit ").push_bind(limit + 1);
    let rows: Vec<AuditEntry> = qb.build_query_as().fetch_all(&st.db).await?;
    let (items, more) = pagination::split(rows, limit);
    let next_cursor = more.then(|| items.last().map(|r| pagination::encode(&r.id.to_string()))).flatten();
    Ok(Json(AuditPage { items, next_cursor }))
}
