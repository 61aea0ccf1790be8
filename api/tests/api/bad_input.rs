//! Bad input of every kind gets a 4xx problem naming the field, never a 5xx, and
//! changes nothing.

use crate::common::*;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::json;
use sqlx::PgPool;

fn raw(method: Method, path: &str, ct: &str, body: impl Into<Body>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .header(header::CONTENT_TYPE, ct)
        .body(body.into())
        .unwrap()
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn bad_bodies_are_refused_and_change_nothing(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let (ta, _) = tenant(&app, "alpha").await;
    let sla_path = format!("/api/v1/tenants/{ta}/sla");
    let before = snapshot(&pool).await;
    let cases: Vec<(Method, &str, &str, String, StatusCode, Option<&str>)> = vec![
        (Method::POST, "/api/v1/tenants", "application/json", "{\"name\": \"x\", ".into(), StatusCode::BAD_REQUEST, Some("body")),
        (Method::POST, "/api/v1/tenants", "application/json", "[1,2]".into(), StatusCode::UNPROCESSABLE_ENTITY, None),
        (Method::POST, "/api/v1/tenants", "text/plain", "{}".into(), StatusCode::UNSUPPORTED_MEDIA_TYPE, None),
        (Method::POST, "/api/v1/tenants", "application/json",
         json!({ "name": 5, "sla": { "ttft_ms": 1, "tpot_ms": 1 } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("name")),
        (Method::POST, "/api/v1/tenants", "application/json",
         json!({ "name": "x", "sla": { "ttft_ms": "fast", "tpot_ms": 1 } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("sla.ttft_ms")),
        (Method::POST, "/api/v1/tenants", "application/json",
         json!({ "name": "x", "sla": { "ttft_ms": 1, "tpot_ms": 1 }, "admin": true }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("admin")),
        (Method::POST, "/api/v1/tenants", "application/json",
         json!({ "name": "x", "sla": { "ttft_ms": 1, "tpot_ms": 1, "extra": 1 } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("sla.extra")),
        (Method::POST, "/api/v1/tenants", "application/json",
         json!({ "name": "x'; drop table tenants; --", "sla": { "ttft_ms": 1, "tpot_ms": 1 } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("name")),
        (Method::POST, "/api/v1/tenants", "application/json",
         json!({ "name": "<script>alert(1)</script>", "sla": { "ttft_ms": 1, "tpot_ms": 1 } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("name")),
        (Method::POST, "/api/v1/tenants", "application/json",
         json!({ "name": "ok", "sla": { "ttft_ms": -1, "tpot_ms": 1 } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("sla.ttft_ms")),
        (Method::POST, "/api/v1/tenants", "application/json",
         json!({ "name": "ok", "sla": { "ttft_ms": 1, "tpot_ms": 1e300 } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("sla.tpot_ms")),
        (Method::PUT, &sla_path, "application/json", json!({ "ttft_ms": 0, "tpot_ms": 1 }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("ttft_ms")),
        (Method::POST, "/api/v1/runs", "application/json",
         json!({ "kind": "replay", "scenario": "../../etc/passwd", "policy": "dedicated" }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("scenario")),
        (Method::POST, "/api/v1/runs", "application/json",
         json!({ "kind": "replay", "scenario": "smoke", "policy": "nope" }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("policy")),
        (Method::POST, "/api/v1/runs", "application/json",
         json!({ "kind": "teleport", "scenario": "smoke", "policy": "dedicated" }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("kind")),
        (Method::POST, "/api/v1/runs", "application/json",
         json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated", "rate_scale": 0 }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("rate_scale")),
        (Method::POST, "/api/v1/runs", "application/json",
         json!({ "kind": "sweep", "scenario": "smoke", "policies": ["dedicated"], "violation_targets": [1.5] }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("violation_targets")),
        // An inline scenario reading a file outside the project.
        (Method::POST, "/api/v1/runs", "application/json",
         json!({ "kind": "replay", "policy": "dedicated", "scenario":
            "name = \"x\"\nseed = 1\nduration_s = 10\ncluster = \"/etc/passwd\"\n[[tenants]]\nname = \"a\"\nmodel = \"llama-2-7b\"\ngpus = [0]\nsla = { ttft_ms = 1, tpot_ms = 1 }\ntrace = { kind = \"poisson\", rate = 1.0 }\n" }).to_string(),
         StatusCode::UNPROCESSABLE_ENTITY, Some("scenario")),
        (Method::POST, "/api/v1/clusters", "application/json",
         r#"{"name": "c", "spec": {"name": "a\u0000b", "nodes": [{"gpu": "A100-80GB", "gpus": 1}]}}"#.to_string(), StatusCode::BAD_REQUEST, Some("body")),
        (Method::POST, "/api/v1/keys", "application/json", json!({ "name": "x", "role": "admin" }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("role")),
        (Method::POST, "/api/v1/models", "application/json", json!({ "name": "m", "config": { "hidden_size": "big" } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("config")),
        (Method::POST, "/api/v1/clusters", "application/json", json!({ "name": "c", "spec": { "nodes": [{ "gpu": "Z9000", "gpus": 1 }] } }).to_string(), StatusCode::UNPROCESSABLE_ENTITY, Some("spec")),
    ];
    for (method, path, ct, body, want, field) in cases {
        let (s, v) = send(&app, raw(method.clone(), path, ct, body.clone())).await;
        assert_eq!(s, want, "{method} {path} {body}: {v}");
        if let Some(f) = field {
            assert_eq!(v["field"], f, "{method} {path} {body}: {v}");
        }
    }
    assert_eq!(before, snapshot(&pool).await);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn bad_queries_and_ids_are_400s(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    for (path, field) in [
        ("/api/v1/runs?limit=0", "limit"),
        ("/api/v1/runs?limit=abc", "limit"),
        ("/api/v1/runs?limit=100000", "limit"),
        ("/api/v1/runs?status=sleeping", "status"),
        ("/api/v1/runs?since=yesterday", "since"),
        ("/api/v1/runs?scenario=a%00b", "scenario"),
        ("/api/v1/runs?cursor=%27%3B%20drop%20table%20runs", "cursor"),
        ("/api/v1/runs/not-a-uuid", "id"),
        ("/api/v1/tenants/1%20or%201=1", "id"),
    ] {
        let (s, v) = get(&app, path, ADMIN).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert_eq!(v["field"], field, "{path}: {v}");
    }
    let (s, _) = get(&app, &format!("/api/v1/runs/{}", uuid::Uuid::new_v4()), ADMIN).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = get(&app, "/api/v1/nothing-here", ADMIN).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn oversized_bodies_are_refused_before_being_read(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let before = snapshot(&pool).await;
    // Declared too long: refused on the header, the (endless) body is never polled.
    let endless = Body::from_stream(futures_util::stream::repeat_with(|| Ok::<_, std::io::Error>(vec![b' '; 65536])));
    let mut req = raw(Method::POST, "/api/v1/tenants", "application/json", endless);
    req.headers_mut().insert(header::CONTENT_LENGTH, (1u64 << 40).into());
    let (s, v) = send(&app, req).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    // Undeclared (chunked) and too long: cut off at the limit, also without reading it all.
    let endless = Body::from_stream(futures_util::stream::repeat_with(|| Ok::<_, std::io::Error>(vec![b' '; 65536])));
    let (s, _) = send(&app, raw(Method::POST, "/api/v1/runs", "application/json", endless)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    let endless = Body::from_stream(futures_util::stream::repeat_with(|| Ok::<_, std::io::Error>(vec![0u8; 65536])));
    let (s, _) = send(&app, raw(Method::POST, "/api/v1/plugins", "application/wasm", endless)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(before, snapshot(&pool).await);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn corrupt_plugins_are_refused(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let before = snapshot(&pool).await;
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("application/wasm", b"definitely not wasm".to_vec()),
        ("application/wasm", b"\0asm\x01\0\0\0\x01\xff\xff\xff".to_vec()),
        ("application/wasm", b"\0asm\x0d\0\x01\0".to_vec()),
        ("application/wasm", Vec::new()),
        ("multipart/form-data; boundary=XX", b"--XX\r\nContent-Disposition: form-data; name=\"component\"; filename=\"p.wasm\"\r\n\r\nnot wasm\r\n--XX--\r\n".to_vec()),
        ("multipart/form-data; boundary=XX", b"--XX\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--XX--\r\n".to_vec()),
        ("multipart/form-data; boundary=XX", b"garbage".to_vec()),
        ("image/png", b"\x89PNG".to_vec()),
    ];
    for (ct, body) in bodies {
        let (s, v) = send(&app, raw(Method::POST, "/api/v1/plugins", ct, body)).await;
        assert!(s.is_client_error(), "{ct}: {s} {v}");
    }
    assert_eq!(before, snapshot(&pool).await);
}
