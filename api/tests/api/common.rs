//! Helpers: a state on the test's database, calls through `oneshot`, a tenant and an
//! analyst with their keys.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use slicesched_api::telemetry::Metrics;
use slicesched_api::{AppState, Config};
use sqlx::PgPool;
use std::path::PathBuf;
use std::sync::Arc;
use tower::ServiceExt;

pub const ADMIN: &str = "test-admin-token-0123456789";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("api/ is in the repository").to_path_buf()
}

pub fn config() -> Config {
    Config {
        admin_token: ADMIN.into(),
        scenarios_dir: repo().join("scenarios"),
        web_dir: repo().join("api/tests/no-web-dir"),
        plugins_dir: repo().join("api/tests/no-plugins-dir"),
        demo_run: false,
        max_concurrent_runs: 1,
        ..Config::default()
    }
}

pub async fn state_with(pool: PgPool, config: Config) -> AppState {
    let st = AppState::new(pool, config, Arc::new(Metrics::new()));
    slicesched_api::server::register_shipped(&st).await.expect("registering the built-in policies");
    st
}

pub async fn state(pool: PgPool) -> AppState {
    state_with(pool, config()).await
}

/// One request through the router; the body parsed as JSON when it is JSON.
pub async fn call(
    app: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = match body {
        Some(b) => req.header(header::CONTENT_TYPE, "application/json").body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .expect("a valid request");
    send(app, req).await
}

pub async fn send(app: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app.clone().oneshot(req).await.expect("the router never fails");
    let status = resp.status();
    let ct = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.expect("body");
    if status.is_client_error() || status.is_server_error() {
        assert!(
            ct.starts_with("application/problem+json") || status == StatusCode::METHOD_NOT_ALLOWED,
            "{status} answered with `{ct}`"
        );
    }
    let v = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v)
}

pub async fn get(app: &Router, path: &str, token: &str) -> (StatusCode, Value) {
    call(app, Method::GET, path, Some(token), None).await
}

pub async fn post(app: &Router, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    call(app, Method::POST, path, Some(token), Some(body)).await
}

/// Creates a tenant; returns its id and key.
pub async fn tenant(app: &Router, name: &str) -> (String, String) {
    let (s, v) =
        post(app, "/api/v1/tenants", ADMIN, json!({ "name": name, "sla": { "ttft_ms": 500, "tpot_ms": 60 } })).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    (v["tenant"]["id"].as_str().unwrap().to_string(), v["api_key"].as_str().unwrap().to_string())
}

pub async fn analyst(app: &Router) -> String {
    let (s, v) = post(app, "/api/v1/keys", ADMIN, json!({ "name": "ana", "role": "analyst" })).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    v["api_key"].as_str().unwrap().to_string()
}

/// Row counts of every table a request could change.
pub async fn snapshot(pool: &PgPool) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for t in ["tenants", "api_keys", "sla_versions", "models", "clusters", "plugins", "runs", "audit_log"] {
        let (n,): (i64,) =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("select count(*) from {t}"))).fetch_one(pool).await.unwrap();
        out.push((t.to_string(), n));
    }
    out
}

/// Waits until the run leaves queued/running (or `until` says stop); returns the run.
pub async fn wait_run(app: &Router, id: &str, until: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..2400 {
        let (s, v) = get(app, &format!("/api/v1/runs/{id}"), ADMIN).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        if until(&v) {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("run {id} did not get there in 120 s");
}

pub fn finished(v: &Value) -> bool {
    !matches!(v["status"].as_str(), Some("queued") | Some("running"))
}
