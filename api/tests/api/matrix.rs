//! The role and isolation matrix, route by route: who may call what, and a tenant sees
//! another tenant's things as 404 (not 403) and cannot change them.

use crate::common::*;
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;

#[derive(Clone, Copy, PartialEq, Debug)]
enum R {
    Admin,
    Tenant,
    Analyst,
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn every_route_checks_the_role(pool: PgPool) {
    let st = state(pool.clone()).await;
    let app = slicesched_api::app(st);
    let (ta, key_a) = tenant(&app, "alpha").await;
    let ana = analyst(&app).await;
    // A run and a plugin to address (the run row only: no job needed for role checks).
    let run: (uuid::Uuid,) = sqlx::query_as(
        "insert into runs (id, kind, scenario, scenario_toml, policies, status, created_by) \
         values (gen_random_uuid(), 'replay', 'smoke', '', '{dedicated}', 'failed', 'test') returning id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let run = run.0;
    let (plugin,): (uuid::Uuid,) = sqlx::query_as("select id from plugins limit 1").fetch_one(&pool).await.unwrap();
    let sla = json!({ "ttft_ms": 400, "tpot_ms": 50 });
    // Things the admin-only removals at the end of the matrix take away.
    let (tg, _) = tenant(&app, "gamma").await;
    let (s, victim) = post(&app, "/api/v1/keys", ADMIN, json!({ "name": "victim", "role": "analyst" })).await;
    assert_eq!(s, StatusCode::CREATED);
    let victim = victim["key"]["id"].as_str().unwrap().to_string();
    use R::*;
    #[rustfmt::skip]
    let routes: Vec<(Method, String, Option<Value>, &[R])> = vec![
        (Method::GET, "/api/v1/me".into(), None, &[Admin, Tenant, Analyst]),
        (Method::GET, "/api/v1/runs".into(), None, &[Admin, Analyst]),
        (Method::POST, "/api/v1/runs".into(), Some(json!({ "kind": "replay", "scenario": "no-such", "policy": "dedicated" })), &[Admin]),
        (Method::GET, format!("/api/v1/runs/{run}"), None, &[Admin, Analyst]),
        (Method::POST, format!("/api/v1/runs/{run}/cancel"), None, &[Admin]),
        (Method::GET, format!("/api/v1/runs/{run}/requests"), None, &[Admin, Analyst]),
        (Method::GET, format!("/api/v1/runs/{run}/series"), None, &[Admin, Analyst]),
        (Method::GET, format!("/api/v1/runs/{run}/decisions"), None, &[Admin, Analyst]),
        (Method::GET, format!("/api/v1/runs/{run}/gpus"), None, &[Admin, Analyst]),
        (Method::GET, format!("/api/v1/runs/{run}/timeline/meta"), None, &[Admin, Analyst]),
        (Method::GET, format!("/api/v1/runs/{run}/timeline"), None, &[Admin, Analyst]),
        (Method::GET, "/api/v1/tenants".into(), None, &[Admin, Tenant, Analyst]),
        (Method::POST, "/api/v1/tenants".into(), Some(json!({ "name": "beta", "sla": sla })), &[Admin]),
        (Method::GET, format!("/api/v1/tenants/{ta}"), None, &[Admin, Tenant, Analyst]),
        (Method::GET, format!("/api/v1/tenants/{ta}/sla"), None, &[Admin, Tenant, Analyst]),
        (Method::PUT, format!("/api/v1/tenants/{ta}/sla"), Some(sla.clone()), &[Admin, Tenant]),
        (Method::GET, format!("/api/v1/tenants/{ta}/sla/history"), None, &[Admin, Tenant, Analyst]),
        (Method::GET, format!("/api/v1/tenants/{ta}/stats"), None, &[Admin, Tenant, Analyst]),
        (Method::GET, "/api/v1/keys".into(), None, &[Admin]),
        (Method::POST, "/api/v1/keys".into(), Some(json!({ "name": "ana2", "role": "analyst" })), &[Admin]),
        (Method::GET, "/api/v1/plugins".into(), None, &[Admin, Analyst]),
        (Method::GET, format!("/api/v1/plugins/{plugin}"), None, &[Admin, Analyst]),
        (Method::POST, format!("/api/v1/plugins/{plugin}/disable"), None, &[Admin]),
        (Method::POST, format!("/api/v1/plugins/{plugin}/activate"), None, &[Admin]),
        (Method::GET, "/api/v1/clusters".into(), None, &[Admin, Analyst]),
        (Method::POST, "/api/v1/clusters".into(), Some(json!({ "name": "c1", "spec": { "name": "c1", "nodes": [{ "gpu": "A100-80GB", "gpus": 2 }] } })), &[Admin]),
        (Method::GET, "/api/v1/models".into(), None, &[Admin, Analyst]),
        (Method::GET, "/api/v1/scenarios".into(), None, &[Admin, Analyst]),
        (Method::GET, format!("/api/v1/runs/{run}/latency"), None, &[Admin, Analyst]),
        (Method::GET, "/api/v1/runs?kind=sweep".into(), None, &[Admin, Analyst]),
        (Method::GET, "/api/v1/tenants?include_removed=true".into(), None, &[Admin, Analyst]),
        (Method::GET, "/api/v1/audit".into(), None, &[Admin]),
        (Method::GET, "/api/v1/audit?action=tenant.create".into(), None, &[Admin]),
        (Method::DELETE, format!("/api/v1/keys/{victim}"), None, &[Admin]),
        (Method::DELETE, format!("/api/v1/tenants/{tg}"), None, &[Admin]),
    ];
    for (method, path, body, allowed) in &routes {
        // Without a token, or with a wrong one: 401.
        for token in [None, Some("ssk_not-a-key")] {
            let (s, v) = call(&app, method.clone(), path, token, body.clone()).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path} with {token:?}: {v}");
        }
        // Disallowed roles first, so refused calls are shown to change nothing.
        for (role, token) in [(Tenant, key_a.as_str()), (Analyst, ana.as_str()), (Admin, ADMIN)] {
            let before = snapshot(&pool).await;
            let (s, v) = call(&app, method.clone(), path, Some(token), body.clone()).await;
            if allowed.contains(&role) {
                assert!(
                    s != StatusCode::UNAUTHORIZED && s != StatusCode::FORBIDDEN && s != StatusCode::NOT_FOUND,
                    "{role:?} must reach {method} {path}: {s} {v}"
                );
                assert!(!s.is_server_error(), "{method} {path}: {s} {v}");
            } else {
                assert!(s == StatusCode::FORBIDDEN || s == StatusCode::NOT_FOUND, "{role:?} {method} {path}: {s} {v}");
                assert_eq!(before, snapshot(&pool).await, "{role:?} {method} {path} changed something");
            }
        }
    }
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_tenant_sees_other_tenants_as_missing(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let (ta, key_a) = tenant(&app, "alpha").await;
    let (tb, key_b) = tenant(&app, "beta").await;
    for sub in ["", "/sla", "/sla/history", "/stats"] {
        let (s, v) = get(&app, &format!("/api/v1/tenants/{tb}{sub}"), &key_a).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "alpha reading beta{sub}: {v}");
        // Exactly what a tenant id that does not exist answers: existence does not leak.
        let other = uuid::Uuid::new_v4().to_string();
        let (s2, v2) = get(&app, &format!("/api/v1/tenants/{other}{sub}"), &key_a).await;
        // The same answer, naming the id asked for.
        assert_eq!((s, v.to_string().replace(tb.as_str(), "ID")), (s2, v2.to_string().replace(&other, "ID")));
        let (s, _) = get(&app, &format!("/api/v1/tenants/{ta}{sub}"), &key_a).await;
        assert_eq!(s, StatusCode::OK, "alpha reading its own{sub}");
    }
    let before = snapshot(&pool).await;
    let (s, _) = call(
        &app,
        Method::PUT,
        &format!("/api/v1/tenants/{tb}/sla"),
        Some(&key_a),
        Some(json!({ "ttft_ms": 1, "tpot_ms": 1 })),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(before, snapshot(&pool).await);
    let (_, sla) = get(&app, &format!("/api/v1/tenants/{tb}/sla"), &key_b).await;
    assert_eq!(sla["version"], 1);
    assert_eq!(sla["ttft_ms"], 500.0);
    // The list shows a tenant itself only.
    let (_, list) = get(&app, "/api/v1/tenants", &key_a).await;
    let names: Vec<&str> = list["items"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha"]);
    let (_, list) = get(&app, "/api/v1/tenants", ADMIN).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn sla_changes_are_versioned_with_who_and_when(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let (ta, key_a) = tenant(&app, "alpha").await;
    for (i, ttft) in [300.0, 250.0].iter().enumerate() {
        let (s, v) = call(
            &app,
            Method::PUT,
            &format!("/api/v1/tenants/{ta}/sla"),
            Some(&key_a),
            Some(json!({ "ttft_ms": ttft, "ttft_ms_per_1k": 100, "tpot_ms": 40 })),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["version"], i as i64 + 2);
        assert_eq!(v["changed_by"], "tenant:alpha");
    }
    let (_, h) = get(&app, &format!("/api/v1/tenants/{ta}/sla/history"), ADMIN).await;
    let versions: Vec<i64> = h["items"].as_array().unwrap().iter().map(|x| x["version"].as_i64().unwrap()).collect();
    assert_eq!(versions, [3, 2, 1]);
    assert_eq!(h["items"][2]["changed_by"], "admin:admin");
    let (n,): (i64,) =
        sqlx::query_as("select count(*) from audit_log where action = 'sla.update'").fetch_one(&pool).await.unwrap();
    assert_eq!(n, 2);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn keys_are_stored_hashed_and_shown_once(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let (_, key_a) = tenant(&app, "alpha").await;
    let ana = analyst(&app).await;
    let stored: Vec<(Vec<u8>,)> = sqlx::query_as("select token_sha256 from api_keys").fetch_all(&pool).await.unwrap();
    assert_eq!(stored.len(), 2);
    for (digest,) in &stored {
        assert_eq!(digest.len(), 32);
        assert!(digest != key_a.as_bytes() && digest != ana.as_bytes());
    }
    let digests: Vec<Vec<u8>> = stored.into_iter().map(|r| r.0).collect();
    assert!(digests.contains(&slicesched_api::auth::sha256(&key_a).to_vec()));
    // No later answer carries a token again.
    let (_, keys) = get(&app, "/api/v1/keys", ADMIN).await;
    let text = keys.to_string();
    assert!(!text.contains(&key_a) && !text.contains(&ana) && !text.contains("api_key"), "{text}");
    let (_, me) = get(&app, "/api/v1/me", &ana).await;
    assert_eq!(me, json!({ "role": "analyst", "name": "ana", "tenant_id": null }));
}
