//! Issue 16: query parameters an operation does not document are refused everywhere;
//! security headers and the request-head bound.

use crate::common::*;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn unknown_query_parameters_are_refused_on_every_route(pool: PgPool) {
    let st = state(pool.clone()).await;
    let app = slicesched_api::app(st);
    let (s, run) =
        post(&app, "/api/v1/runs", ADMIN, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" }))
            .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{run}");
    let id = run["id"].as_str().unwrap();
    for path in [
        "/api/v1/runs?limt=5".to_string(),
        format!("/api/v1/runs/{id}?x=1"),
        format!("/api/v1/runs/{id}/requests?limt=5"),
        format!("/api/v1/runs/{id}/decisions?limt=5"),
        format!("/api/v1/runs/{id}/timeline?limt=5"),
        format!("/api/v1/runs/{id}/latency?limt=5"),
        "/api/v1/tenants?limt=5".into(),
        "/api/v1/audit?limt=5".into(),
        "/api/v1/me?limt=5".into(),
        "/api/v1/plugins?limt=5".into(),
    ] {
        let (s, v) = get(&app, &path, ADMIN).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        let want = if path.contains("limt") { "limt" } else { "x" };
        assert_eq!(v["field"], want, "{path}: {v}");
    }
    let (s, v) = get(&app, "/api/v1/runs?limit=5", ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    wait_run(&app, id, finished).await;
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn responses_carry_security_headers_and_big_heads_are_refused(pool: PgPool) {
    let app = slicesched_api::app(state(pool).await);
    for path in ["/", "/api/v1/me", "/api/v1/nothing", "/healthz"] {
        let req = Request::builder().uri(path).header(header::AUTHORIZATION, format!("Bearer {ADMIN}"));
        let resp = tower::ServiceExt::oneshot(app.clone(), req.body(Body::empty()).unwrap()).await.unwrap();
        let h = resp.headers();
        let csp = h.get(header::CONTENT_SECURITY_POLICY).and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{path}: {csp}");
        assert_eq!(h.get(header::X_CONTENT_TYPE_OPTIONS).unwrap(), "nosniff", "{path}");
        assert_eq!(h.get(header::X_FRAME_OPTIONS).unwrap(), "DENY", "{path}");
        assert_eq!(h.get(header::REFERRER_POLICY).unwrap(), "no-referrer", "{path}");
    }
    let req = Request::builder()
        .method(Method::GET)
        .uri("/api/v1/me")
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .header("x-padding", "a".repeat(200 * 1024))
        .body(Body::empty())
        .unwrap();
    let (s, v) = send(&app, req).await;
    assert_eq!(s, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "{v}");
}
