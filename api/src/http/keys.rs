//! API keys (admin only): analyst keys, and further keys for a tenant, are created here;
//! every key is listed and revoked here. The token is returned once; only its sha256 is kept. A revoked key answers 401
//! from the next request on.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath};
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
    OpenApiRouter::new().routes(routes!(list_keys, create_key)).routes(routes!(revoke_key))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// Who the key is for.
    pub name: String,
    /// `analyst`, or `tenant` with `tenant_id` (a further key for a tenant, e.g. after
    /// its key was revoked; its first key comes with POST /api/v1/tenants).
    pub role: String,
    /// The tenant a `tenant` key belongs to.
    #[serde(default)]
    pub tenant_id: Option<Uuid>,
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct Key {
    pub id: Uuid,
    pub name: String,
    pub role: String,
    pub tenant_id: Option<Uuid>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// When the key was revoked (null while it is valid).
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_by: Option<String>,
}

const KEY_COLUMNS: &str = "id, name, role, tenant_id, created_by, created_at, revoked_at, revoked_by";

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
    let items = sqlx::query_as(sqlx::AssertSqlSafe(format!("select {KEY_COLUMNS} from api_keys order by created_at")))
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
    match (body.role.as_str(), body.tenant_id) {
        ("analyst", None) => {}
        ("analyst", Some(_)) => return Err(ApiError::invalid("tenant_id", "only tenant keys belong to a tenant")),
        ("tenant", None) => return Err(ApiError::invalid("tenant_id", "required for a tenant key")),
        ("tenant", Some(t)) => {
            let live: Option<(Uuid,)> = sqlx::query_as("select id from tenants where id = $1 and removed_at is null")
                .bind(t)
                .fetch_optional(&st.db)
                .await?;
            if live.is_none() {
                return Err(ApiError::invalid("tenant_id", "no such tenant"));
            }
        }
        _ => return Err(ApiError::invalid("role", "`analyst` or `tenant`")),
    }
    let token = crate::auth::new_token();
    let actor = caller.actor();
    let id = Uuid::new_v4();
    let mut tx = st.db.begin().await?;
    let key: Key = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "insert into api_keys (id, token_sha256, role, name, tenant_id, created_by) values ($1, $2, $3, $4, $5, $6) \
         returning {KEY_COLUMNS}"
    )))
    .bind(id)
    .bind(&crate::auth::sha256(&token)[..])
    .bind(&body.role)
    .bind(&body.name)
    .bind(body.tenant_id)
    .bind(&actor)
    .fetch_one(&mut *tx)
    .await?;
    crate::db::audit(
        &mut *tx,
        &actor,
        "key.create",
        &id.to_string(),
        serde_json::json!({ "name": body.name, "role": body.role, "tenant_id": body.tenant_id }),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(CreatedKey { key, api_key: token })))
}

/// Revokes a key (admin only; a tenant cannot revoke its own key, which would lock it out
/// with no way back: an admin revokes it, or removes the tenant). The key answers 401 from
/// the next request on; the row stays, with who revoked it and when.
#[utoipa::path(delete, path = "/api/v1/keys/{id}", tag = "keys", params(("id" = Uuid, Path)),
    responses((status = 200, description = "The revoked key", body = Key), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, description = "Already revoked", body = Problem)))]
async fn revoke_key(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<Key>> {
    caller.admin()?;
    let actor = caller.actor();
    let mut tx = st.db.begin().await?;
    let found: Option<(Option<DateTime<Utc>>, String, String)> =
        sqlx::query_as("select revoked_at, name, role from api_keys where id = $1 for update")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let (revoked, name, role) = found.ok_or(ApiError::NotFound)?;
    if revoked.is_some() {
        return Err(ApiError::conflict("id", "the key is already revoked"));
    }
    let key: Key = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "update api_keys set revoked_at = now(), revoked_by = $2 where id = $1 returning {KEY_COLUMNS}"
    )))
    .bind(id)
    .bind(&actor)
    .fetch_one(&mut *tx)
    .await?;
    crate::db::audit(
        &mut *tx,
        &actor,
        "key.revoke",
        &id.to_string(),
        serde_json::json!({ "name": name, "role": role }),
    )
    .await?;
    tx.commit().await?;
    Ok(Json(key))
}
