//! Exports: a replay's summary, requests and series and a sweep's summary and points as
//! CSV and JSON files, streamed from the stored rows and equal to what the JSON routes
//! answer; refusals name what is wrong. Also the runs list's partial scenario filter.

use crate::common::*;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use tower::ServiceExt;

/// The raw file: status, content type, content disposition, bytes.
async fn file(app: &axum::Router, path: &str, token: &str) -> (StatusCode, String, String, Vec<u8>) {
    let req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let h = |k| resp.headers().get(k).and_then(|v: &header::HeaderValue| v.to_str().ok()).unwrap_or("").to_string();
    let (ct, cd) = (h(header::CONTENT_TYPE), h(header::CONTENT_DISPOSITION));
    let status = resp.status();
    (status, ct, cd, axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap().to_vec())
}

fn csv_rows(bytes: &[u8]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_reader(bytes);
    let head = r.headers().unwrap().iter().map(String::from).collect();
    let rows = r.records().map(|x| x.unwrap().iter().map(String::from).collect()).collect();
    (head, rows)
}

async fn run(app: &axum::Router, body: Value) -> Value {
    let (s, v) = post(app, "/api/v1/runs", ADMIN, body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let done = wait_run(app, v["id"].as_str().unwrap(), finished).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    done
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_replay_exports_summary_requests_and_series_as_csv_and_json(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let ana = analyst(&app).await;
    let r = run(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" })).await;
    let id = r["id"].as_str().unwrap();
    let s = &r["summary"];
    let n = s["requests"].as_u64().unwrap() as usize;

    // Requests: every record, in order, the same as the paginated route's.
    let (st, ct, cd, body) = file(&app, &format!("/api/v1/runs/{id}/export/requests?format=csv"), &ana).await;
    assert_eq!(st, StatusCode::OK);
    assert!(ct.starts_with("text/csv"), "{ct}");
    assert_eq!(cd, format!("attachment; filename=\"run-{id}-requests.csv\""));
    let (head, rows) = csv_rows(&body);
    assert_eq!(rows.len(), n);
    assert_eq!(&head[..3], ["id", "tenant", "arrival_ns"]);
    let (_, page) = get(&app, &format!("/api/v1/runs/{id}/requests?limit=1000"), &ana).await;
    let first = &page["items"][0];
    let col = |k: &str| head.iter().position(|h| h == k).unwrap();
    assert_eq!(rows[0][col("id")], first["id"].to_string());
    assert_eq!(rows[0][col("tenant")], first["tenant"].as_str().unwrap());
    assert_eq!(rows[0][col("ttft_ms")].parse::<f64>().unwrap(), first["ttft_ms"].as_f64().unwrap());
    let violated = rows.iter().filter(|r| r[col("violated")] == "true").count();
    assert_eq!(violated, (s["violation_rate"].as_f64().unwrap() * n as f64).round() as usize);
    let (st, ct, _, body) = file(&app, &format!("/api/v1/runs/{id}/export/requests?format=json"), &ana).await;
    assert_eq!((st, ct.as_str()), (StatusCode::OK, "application/json"));
    let all: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(all.len(), n);
    assert_eq!(&all[..page["items"].as_array().unwrap().len().min(n)], page["items"].as_array().unwrap().as_slice());

    // Series: one row per bucket, one busy column per GPU, the same counters as /series.
    let (_, series) = get(&app, &format!("/api/v1/runs/{id}/series"), &ana).await;
    let (st, _, _, body) = file(&app, &format!("/api/v1/runs/{id}/export/series"), &ana).await;
    assert_eq!(st, StatusCode::OK);
    let (head, rows) = csv_rows(&body);
    let gpus = series["gpu_busy_ns"].as_array().unwrap().len();
    assert_eq!(head.len(), 6 + gpus, "{head:?}");
    assert_eq!(head[6], "gpu0_busy_ns");
    assert_eq!(rows.len(), series["output_tokens"].as_array().unwrap().len());
    let out: i64 = rows.iter().map(|r| r[3].parse::<i64>().unwrap()).sum();
    assert_eq!(out, series["output_tokens"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).sum::<i64>());
    assert_eq!(rows[0][6], series["gpu_busy_ns"][0][0].to_string());
    let (_, _, _, body) = file(&app, &format!("/api/v1/runs/{id}/export/series?format=json"), &ana).await;
    let js: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(js.len(), rows.len());
    assert_eq!(js[0]["gpu_busy_ns"].as_array().unwrap().len(), gpus);

    // Summary: the run's row and one per tenant in CSV; the stored document in JSON.
    let (_, _, _, body) = file(&app, &format!("/api/v1/runs/{id}/export/summary"), &ana).await;
    let (head, rows) = csv_rows(&body);
    let tenants = s["tenants"].as_array().unwrap();
    assert_eq!(rows.len(), 1 + tenants.len());
    assert_eq!((rows[0][0].as_str(), rows[0][1].as_str()), ("run", "dedicated"));
    let vr = head.iter().position(|h| h == "violation_rate").unwrap();
    assert_eq!(rows[0][vr].parse::<f64>().unwrap(), s["violation_rate"].as_f64().unwrap());
    for (row, t) in rows[1..].iter().zip(tenants) {
        assert_eq!((row[0].as_str(), row[1].as_str()), ("tenant", t["name"].as_str().unwrap()));
        assert_eq!(row[vr].parse::<f64>().unwrap(), t["violation_rate"].as_f64().unwrap());
    }
    let (_, _, _, body) = file(&app, &format!("/api/v1/runs/{id}/export/summary?format=json"), &ana).await;
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), *s);

    // Refusals: the wrong part for a replay, an unknown part or format, no key, a tenant.
    let (st, v) = get(&app, &format!("/api/v1/runs/{id}/export/points"), &ana).await;
    assert_eq!((st, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("part")), "{v}");
    let (st, _) = get(&app, &format!("/api/v1/runs/{id}/export/everything"), &ana).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (st, v) = get(&app, &format!("/api/v1/runs/{id}/export/series?format=xlsx"), &ana).await;
    assert_eq!((st, v["field"].as_str()), (StatusCode::BAD_REQUEST, Some("format")), "{v}");
    let (st, _) = call(&app, Method::GET, &format!("/api/v1/runs/{id}/export/series"), None, None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (_, tkey) = tenant(&app, "acme").await;
    let (st, _) = get(&app, &format!("/api/v1/runs/{id}/export/series"), &tkey).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (st, _) = get(&app, &format!("/api/v1/runs/{}/export/series", uuid::Uuid::new_v4()), &ana).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_sweep_exports_its_results_and_points_and_unfinished_runs_have_none(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let r = run(
        &app,
        json!({ "kind": "sweep", "scenario": "smoke", "policies": ["dedicated"], "violation_targets": [0.09] }),
    )
    .await;
    let id = r["id"].as_str().unwrap();
    let rep = &r["summary"];
    let (st, _, cd, body) = file(&app, &format!("/api/v1/runs/{id}/export/points"), ADMIN).await;
    assert_eq!(st, StatusCode::OK);
    assert!(cd.ends_with("-points.csv\""), "{cd}");
    let (head, rows) = csv_rows(&body);
    assert_eq!(
        head,
        ["policy", "rate_scale", "violation_rate", "prompt_tokens_per_s", "output_tokens_per_s", "oom_events"]
    );
    let points = rep["points"].as_array().unwrap();
    assert!(!points.is_empty());
    assert_eq!(rows.len(), points.len());
    for (row, p) in rows.iter().zip(points) {
        assert_eq!(row[0], p["policy"].as_str().unwrap());
        assert_eq!(row[1].parse::<f64>().unwrap(), p["rate_scale"].as_f64().unwrap());
        assert_eq!(row[2].parse::<f64>().unwrap(), p["violation_rate"].as_f64().unwrap());
    }
    let (_, _, _, body) = file(&app, &format!("/api/v1/runs/{id}/export/points?format=json"), ADMIN).await;
    let js: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(js.len(), points.len());
    assert_eq!(js[0]["rate_scale"], points[0]["rate_scale"]);
    let (_, _, _, body) = file(&app, &format!("/api/v1/runs/{id}/export/summary"), ADMIN).await;
    let (head, rows) = csv_rows(&body);
    assert_eq!(rows.len(), rep["results"].as_array().unwrap().len());
    assert_eq!(head[0], "policy");
    assert!(head.contains(&"goodput_vs_dedicated".to_string()));
    let (st, v) = get(&app, &format!("/api/v1/runs/{id}/export/requests"), ADMIN).await;
    assert_eq!((st, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("part")), "{v}");

    // A run that has not succeeded has nothing to export, and says why.
    let (_, q) =
        post(&app, "/api/v1/runs", ADMIN, json!({ "kind": "replay", "scenario": "bursty-8t", "policy": "slice" }))
            .await;
    let qid = q["id"].as_str().unwrap();
    let (st, v) = get(&app, &format!("/api/v1/runs/{qid}/export/requests"), ADMIN).await;
    assert_eq!((st, v["field"].as_str()), (StatusCode::CONFLICT, Some("status")), "{v}");
    post(&app, &format!("/api/v1/runs/{qid}/cancel"), ADMIN, json!({})).await;
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn the_scenario_filter_matches_part_of_a_name(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    for scenario in ["smoke", "azure-code-4t", "bursty-8t"] {
        sqlx::query(
            "insert into runs (id, kind, scenario, scenario_toml, policies, status, created_by) \
             values (gen_random_uuid(), 'replay', $1, '', '{dedicated}', 'failed', 'test')",
        )
        .bind(scenario)
        .execute(&pool)
        .await
        .unwrap();
    }
    let names = |v: &Value| {
        let mut n: Vec<String> =
            v["items"].as_array().unwrap().iter().map(|r| r["scenario"].as_str().unwrap().into()).collect();
        n.sort();
        n
    };
    let (_, v) = get(&app, "/api/v1/runs?scenario=T", ADMIN).await;
    assert_eq!(names(&v), ["azure-code-4t", "bursty-8t"]);
    let (_, v) = get(&app, "/api/v1/runs?scenario=MOK", ADMIN).await;
    assert_eq!(names(&v), ["smoke"]);
    let (_, v) = get(&app, "/api/v1/runs?scenario=%25", ADMIN).await;
    assert_eq!(names(&v), Vec::<String>::new(), "a % is a character, not a wildcard");
}
