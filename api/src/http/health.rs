//! Liveness, readiness (database reachable, policies loaded) and Prometheus metrics.
//! None needs a token: probes and scrapers carry none.

use crate::error::Problem;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(healthz)).routes(routes!(readyz)).routes(routes!(metrics))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    pub database: bool,
    /// Active policies (built-in and plugins).
    pub policies: i64,
    /// Runs queued or running in this process.
    pub runs_in_flight: usize,
}

#[utoipa::path(get, path = "/healthz", tag = "ops", security(()), responses((status = 200, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".into() })
}

#[utoipa::path(get, path = "/readyz", tag = "ops", security(()),
    responses((status = 200, body = Ready), (status = 503, description = "Not ready", body = Ready)))]
async fn readyz(State(st): State<AppState>) -> (StatusCode, Json<Ready>) {
    let policies: Option<(i64,)> = sqlx::query_as("select count(*) from plugins where state = 'active'")
        .fetch_optional(&st.db)
        .await
        .ok()
        .flatten();
    let ready = Ready {
        database: policies.is_some(),
        policies: policies.map_or(0, |p| p.0),
        runs_in_flight: st.jobs.in_flight(),
    };
    let code = if ready.database && ready.policies > 0 { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(ready))
}

#[utoipa::path(get, path = "/metrics", tag = "ops", security(()),
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"),
              (status = 401, body = Problem)))]
async fn metrics(State(st): State<AppState>) -> impl IntoResponse {
    if let Some(c) = st.live.current() {
        st.metrics.live.refresh(&c);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.render())
}
