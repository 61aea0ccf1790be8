//! Over a real socket: the served OpenAPI document lists every route, the docs page and
//! web fallback are served, auth and problems travel as over the wire, metrics count.

use crate::common::*;
use sqlx::PgPool;

async fn serve(pool: PgPool) -> String {
    let app = slicesched_api::app(state(pool).await);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn the_served_document_describes_every_route(pool: PgPool) {
    let base = serve(pool).await;
    let c = reqwest::Client::new();
    let doc: serde_json::Value = c.get(format!("{base}/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/me",
        "/api/v1/runs",
        "/api/v1/runs/{id}",
        "/api/v1/runs/{id}/cancel",
        "/api/v1/runs/{id}/requests",
        "/api/v1/runs/{id}/series",
        "/api/v1/runs/{id}/decisions",
        "/api/v1/runs/{id}/gpus",
        "/api/v1/runs/{id}/timeline",
        "/api/v1/runs/{id}/timeline/meta",
        "/api/v1/tenants",
        "/api/v1/tenants/{id}",
        "/api/v1/tenants/{id}/sla",
        "/api/v1/tenants/{id}/sla/history",
        "/api/v1/tenants/{id}/stats",
        "/api/v1/keys",
        "/api/v1/keys/{id}",
        "/api/v1/audit",
        "/api/v1/runs/{id}/latency",
        "/api/v1/plugins",
        "/api/v1/plugins/{id}",
        "/api/v1/plugins/{id}/activate",
        "/api/v1/plugins/{id}/disable",
        "/api/v1/plugins/{id}/trial",
        "/api/v1/runs/{id}/export/{part}",
        "/api/v1/clusters",
        "/api/v1/models",
        "/api/v1/scenarios",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(paths.contains_key(p), "{p} is not documented");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());

    let docs = c.get(format!("{base}/api/docs/")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    let html = docs.text().await.unwrap();
    assert!(html.contains("swagger"), "{html}");
    assert!(!html.contains("https://"), "the docs page must work offline");
    let index = c.get(format!("{base}/runs/some-client-route")).send().await.unwrap();
    assert_eq!(index.status(), 200);
    assert!(index.text().await.unwrap().contains("not built"));

    let me = c.get(format!("{base}/api/v1/me")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(me.status(), 200);
    let anon = c.get(format!("{base}/api/v1/me")).send().await.unwrap();
    assert_eq!(anon.status(), 401);
    assert_eq!(anon.headers()["content-type"], "application/problem+json");
    assert_eq!(anon.headers()["www-authenticate"], "Bearer");

    assert_eq!(c.get(format!("{base}/healthz")).send().await.unwrap().status(), 200);
    let ready: serde_json::Value = c.get(format!("{base}/readyz")).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["database"], true);
    assert!(ready["policies"].as_i64().unwrap() >= 5);
    let metrics = c.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("slicesched_http_requests_total{method=\"GET\",route=\"/api/v1/me\",status=\"401\"} 1"),
        "{metrics}"
    );
}
