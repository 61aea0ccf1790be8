//! `GET /api/v1/me`: who the token belongs to, so a UI can show what the role may do.

use crate::auth::{Caller, Role};
use crate::error::{ApiResult, Problem};
use crate::state::AppState;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub role: Role,
    pub name: String,
    /// The tenant a tenant key belongs to; null for admins and analysts.
    pub tenant_id: Option<Uuid>,
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(me))
}

#[utoipa::path(get, path = "/api/v1/me", tag = "me",
    responses((status = 200, body = Me), (status = 401, body = Problem)))]
async fn me(caller: Caller) -> ApiResult<Json<Me>> {
    Ok(Json(Me { role: caller.role, name: caller.name, tenant_id: caller.tenant_id }))
}
