//! Issue 16: runs that survive a lost job or an unreachable database.

use crate::common::*;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_run_left_without_a_job_is_cancellable_and_the_watchdog_ends_it(pool: PgPool) {
    let st = state(pool.clone()).await;
    let app = slicesched_api::app(st.clone());
    let insert = |status: &'static str| {
        let pool = pool.clone();
        async move {
            let id = uuid::Uuid::new_v4();
            sqlx::query(
                "insert into runs (id, kind, scenario, scenario_toml, policies, tenant_names, gpus, created_by, \
                 status, started_at, created_at) \
                 select $1, 'replay', 'smoke', $2, '{dedicated}', '{chat,code}', 2, 'test', $3, \
                 case when $3 = 'running' then now() - interval '1 hour' end, now() - interval '1 hour'",
            )
            .bind(id)
            .bind(std::fs::read_to_string(repo().join("scenarios/smoke.toml")).unwrap())
            .bind(status)
            .execute(&pool)
            .await
            .unwrap();
            id
        }
    };
    // Stranded `running` (its job died with its last write): cancel ends it at once.
    let stranded = insert("running").await;
    let (s, v) = post(&app, &format!("/api/v1/runs/{stranded}/cancel"), ADMIN, json!({})).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("cancelled")), "{v}");
    // The watchdog fails another with the cause, and starts a queued one nobody holds.
    let stuck = insert("running").await;
    let orphan = insert("queued").await;
    let (failed, requeued) = st.jobs.sweep_stuck(std::time::Duration::from_secs(30)).await.unwrap();
    assert_eq!((failed, requeued), (1, 1));
    let (s, v) = get(&app, &format!("/api/v1/runs/{stuck}"), ADMIN).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("failed")), "{v}");
    assert_eq!(v["error"], slicesched_api::jobs::watchdog::STUCK);
    let v = wait_run(&app, &orphan.to_string(), finished).await;
    assert_eq!(v["status"], "succeeded", "{v}");
}

#[tokio::test]
async fn while_the_database_is_down_the_api_answers_503_with_retry_after() {
    // A pool on a port where no server listens: what the service meets in an outage.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(std::time::Duration::from_secs(1))
        .connect_lazy(&format!("postgres://postgres@127.0.0.1:{port}/none"))
        .unwrap();
    let app = slicesched_api::app(slicesched_api::AppState::new(
        pool,
        config(),
        std::sync::Arc::new(slicesched_api::telemetry::Metrics::new()),
    ));
    for (method, path) in [
        (Method::GET, "/api/v1/runs"),
        (Method::GET, "/api/v1/tenants"),
        (Method::POST, "/api/v1/runs/00000000-0000-0000-0000-000000000000/cancel"),
    ] {
        let req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{}"))
            .unwrap();
        let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "{method} {path}");
        assert_eq!(resp.headers().get(header::RETRY_AFTER).unwrap(), "2");
    }
}
