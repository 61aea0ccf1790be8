//! Clusters and models (admin registers, admin and analysts read) and the shipped
//! scenarios a run may name.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Problem};
use crate::extract::ApiJson;
use crate::http::tenants::check_name;
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
    OpenApiRouter::new()
        .routes(routes!(list_clusters, create_cluster))
        .routes(routes!(list_models, create_model))
        .routes(routes!(list_scenarios))
}

/// A cluster as the simulator reads it (`[cluster]` of a scenario: name, nodes of GPUs).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewCluster {
    pub name: String,
    /// The cluster's TOML/JSON structure, e.g. `{"name": "2xA100", "nodes": [{"gpu": "A100-80GB", "gpus": 2}]}`.
    #[schema(value_type = Object)]
    pub spec: serde_json::Value,
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct Cluster {
    pub id: Uuid,
    pub name: String,
    #[schema(value_type = Object)]
    pub spec: serde_json::Value,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterList {
    pub items: Vec<Cluster>,
}

/// A model: a Hugging Face style `config.json` object.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewModel {
    pub name: String,
    /// hidden_size, num_attention_heads, num_key_value_heads, num_hidden_layers, intermediate_size, vocab_size…
    #[schema(value_type = Object)]
    pub config: serde_json::Value,
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
pub struct Model {
    pub id: Uuid,
    pub name: String,
    #[schema(value_type = Object)]
    pub config: serde_json::Value,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    pub items: Vec<Model>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ScenarioList {
    /// Names accepted as `scenario` by POST /api/v1/runs.
    pub items: Vec<String>,
}

const JSON_SPEC_LIMIT: usize = 64 * 1024;

#[utoipa::path(get, path = "/api/v1/clusters", tag = "catalog",
    responses((status = 200, body = ClusterList), (status = 401, body = Problem), (status = 403, body = Problem)))]
async fn list_clusters(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<ClusterList>> {
    caller.reader()?;
    let items = sqlx::query_as("select id, name, spec, created_by, created_at from clusters order by name")
        .fetch_all(&st.db)
        .await?;
    Ok(Json(ClusterList { items }))
}

#[utoipa::path(post, path = "/api/v1/clusters", tag = "catalog", request_body = NewCluster,
    responses((status = 201, body = Cluster), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
async fn create_cluster(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewCluster>,
) -> ApiResult<(StatusCode, Json<Cluster>)> {
    caller.admin()?;
    check_name("name", &body.name)?;
    if body.spec.to_string().len() > JSON_SPEC_LIMIT {
        return Err(ApiError::invalid("spec", "larger than 64 KiB"));
    }
    // Accepted only if the simulator can build it.
    let spec: slicesched_hw::ClusterSpec = serde_json::from_value(body.spec.clone())
        .map_err(|e| ApiError::invalid("spec", format!("not a cluster: {e}")))?;
    // Counted before it is built: a cluster of 4294967295 nodes is a 422, not an abort.
    crate::limits::cluster_gpus(&spec, "spec", &st.config.limits)?;
    slicesched_hw::Cluster::from_spec(&spec, "spec").map_err(|e| ApiError::invalid("spec", e.to_string()))?;
    let actor = caller.actor();
    let mut tx = st.db.begin().await?;
    let c: Cluster = sqlx::query_as(
        "insert into clusters (id, name, spec, created_by) values ($1, $2, $3, $4) \
         returning id, name, spec, created_by, created_at",
    )
    .bind(Uuid::new_v4())
    .bind(&body.name)
    .bind(&body.spec)
    .bind(&actor)
    .fetch_one(&mut *tx)
    .await?;
    crate::db::audit(&mut *tx, &actor, "cluster.create", &c.id.to_string(), serde_json::json!({ "name": c.name }))
        .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(c)))
}

#[utoipa::path(get, path = "/api/v1/models", tag = "catalog",
    responses((status = 200, body = ModelList), (status = 401, body = Problem), (status = 403, body = Problem)))]
async fn list_models(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<ModelList>> {
    caller.reader()?;
    let items = sqlx::query_as("select id, name, config, created_by, created_at from models order by name")
        .fetch_all(&st.db)
        .await?;
    Ok(Json(ModelList { items }))
}

#[utoipa::path(post, path = "/api/v1/models", tag = "catalog", request_body = NewModel,
    responses((status = 201, body = Model), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)))]
async fn create_model(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<NewModel>,
) -> ApiResult<(StatusCode, Json<Model>)> {
    caller.admin()?;
    check_name("name", &body.name)?;
    if !body.config.is_object() || body.config.to_string().len() > JSON_SPEC_LIMIT {
        return Err(ApiError::invalid("config", "a config.json object of at most 64 KiB"));
    }
    let text = body.config.to_string();
    slicesched_model::ModelConfig::from_hf_json(&text, "config", &body.name)
        .map_err(|e| ApiError::invalid("config", e.to_string()))?;
    let actor = caller.actor();
    let mut tx = st.db.begin().await?;
    let m: Model = sqlx::query_as(
        "insert into models (id, name, config, created_by) values ($1, $2, $3, $4) \
         returning id, name, config, created_by, created_at",
    )
    .bind(Uuid::new_v4())
    .bind(&body.name)
    .bind(&body.config)
    .bind(&actor)
    .fetch_one(&mut *tx)
    .await?;
    crate::db::audit(&mut *tx, &actor, "model.create", &m.id.to_string(), serde_json::json!({ "name": m.name }))
        .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(m)))
}

#[utoipa::path(get, path = "/api/v1/scenarios", tag = "catalog",
    responses((status = 200, body = ScenarioList), (status = 401, body = Problem), (status = 403, body = Problem)))]
async fn list_scenarios(State(st): State<AppState>, caller: Caller) -> ApiResult<Json<ScenarioList>> {
    caller.reader()?;
    Ok(Json(ScenarioList { items: crate::scenarios::shipped(&st.config.scenarios_dir) }))
}
