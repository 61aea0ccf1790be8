//! Policy plugins: upload (a Wasm component as `application/wasm` or in a multipart
//! form; validated by instantiating it in the sandbox before anything is stored, and
//! stored `inactive`), list, read, a trial replay of one plugin whatever its state,
//! activate (only then do runs get it by name), disable.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::{content_type, read_body, ApiJson, ApiPath};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_plugins, upload_plugin))
        .routes(routes!(get_plugin))
        .routes(routes!(activate_plugin))
        .routes(routes!(disable_plugin))
        .routes(routes!(trial_plugin))
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct Plugin {
    pub id: Uuid,
    pub name: String,
    pub version: String,
    pub interface_version: String,
    pub sha256_hex: String,
    pub size_bytes: i64,
    /// A policy the binary carries (no component bytes).
    pub builtin: bool,
    /// `inactive` (uploaded, not yet activated), `active`, `disabled` or `quarantined`.
    pub state: String,
    pub uploaded_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PluginList {
    pub items: Vec<Plugin>,
}

/// The multipart form of an upload.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PluginUpload {
    /// The Wasm component.
    #[schema(content_media_type = "application/wasm")]
    component: Vec<u8>,
}

/// Longest declared plugin version (semver with pre-release and build fits easily).
pub const MAX_VERSION: usize = 64;

pub const PLUGIN_COLUMNS: &str =
    "id, name, version, interface_version, sha256_hex, size_bytes, builtin, state, uploaded_by, created_at, updated_at";

#[utoipa::path(get, path = "/api/v1/plugins", tag = "plugins",
    responses((status = 200, body = PluginList), (status = 401, body = Problem), (status = 403, body = Problem)))]
async fn list_plugins(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<PluginList>> {
    caller.reader()?;
    let items =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("select {PLUGIN_COLUMNS} from plugins order by name, created_at")))
            .fetch_all(&st.db)
            .await?;
    Ok(Json(PluginList { items }))
}

#[utoipa::path(get, path = "/api/v1/plugins/{id}", tag = "plugins", params(("id" = Uuid, Path)),
    responses((status = 200, body = Plugin), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn get_plugin(State(st): State<AppState>, caller: Caller, ApiPath(id): ApiPath<Uuid>) -> ApiResult<Json<Plugin>> {
    caller.reader()?;
    fetch(&st, id).await.map(Json)
}

async fn fetch(st: &AppState, id: Uuid) -> ApiResult<Plugin> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("select {PLUGIN_COLUMNS} from plugins where id = $1")))
        .bind(id)
        .fetch_optional(&st.db)
        .await?
        .ok_or(ApiError::NotFound)
}

/// The component bytes of an upload, whichever way they came.
async fn component_bytes(req: Request, limit: usize) -> ApiResult<Vec<u8>> {
    let (parts, body) = req.into_parts();
    let ct = content_type(&parts.headers);
    // Multipart framing adds a little to the component's size.
    let bytes = read_body(&parts.headers, body, limit + 16 * 1024).await?;
    match ct.as_str() {
        "application/wasm" | "application/octet-stream" => Ok(bytes.to_vec()),
        "multipart/form-data" => {
            let req = Request::from_parts(parts, Body::from(bytes));
            let mut form = Multipart::from_request(req, &()).await.map_err(|e| ApiError::bad("body", e.body_text()))?;
            while let Some(field) = form.next_field().await.map_err(|e| ApiError::bad("body", e.body_text()))? {
                if field.name() == Some("component") {
                    return Ok(field.bytes().await.map_err(|e| ApiError::bad("component", e.body_text()))?.to_vec());
                }
            }
            Err(ApiError::invalid("component", "the form has no `component` field"))
        }
        _ => Err(ApiError::UnsupportedMediaType { expected: "application/wasm or multipart/form-data".into() }),
    }
}

#[utoipa::path(post, path = "/api/v1/plugins", tag = "plugins",
    request_body(content((Vec<u8> = "application/wasm"), (inline(PluginUpload) = "multipart/form-data"))),
    responses((status = 201, body = Plugin), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 409, body = Problem), (status = 413, body = Problem),
              (status = 415, body = Problem), (status = 422, description = "Not a valid policy component", body = Problem)))]
async fn upload_plugin(
    State(st): State<AppState>,
    caller: Caller,
    req: Request,
) -> ApiResult<(StatusCode, Json<Plugin>)> {
    caller.admin()?;
    let limit = st.config.plugin_max_bytes;
    let bytes = component_bytes(req, limit).await?;
    if bytes.len() > limit {
        return Err(ApiError::TooLarge { limit });
    }
    if bytes.is_empty() {
        return Err(ApiError::invalid("component", "empty"));
    }
    let (info, bytes) = tokio::task::spawn_blocking(move || (crate::plugin_host::inspect(&bytes), bytes))
        .await
        .map_err(|e| ApiError::Internal(format!("plugin validation panicked: {e}")))?;
    let info = info.map_err(|e| ApiError::invalid("component", e))?;
    crate::http::tenants::check_name("name", &info.name)?;
    // What the component declares is the uploader's text: checked, not cleaned.
    crate::text::check("version", &info.version, MAX_VERSION)?;
    let actor = caller.actor();
    let id = Uuid::new_v4();
    let mut tx = st.db.begin().await?;
    sqlx::query(
        "insert into plugins (id, name, version, interface_version, sha256_hex, size_bytes, bytes, uploaded_by, state) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, 'inactive')",
    )
    .bind(id)
    .bind(&info.name)
    .bind(&info.version)
    .bind(&info.interface_version)
    .bind(&info.sha256_hex)
    .bind(info.size_bytes as i64)
    .bind(&bytes)
    .bind(&actor)
    .execute(&mut *tx)
    .await?;
    let detail = serde_json::json!({ "name": info.name, "version": info.version, "sha256": info.sha256_hex });
    crate::db::audit(&mut *tx, &actor, "plugin.upload", &id.to_string(), detail).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(fetch(&st, id).await?)))
}

async fn set_state(st: &AppState, caller: &Caller, id: Uuid, state: &str) -> ApiResult<Plugin> {
    caller.admin()?;
    let mut tx = st.db.begin().await?;
    let r = sqlx::query("update plugins set state = $2, updated_at = now() where id = $1")
        .bind(id)
        .bind(state)
        .execute(&mut *tx)
        .await?;
    if r.rows_affected() == 0 {
        return Err(ApiError::NotFound);
    }
    crate::db::audit(&mut *tx, &caller.actor(), &format!("plugin.{state}"), &id.to_string(), serde_json::json!({}))
        .await?;
    tx.commit().await?;
    fetch(st, id).await
}

#[utoipa::path(post, path = "/api/v1/plugins/{id}/activate", tag = "plugins", params(("id" = Uuid, Path)),
    responses((status = 200, body = Plugin), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn activate_plugin(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Plugin>> {
    set_state(&st, &caller, id, "active").await.map(Json)
}

#[utoipa::path(post, path = "/api/v1/plugins/{id}/disable", tag = "plugins", params(("id" = Uuid, Path)),
    responses((status = 200, body = Plugin), (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)))]
async fn disable_plugin(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<Json<Plugin>> {
    set_state(&st, &caller, id, "disabled").await.map(Json)
}

/// A trial replay of one plugin.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Trial {
    /// A shipped scenario's name or a whole scenario as TOML text.
    pub scenario: String,
    /// Arrival-rate multiplier, (0, 64].
    pub rate_scale: Option<f64>,
}

/// The policy name that pins a run to this exact plugin row, whatever its state: how a
/// trial replays an upload before anyone may run it by name.
pub fn pinned_name(id: Uuid) -> String {
    format!("{}{id}", crate::policies::PINNED)
}

/// Starts a replay of `scenario` under exactly this plugin (inactive ones too), so an
/// admin can see how it behaves before activating it. The run is an ordinary replay whose
/// policy is `plugin:{id}` (list a plugin's trials with `GET /api/v1/runs?policy=plugin:{id}`).
#[utoipa::path(post, path = "/api/v1/plugins/{id}/trial", tag = "plugins", params(("id" = Uuid, Path)),
    request_body = Trial,
    responses((status = 202, description = "Queued", body = crate::db::runs::Run), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 422, body = Problem)))]
async fn trial_plugin(
    State(st): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(t): ApiJson<Trial>,
) -> ApiResult<(StatusCode, Json<crate::db::runs::Run>)> {
    caller.admin()?;
    let p = fetch(&st, id).await?;
    if p.builtin {
        return Err(ApiError::invalid("id", format!("`{}` is built in: replay it by name", p.name)));
    }
    // Through NewRun's own parsing, so the trial is checked like any replay request.
    let body = serde_json::json!({ "kind": "replay", "scenario": t.scenario, "policy": pinned_name(id),
                                   "rate_scale": t.rate_scale });
    let body = serde_json::from_value(body).map_err(|e| ApiError::Internal(format!("trial request: {e}")))?;
    crate::http::runs::start(&st, &caller, &body, vec![pinned_name(id)]).await
}
