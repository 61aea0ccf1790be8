//! Key revocation, tenant removal and the audit log: revoked keys stop at once, a removed
//! tenant's routes answer 404 while its history stays, every change is in the audit log
//! and only admins read it.

use crate::common::*;
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;

async fn delete(app: &axum::Router, path: &str, token: &str) -> (StatusCode, Value) {
    call(app, Method::DELETE, path, Some(token), None).await
}

async fn audit_rows(pool: &PgPool, action: &str) -> Vec<(String, String, Value)> {
    sqlx::query_as("select actor, target, detail from audit_log where action = $1 order by id")
        .bind(action)
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_revoked_key_is_refused_at_once_and_listed_as_revoked(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let ana = analyst(&app).await;
    let (_, key_a) = tenant(&app, "alpha").await;
    assert_eq!(get(&app, "/api/v1/runs", &ana).await.0, StatusCode::OK);
    let (_, keys) = get(&app, "/api/v1/keys", ADMIN).await;
    let id_of = |role: &str| {
        keys["items"].as_array().unwrap().iter().find(|k| k["role"] == role).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (ana_id, tenant_key_id) = (id_of("analyst"), id_of("tenant"));
    assert!(keys["items"].as_array().unwrap().iter().all(|k| k["revoked_at"].is_null()));

    // Neither an analyst nor a tenant may revoke, not even its own key; nothing changes.
    let before = snapshot(&pool).await;
    for (token, id) in [(&ana, &ana_id), (&key_a, &tenant_key_id), (&key_a, &ana_id)] {
        let (s, v) = delete(&app, &format!("/api/v1/keys/{id}"), token).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    }
    assert_eq!(before, snapshot(&pool).await);
    assert_eq!(get(&app, "/api/v1/me", &ana).await.0, StatusCode::OK);

    let (s, k) = delete(&app, &format!("/api/v1/keys/{ana_id}"), ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{k}");
    assert!(k["revoked_at"].is_string(), "{k}");
    assert_eq!(k["revoked_by"], "admin:admin");
    // The very next request with it: 401, as for a key that never existed.
    let (s, v) = get(&app, "/api/v1/runs", &ana).await;
    assert_eq!((s, v["status"].as_i64()), (StatusCode::UNAUTHORIZED, Some(401)), "{v}");
    assert_eq!(get(&app, "/api/v1/me", &ana).await.0, StatusCode::UNAUTHORIZED);
    // The tenant's key is untouched.
    assert_eq!(get(&app, "/api/v1/me", &key_a).await.0, StatusCode::OK);
    // Listed with when and by whom; revoking again is a conflict; unknown ids are 404.
    let (_, keys) = get(&app, "/api/v1/keys", ADMIN).await;
    let listed = keys["items"].as_array().unwrap().iter().find(|k| k["id"] == json!(ana_id)).unwrap().clone();
    assert_eq!(listed["revoked_at"], k["revoked_at"]);
    let (s, v) = delete(&app, &format!("/api/v1/keys/{ana_id}"), ADMIN).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::CONFLICT, Some("id")), "{v}");
    let (s, _) = delete(&app, &format!("/api/v1/keys/{}", uuid::Uuid::new_v4()), ADMIN).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, v) = delete(&app, "/api/v1/keys/not-a-uuid", ADMIN).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::BAD_REQUEST, Some("id")));
    // A tenant's key is revoked the same way.
    let (s, _) = delete(&app, &format!("/api/v1/keys/{tenant_key_id}"), ADMIN).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(get(&app, "/api/v1/me", &key_a).await.0, StatusCode::UNAUTHORIZED);

    // An admin issues the tenant a new key; it reaches the tenant's own things only.
    let (tid,): (uuid::Uuid,) =
        sqlx::query_as("select id from tenants where name = 'alpha'").fetch_one(&pool).await.unwrap();
    for (body, field) in [
        (json!({ "name": "a2", "role": "tenant" }), "tenant_id"),
        (json!({ "name": "a2", "role": "tenant", "tenant_id": uuid::Uuid::new_v4() }), "tenant_id"),
        (json!({ "name": "a2", "role": "analyst", "tenant_id": tid }), "tenant_id"),
    ] {
        let (s, v) = post(&app, "/api/v1/keys", ADMIN, body).await;
        assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some(field)), "{v}");
    }
    let (s, v) =
        post(&app, "/api/v1/keys", ADMIN, json!({ "name": "alpha-2", "role": "tenant", "tenant_id": tid })).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let key_a2 = v["api_key"].as_str().unwrap();
    let (_, me) = get(&app, "/api/v1/me", key_a2).await;
    assert_eq!((me["role"].as_str(), me["tenant_id"].clone()), (Some("tenant"), json!(tid)));
    assert_eq!(get(&app, &format!("/api/v1/tenants/{tid}/sla"), key_a2).await.0, StatusCode::OK);

    let rows = audit_rows(&pool, "key.revoke").await;
    assert_eq!(rows.len(), 2, "one entry per revocation, none for refused ones");
    assert_eq!(rows[0].0, "admin:admin");
    assert_eq!(rows[0].1, ana_id);
    assert_eq!(rows[0].2, json!({ "name": "ana", "role": "analyst" }));
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_removed_tenant_answers_404_keeps_its_history_and_loses_its_keys(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let ana = analyst(&app).await;
    let (ta, key_a) = tenant(&app, "alpha").await;
    let (tb, key_b) = tenant(&app, "beta").await;
    let (s, _) = call(
        &app,
        Method::PUT,
        &format!("/api/v1/tenants/{ta}/sla"),
        Some(&key_a),
        Some(json!({ "ttft_ms": 300, "tpot_ms": 40 })),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // A run that replayed a tenant of that name stays in the history.
    sqlx::query(
        "insert into runs (id, kind, scenario, scenario_toml, policies, status, created_by, tenant_names) \
         values (gen_random_uuid(), 'replay', 'smoke', '', '{dedicated}', 'succeeded', 'test', '{alpha}')",
    )
    .execute(&pool)
    .await
    .unwrap();

    // Only an admin removes; a tenant cannot remove itself or another; nothing changes.
    let before = snapshot(&pool).await;
    for (token, id) in [(&key_a, &ta), (&key_a, &tb), (&ana, &ta)] {
        let (s, v) = delete(&app, &format!("/api/v1/tenants/{id}"), token).await;
        assert!(s == StatusCode::FORBIDDEN || s == StatusCode::NOT_FOUND, "{s} {v}");
    }
    assert_eq!(before, snapshot(&pool).await);

    let (s, t) = delete(&app, &format!("/api/v1/tenants/{ta}"), ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(t["name"], "alpha");
    assert!(t["removed_at"].is_string());
    assert_eq!(t["sla"]["version"], 2);
    // Its key stops at once; its routes answer 404 for everyone, exactly as a missing id.
    assert_eq!(get(&app, "/api/v1/me", &key_a).await.0, StatusCode::UNAUTHORIZED);
    for sub in ["", "/sla", "/sla/history", "/stats"] {
        for token in [ADMIN, ana.as_str()] {
            let gone = get(&app, &format!("/api/v1/tenants/{ta}{sub}"), token).await;
            let other = uuid::Uuid::new_v4().to_string();
            let missing = get(&app, &format!("/api/v1/tenants/{other}{sub}"), token).await;
            assert_eq!(gone.0, StatusCode::NOT_FOUND, "{sub}: {}", gone.1);
            // The same answer, naming the id asked for.
            let unnamed = |v: &Value, id: &str| v.to_string().replace(id, "ID");
            assert_eq!((gone.0, unnamed(&gone.1, &ta)), (missing.0, unnamed(&missing.1, &other)));
        }
    }
    let (s, _) = call(
        &app,
        Method::PUT,
        &format!("/api/v1/tenants/{ta}/sla"),
        Some(ADMIN),
        Some(json!({ "ttft_ms": 1, "tpot_ms": 1 })),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(delete(&app, &format!("/api/v1/tenants/{ta}"), ADMIN).await.0, StatusCode::NOT_FOUND);
    // The other tenant is untouched.
    assert_eq!(get(&app, &format!("/api/v1/tenants/{tb}"), &key_b).await.0, StatusCode::OK);

    // Lists leave it out unless readers ask; its SLA history and the runs stay stored.
    let names = |v: &Value| -> Vec<String> {
        v["items"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names(&get(&app, "/api/v1/tenants", ADMIN).await.1), ["beta"]);
    let (s, all) = get(&app, "/api/v1/tenants?include_removed=true", &ana).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(names(&all), ["alpha", "beta"]);
    assert_eq!(all["items"][0]["removed_at"], t["removed_at"]);
    assert_eq!(all["items"][0]["sla"]["ttft_ms"], 300.0);
    assert_eq!(get(&app, "/api/v1/tenants?include_removed=true", &key_b).await.0, StatusCode::FORBIDDEN);
    let (n,): (i64,) = sqlx::query_as("select count(*) from sla_versions where tenant_id = $1")
        .bind(uuid::Uuid::parse_str(&ta).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 2);
    let (_, runs) = get(&app, "/api/v1/runs", &ana).await;
    assert_eq!(runs["items"].as_array().unwrap().len(), 1);
    // The name is free again.
    let (ta2, key_a2) = tenant(&app, "alpha").await;
    assert_ne!(ta2, ta);
    assert_eq!(get(&app, &format!("/api/v1/tenants/{ta2}"), &key_a2).await.0, StatusCode::OK);
    assert_eq!(get(&app, &format!("/api/v1/tenants/{ta}"), &key_a2).await.0, StatusCode::NOT_FOUND);

    let rows = audit_rows(&pool, "tenant.remove").await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_str()), ("admin:admin", ta.as_str()));
    assert_eq!(rows[0].2, json!({ "name": "alpha", "keys_revoked": 1 }));
    let (_, keys) = get(&app, "/api/v1/keys", ADMIN).await;
    let revoked: Vec<&Value> =
        keys["items"].as_array().unwrap().iter().filter(|k| !k["revoked_at"].is_null()).collect();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["tenant_id"], json!(ta));
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn the_audit_log_pages_and_filters_for_admins_only(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let ana = analyst(&app).await;
    let (ta, key_a) = tenant(&app, "alpha").await;
    for ttft in [300, 250, 200] {
        let (s, _) = call(
            &app,
            Method::PUT,
            &format!("/api/v1/tenants/{ta}/sla"),
            Some(&key_a),
            Some(json!({ "ttft_ms": ttft, "tpot_ms": 40 })),
        )
        .await;
        assert_eq!(s, StatusCode::OK);
    }
    let (tb, _) = tenant(&app, "beta").await;
    // key.create, tenant.create, 3 × sla.update, tenant.create.
    let (s, page) = get(&app, "/api/v1/audit", ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    let actions: Vec<&str> = page["items"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["tenant.create", "sla.update", "sla.update", "sla.update", "tenant.create", "key.create"]);
    assert_eq!(page["items"][0]["target"], json!(tb));
    assert_eq!(page["items"][0]["detail"]["name"], "beta");
    assert!(page["next_cursor"].is_null());

    // Every page, newest first, exactly once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("/api/v1/audit?limit=4&cursor={c}"),
            None => "/api/v1/audit?limit=4".into(),
        };
        let (s, v) = get(&app, &url, ADMIN).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        seen.extend(v["items"].as_array().unwrap().iter().map(|e| e["id"].as_i64().unwrap()));
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 6);
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");

    let count = |v: &Value| v["items"].as_array().unwrap().len();
    let (_, v) = get(&app, "/api/v1/audit?actor=tenant:alpha", ADMIN).await;
    assert_eq!(count(&v), 3);
    assert!(v["items"].as_array().unwrap().iter().all(|e| e["action"] == "sla.update"));
    let (_, v) = get(&app, "/api/v1/audit?action=tenant.create", ADMIN).await;
    assert_eq!(count(&v), 2);
    let (_, v) = get(&app, &format!("/api/v1/audit?target={ta}&action=sla.update&limit=2"), ADMIN).await;
    assert_eq!(count(&v), 2);
    assert!(v["next_cursor"].is_string());
    assert_eq!(v["items"][0]["detail"]["sla"]["ttft_ms"], 200.0);
    let (_, v) = get(&app, "/api/v1/audit?actor=nobody", ADMIN).await;
    assert_eq!(count(&v), 0);
    // The actor filter matches a part of the name, ignoring case, with no wildcards.
    let (_, v) = get(&app, "/api/v1/audit?actor=ALPH", ADMIN).await;
    assert_eq!(count(&v), 3);
    let (_, v) = get(&app, "/api/v1/audit?actor=tenant%3A%25", ADMIN).await;
    assert_eq!(count(&v), 0, "% is a character, not a wildcard");
    let past = "2000-01-01T00:00:00Z";
    let future = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(count(&get(&app, &format!("/api/v1/audit?since={past}&until={future}"), ADMIN).await.1), 6);
    assert_eq!(count(&get(&app, &format!("/api/v1/audit?since={future}"), ADMIN).await.1), 0);
    assert_eq!(count(&get(&app, &format!("/api/v1/audit?until={past}"), ADMIN).await.1), 0);

    // Bad parameters name themselves.
    for (q, field) in [
        ("limit=0", "limit"),
        ("limit=5000", "limit"),
        ("cursor=zzz", "cursor"),
        ("since=yesterday", "since"),
        ("colour=red", "colour"),
        ("actor=", "actor"),
    ] {
        let (s, v) = get(&app, &format!("/api/v1/audit?{q}"), ADMIN).await;
        assert_eq!((s, v["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{q}: {v}");
    }
    let (s, v) = get(&app, &format!("/api/v1/audit?since={future}&until={past}"), ADMIN).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::BAD_REQUEST, Some("until")));
    // Analysts and tenants: 403, as for every admin-only route; no token: 401.
    assert_eq!(get(&app, "/api/v1/audit", &ana).await.0, StatusCode::FORBIDDEN);
    assert_eq!(get(&app, "/api/v1/audit", &key_a).await.0, StatusCode::FORBIDDEN);
    assert_eq!(call(&app, Method::GET, "/api/v1/audit", None, None).await.0, StatusCode::UNAUTHORIZED);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn quarantine_write_back_marks_the_plugin_and_names_the_cause(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let (plugin,): (uuid::Uuid,) = sqlx::query_as(
        "insert into plugins (id, name, version, interface_version, sha256_hex, size_bytes, bytes, uploaded_by) \
         values (gen_random_uuid(), 'wobbly', '0.1.0', '0.1.0', 'ab', 2, '\\x0000', 'admin:admin') returning id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let run = uuid::Uuid::new_v4();
    let q = slicesched_api::plugin_host::Quarantined {
        name: "wobbly".into(),
        version: "0.1.0".into(),
        calls: 10,
        failures: 3,
        fallback_decisions: 8,
        cause: "plugin `wobbly` 0.1.0: ran out of fuel in `place` (50000000 units per call)".into(),
        errors: vec!["plugin `wobbly` 0.1.0: ran out of fuel in `place` (50000000 units per call)".into(); 3],
    };
    assert!(slicesched_api::plugin_host::write_back_quarantine(&pool, plugin, run, &q).await.unwrap());
    let (_, p) = get(&app, &format!("/api/v1/plugins/{plugin}"), ADMIN).await;
    assert_eq!(p["state"], "quarantined");
    // No longer offered to runs.
    let (s, v) =
        post(&app, "/api/v1/runs", ADMIN, json!({ "kind": "replay", "scenario": "smoke", "policy": "wobbly" })).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("policy")));
    let (_, audit) = get(&app, &format!("/api/v1/audit?action=plugin.quarantine&target={plugin}"), ADMIN).await;
    let e = &audit["items"][0];
    assert_eq!(e["actor"], format!("system:run:{run}"));
    assert_eq!(e["detail"]["run_id"], json!(run));
    assert_eq!(e["detail"]["cause"], json!(q.cause));
    assert_eq!(e["detail"]["failures"], 3);
    // A second run quarantining it again changes and records nothing.
    assert!(!slicesched_api::plugin_host::write_back_quarantine(&pool, plugin, uuid::Uuid::new_v4(), &q)
        .await
        .unwrap());
    assert_eq!(audit_rows(&pool, "plugin.quarantine").await.len(), 1);
    // An admin may activate it again (and that is recorded too).
    let (s, p) = post(&app, &format!("/api/v1/plugins/{plugin}/activate"), ADMIN, json!({})).await;
    assert_eq!((s, p["state"].as_str()), (StatusCode::OK, Some("active")));
}
