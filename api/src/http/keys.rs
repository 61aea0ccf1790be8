//! Analyst API keys (admin only). The token is returned once; only its sha256 is kept.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::ApiJson;
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
    OpenApiRouter::new().routes(routes!(list_keys, create_key))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// Who the key is for.
    pub name: String,
    /// Only `analyst` (tenant keys come with POST /api/v1/tenants).
    pub role: String,
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct Key {
    pub id: Uuid,
    pub name: String,
    pub role: String,
    pub tenant_id: Option<Uuid>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedKey {
    pub key: Key,
    /// Shown once.
    pub api_key: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    pub items: Vec<Key>,
}

#[utoipa::path(get, path = "/api/v1/keys", tag = "keys",
    responses((status = 200, body = KeyList), (status = 401, body = Problem), (status = 403, body = Problem)))]
async fn list_keys(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<KeyList>> {
    caller.admin()?;
    let items =
        sqlx::query_as("select id, name, role, tenant_id, created_by, created_at from api_keys order by created_at")
            .fetch_all(&st.db)
            .await?;
    Ok(Json(KeyList { items }))
}

#[utoipa::path(post, path = "/api/v1/keys", tag = "keys", request_body = NewKey,
    responses((status = 201, body = CreatedKey), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 422, body = Problem)))]
async fn create_key(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewKey>,
) -> ApiResult<(StatusCode, Json<CreatedKey>)> {
    caller.admin()?;
    crate::http::tenants::check_name("name", &body.name)?;
    if body.role != "analyst" {
        return Err(ApiError::invalid("role", "only `analyst` keys are created here"));
    }
    let token = crate::auth::new_token();
    let actor = caller.actor();
    let id = Uuid::new_v4();
    let mut tx = st.db.begin().await?;
    let key: Key = sqlx::query_as(
        "insert into api_keys (id, token_sha256, role, name, created_by) values ($1, $2, 'analyst', $3, $4) \
         returning id, name, role, tenant_id, created_by, created_at",
    )
    .bind(id)
    .bind(&crate::auth::sha256(&token)[..])
    .bind(&body.name)
    .bind(&actor)
    .fetch_one(&mut *tx)
    .await?;
    crate::db::audit(
        &mut *tx,
        &actor,
        "key.create",
        &id.to_string(),
        serde_json::json!({ "name": body.name, "role": "analyst" }),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(CreatedKey { key, api_key: token })))
}
