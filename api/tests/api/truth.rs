//! History that tells the truth: whole-run timelines with op windows recorded on
//! demand, runs that say how they ran, SLAs from the control plane, and the small
//! truths (errors naming what is missing, shutdown interrupting runs).

use crate::common::*;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use tower::ServiceExt;

async fn start(app: &axum::Router, body: Value) -> String {
    let (s, v) = post(app, "/api/v1/runs", ADMIN, body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    v["id"].as_str().unwrap().to_string()
}

async fn replay(app: &axum::Router, body: Value) -> Value {
    let id = start(app, body).await;
    let run = wait_run(app, &id, finished).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    run
}

/// Waits for a window to leave queued/running.
async fn wait_window(app: &axum::Router, run: &str, w: &str) -> Value {
    for _ in 0..2400 {
        let (s, v) = get(app, &format!("/api/v1/runs/{run}/timeline/windows/{w}"), ADMIN).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        if !matches!(v["status"].as_str(), Some("queued") | Some("running")) {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("window {w} of run {run} did not finish in 120 s");
}

fn sum(v: &Value) -> i64 {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).sum()
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn the_timeline_covers_the_whole_run_and_records_any_window_on_demand(pool: PgPool) {
    let mut c = config();
    c.record_max_ops = 20_000; // the start window ends within the first seconds
    let app = slicesched_api::app(state_with(pool.clone(), c).await);
    // Another draw than the file's: a window re-replays the run's own draw (its ops
    // match the stored buckets below only if it does).
    let run = replay(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "slice", "draw": 1 })).await;
    assert_eq!(run["summary"]["seed"].as_u64(), Some(slicesched_sim::draw_seed(7, 1)));
    let id = run["id"].as_str().unwrap();
    let end = (run["summary"]["duration_s"].as_f64().unwrap() * 1e9) as i64;

    // The automatic windows (busiest second, worst violation spike) are listed from the
    // moment the run succeeded and recorded in the background.
    let meta = loop {
        let (s, meta) = get(&app, &format!("/api/v1/runs/{id}/timeline/meta"), ADMIN).await;
        assert_eq!(s, StatusCode::OK, "{meta}");
        let ws = meta["windows"].as_array().unwrap();
        assert!(ws.iter().any(|w| w["reason"] == "busiest"), "{meta}");
        if ws.iter().all(|w| w["status"] == "recorded") {
            break meta;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(meta["whole_run"], true, "{meta}");
    assert_eq!((meta["from_ns"].as_i64(), meta["to_ns"].as_i64()), (Some(0), Some(end)));
    let start = meta["windows"].as_array().unwrap().iter().find(|w| w["reason"] == "start").expect("a start window");
    let start_to = start["recorded_to_ns"].as_i64().unwrap();
    assert!(start_to < end / 10, "the op cap cut the start window short: {start}");

    // The whole run as buckets: the last tenth has work, and the busy time of the whole
    // run's buckets is every GPU's busy time in the summary.
    let (s, w) = get(&app, &format!("/api/v1/runs/{id}/timeline"), ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{w}");
    assert_eq!(w["mode"], "buckets");
    assert_eq!(w["recorded"], json!([[0, end]]));
    let b = &w["buckets"];
    let busy_s = sum(&b["busy_ns"]) as f64 / 1e9;
    let summary_busy: f64 =
        run["summary"]["gpus"].as_array().unwrap().iter().map(|g| g["busy_s"].as_f64().unwrap()).sum();
    assert!((busy_s - summary_busy).abs() < 1e-3, "{busy_s} vs {summary_busy}");
    let late: i64 = b["t0_ns"]
        .as_array()
        .unwrap()
        .iter()
        .zip(b["busy_ns"].as_array().unwrap())
        .filter(|(t, _)| t.as_i64().unwrap() > end * 9 / 10)
        .map(|(_, v)| v.as_i64().unwrap())
        .sum();
    assert!(late > 0, "work late in the run is drawn");
    let borrowed = sum(&b["borrowed_ns"]);
    assert_eq!(borrowed > 0, run["summary"]["scheduling"]["borrowed_ops"].as_u64().unwrap() > 0);

    // A late window outside every recorded window (the busiest bucket of the second
    // half): buckets at the stored resolution.
    let (t0s, busy) = (b["t0_ns"].as_array().unwrap(), b["busy_ns"].as_array().unwrap());
    let spans: Vec<(i64, i64)> = meta["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["from_ns"].as_i64().unwrap(), w["recorded_to_ns"].as_i64().unwrap()))
        .collect();
    let (_, late_t0) = t0s
        .iter()
        .zip(busy)
        .map(|(t, v)| (v.as_i64().unwrap(), t.as_i64().unwrap()))
        .filter(|(_, t)| *t > end / 2 && spans.iter().all(|&(a, b)| *t + 100_000_000 <= a || *t >= b))
        .max()
        .unwrap();
    let (from, to) = (late_t0, late_t0 + 100_000_000);
    let q = format!("/api/v1/runs/{id}/timeline?from_ns={from}&to_ns={to}");
    let (_, before) = get(&app, &q, ADMIN).await;
    assert_eq!(before["mode"], "buckets");
    assert_eq!(before["bucket_ns"], meta["bucket_ns"]);
    // Recorded on demand (an analyst may not), then op by op there.
    let ana = analyst(&app).await;
    let (s, _) =
        post(&app, &format!("/api/v1/runs/{id}/timeline/windows"), &ana, json!({ "from_ns": from, "to_ns": to })).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, win) =
        post(&app, &format!("/api/v1/runs/{id}/timeline/windows"), ADMIN, json!({ "from_ns": from, "to_ns": to }))
            .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{win}");
    let (s, again) =
        post(&app, &format!("/api/v1/runs/{id}/timeline/windows"), ADMIN, json!({ "from_ns": from, "to_ns": to }))
            .await;
    assert_eq!((s, &again["id"]), (StatusCode::OK, &win["id"]), "one job per span");
    let win = wait_window(&app, id, win["id"].as_str().unwrap()).await;
    assert_eq!(win["status"], "recorded", "{win}");
    assert_eq!(win["recorded_to_ns"].as_i64(), Some(to));
    let (_, after) = get(&app, &q, ADMIN).await;
    assert_eq!(after["mode"], "ops", "{}", after["mode"]);
    let ops = &after["ops"];
    let n = ops["start_ns"].as_array().unwrap().len();
    assert!(n > 0);
    assert!(n as u64 >= win["ops"].as_u64().unwrap(), "every op the window recorded is answered");
    // The recomputed ops are the run's own: their busy time matches the stored buckets
    // of that span (up to the ops that straddle its edges).
    let starts = ops["start_ns"].as_array().unwrap();
    let ends = ops["end_ns"].as_array().unwrap();
    let op_busy: i64 =
        starts.iter().zip(ends).map(|(a, b)| b.as_i64().unwrap().min(to) - a.as_i64().unwrap().max(from)).sum();
    let bucket_busy = sum(&before["buckets"]["busy_ns"]);
    let longest = starts.iter().zip(ends).map(|(a, b)| b.as_i64().unwrap() - a.as_i64().unwrap()).max().unwrap();
    assert!((op_busy - bucket_busy).abs() <= 4 * longest, "ops {op_busy} ns vs buckets {bucket_busy} ns");
    let borrowed_ops = ops["borrowed"].as_array().unwrap().iter().filter(|b| **b == true).count();
    assert_eq!(borrowed_ops > 0, sum(&before["buckets"]["borrowed_ns"]) > 0);
    let (_, audit) = get(&app, "/api/v1/audit?action=timeline.window.record", ADMIN).await;
    let entry = audit["items"].as_array().unwrap().iter().find(|e| e["detail"]["window_id"] == win["id"]).cloned();
    assert_eq!(entry.expect("the recording is audited")["detail"]["ops"], win["ops"]);

    // Bad windows are refused naming the rule.
    let (s, v) = post(
        &app,
        &format!("/api/v1/runs/{id}/timeline/windows"),
        ADMIN,
        json!({ "from_ns": end + 1, "to_ns": end + 2 }),
    )
    .await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("to_ns")), "{v}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn timeline_answers_are_compressed_and_cacheable(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let run = replay(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" })).await;
    let id = run["id"].as_str().unwrap();
    let (_, meta) = get(&app, &format!("/api/v1/runs/{id}/timeline/meta"), ADMIN).await;
    let version = meta["version"].as_i64().unwrap();
    let req = |path: String, extra: Option<(&str, String)>| {
        let mut r =
            Request::builder().method(Method::GET).uri(path).header(header::AUTHORIZATION, format!("Bearer {ADMIN}"));
        if let Some((k, v)) = extra {
            r = r.header(k, v);
        }
        r.body(Body::empty()).unwrap()
    };
    let url = format!("/api/v1/runs/{id}/timeline?v={version}");
    let resp = app.clone().oneshot(req(url.clone(), Some(("accept-encoding", "gzip".into())))).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let h = resp.headers().clone();
    assert_eq!(h.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()), Some("gzip"));
    assert!(h.get(header::CACHE_CONTROL).unwrap().to_str().unwrap().contains("immutable"));
    let etag = h.get(header::ETAG).unwrap().to_str().unwrap().to_string();
    let zipped = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let plain = app.clone().oneshot(req(url.clone(), None)).await.unwrap();
    let plain = axum::body::to_bytes(plain.into_body(), usize::MAX).await.unwrap();
    assert!(zipped.len() * 3 < plain.len(), "gzip: {} of {} bytes", zipped.len(), plain.len());
    let resp = app.clone().oneshot(req(url, Some(("if-none-match", etag.clone())))).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
    // Without the current version the answer must be revalidated.
    let resp = app.clone().oneshot(req(format!("/api/v1/runs/{id}/timeline"), None)).await.unwrap();
    assert_eq!(resp.headers().get(header::CACHE_CONTROL).unwrap(), "no-cache");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_run_says_how_it_ran(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let run =
        replay(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated", "rate_scale": 0.5 })).await;
    let id = run["id"].as_str().unwrap();
    assert_eq!(run["rate_scale"], 0.5);
    assert!(run["fallback"].is_null());
    let p = &run["params"];
    assert_eq!(p["scenario"], "smoke");
    assert_eq!(p["rate_scale"], 0.5);
    assert_eq!(p["seed"], 7);
    let toml = std::fs::read(repo().join("scenarios/smoke.toml")).unwrap();
    let sha: String = slicesched_api::auth::sha256_bytes(&toml).iter().map(|x| format!("{x:02x}")).collect();
    assert_eq!(p["scenario_sha256"], sha);
    assert_eq!(p["inputs"], json!([]), "smoke names no file (its traces are synthetic)");
    let pol = &p["policies"][0];
    assert_eq!((pol["name"].as_str(), pol["kind"].as_str()), (Some("dedicated"), Some("native")));
    let (_, plugins) = get(&app, "/api/v1/plugins", ADMIN).await;
    let row = plugins["items"].as_array().unwrap().iter().find(|x| x["name"] == "dedicated").unwrap().clone();
    assert_eq!((&pol["version"], &pol["sha256"]), (&row["version"], &row["sha256_hex"]));
    assert_eq!(p["core"]["follow_producer"], true);
    assert_eq!(p["core"]["plugin_quarantine_after"], 3);
    // A default-scale replay says 1×; the list carries the same parameters.
    let other = replay(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" })).await;
    assert_eq!(other["params"]["rate_scale"], 1.0);
    let (_, list) = get(&app, "/api/v1/runs?kind=replay", ADMIN).await;
    let listed = list["items"].as_array().unwrap().iter().find(|r| r["id"] == run["id"]).unwrap().clone();
    assert_eq!(listed["params"], run["params"]);
    assert_eq!(listed["rate_scale"], 0.5);
    // The audit log has what was asked and, when it started, what was resolved.
    let (_, a) = get(&app, &format!("/api/v1/audit?target={id}"), ADMIN).await;
    let items = a["items"].as_array().unwrap();
    let create = items.iter().find(|e| e["action"] == "run.create").unwrap();
    assert_eq!(create["detail"]["params"]["rate_scale"], 0.5);
    assert_eq!(create["detail"]["params"]["policies"][0]["sha256"], pol["sha256"]);
    let started = items.iter().find(|e| e["action"] == "run.start").unwrap();
    assert_eq!(started["detail"]["seed"], 7);
}

/// Sets `name`'s SLA to a new version.
async fn set_sla(app: &axum::Router, id: &str, tpot_ms: f64) {
    let (s, v) = call(
        app,
        Method::PUT,
        &format!("/api/v1/tenants/{id}/sla"),
        Some(ADMIN),
        Some(json!({ "ttft_ms": 500, "ttft_ms_per_1k": 250, "tpot_ms": tpot_ms })),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn registered_tenants_slas_are_applied_and_their_statistics_attributed(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    // A run from before the tenant existed is not the tenant's.
    let early = replay(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" })).await;
    assert_eq!(early["params"]["tenants"], json!([]));
    let (chat, _) = tenant(&app, "chat").await; // the smoke scenario's tenant name
    let (acme, acme_key) = tenant(&app, "acme").await;
    set_sla(&app, &chat, 60.0).await; // v2: the scenario file's figures
    let loose = replay(
        &app,
        json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated",
        "tenants": { "code": acme } }),
    )
    .await;
    set_sla(&app, &chat, 8.0).await; // v3: far tighter TPOT
    let tight = replay(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" })).await;

    let applied = loose["params"]["tenants"].as_array().unwrap();
    assert_eq!(applied.len(), 2, "{applied:?}");
    let by = |v: &Value, t: &str| {
        v["params"]["tenants"].as_array().unwrap().iter().find(|a| a["scenario_tenant"] == t).unwrap().clone()
    };
    assert_eq!(
        (by(&loose, "chat")["matched_by"].as_str(), by(&loose, "chat")["sla_version"].as_i64()),
        (Some("name"), Some(2))
    );
    assert_eq!(
        (by(&loose, "code")["matched_by"].as_str(), by(&loose, "code")["tenant"].as_str()),
        (Some("request"), Some("acme"))
    );
    assert_eq!(by(&tight, "chat")["sla_version"], 3);
    // The SLA applied is what the requests were judged against.
    let chat_of =
        |v: &Value| v["summary"]["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "chat").unwrap().clone();
    assert_eq!(chat_of(&tight)["sla_tpot_ms"], 8.0);
    assert_eq!(chat_of(&loose)["sla_tpot_ms"], 60.0);
    let (rl, rt) =
        (chat_of(&loose)["violation_rate"].as_f64().unwrap(), chat_of(&tight)["violation_rate"].as_f64().unwrap());
    assert!(rt > rl, "a tighter SLA violates more: {rt} vs {rl}");

    let (s, st) = get(&app, &format!("/api/v1/tenants/{chat}/stats"), ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{st}");
    let runs = st["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        vec![tight["id"].as_str().unwrap(), loose["id"].as_str().unwrap()],
        "newest first, not the early run"
    );
    assert_eq!((runs[0]["sla_version"].as_i64(), runs[1]["sla_version"].as_i64()), (Some(3), Some(2)));
    assert!((runs[0]["attainment"].as_f64().unwrap() - (1.0 - rt)).abs() < 1e-12);
    assert!(runs[0]["attainment"].as_f64() < runs[1]["attainment"].as_f64());
    assert_eq!(st["sla_versions"].as_array().unwrap().len(), 3);
    // The tenant named in the request sees its run with its own key; the other's not.
    let (_, mine) = get(&app, &format!("/api/v1/tenants/{acme}/stats"), &acme_key).await;
    assert_eq!(mine["runs"].as_array().unwrap().len(), 1);
    assert_eq!(mine["runs"][0]["scenario_tenant"], "code");
    let (s, v) = get(&app, &format!("/api/v1/tenants/{chat}/stats"), &acme_key).await;
    let (s2, v2) = get(&app, &format!("/api/v1/tenants/{}/stats", uuid::Uuid::new_v4()), &acme_key).await;
    assert_eq!((s, s2), (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND));
    assert_eq!(v["title"], v2["title"]);

    // A request naming a scenario tenant that is not there, or a tenant that is not.
    let (s, v) = post(
        &app,
        "/api/v1/runs",
        ADMIN,
        json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated",
        "tenants": { "nobody": acme } }),
    )
    .await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("tenants.nobody")), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("chat, code"), "{v}");
    let (s, v) = post(
        &app,
        "/api/v1/runs",
        ADMIN,
        json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated",
        "tenants": { "chat": uuid::Uuid::new_v4() } }),
    )
    .await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("tenants.chat")), "{v}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn errors_name_what_is_missing_or_already_exists(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    tenant(&app, "dup").await;
    let (s, v) =
        post(&app, "/api/v1/tenants", ADMIN, json!({ "name": "dup", "sla": { "ttft_ms": 1, "tpot_ms": 1 } })).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["detail"], "a tenant named `dup` already exists", "{v}");
    let id = uuid::Uuid::new_v4();
    let (s, v) = get(&app, &format!("/api/v1/runs/{id}"), ADMIN).await;
    assert_eq!(
        (s, v["detail"].as_str().map(String::from)),
        (StatusCode::NOT_FOUND, Some(format!("no run with id {id}")))
    );
    let (_, v) = get(&app, &format!("/api/v1/tenants/{id}"), ADMIN).await;
    assert_eq!(v["detail"], format!("no tenant with id {id}"));
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn shutdown_interrupts_running_runs_promptly(pool: PgPool) {
    let st = state(pool.clone()).await;
    let jobs = st.jobs.clone();
    let app = slicesched_api::app(st);
    // The longest shipped scenario: minutes of replay, far longer than this test waits.
    let id = start(&app, json!({ "kind": "replay", "scenario": "bursty-8t", "policy": "dedicated" })).await;
    wait_run(&app, &id, |v| v["status"] == "running" && v["progress"].as_f64().unwrap() > 0.0).await;
    let t0 = std::time::Instant::now();
    let n = jobs.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    assert_eq!(n, 1);
    assert!(t0.elapsed() < std::time::Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(jobs.in_flight(), 0, "the replay noticed its flag and stopped");
    let (_, run) = get(&app, &format!("/api/v1/runs/{id}"), ADMIN).await;
    assert_eq!(run["status"], "interrupted", "{run}");
    assert!(run["error"].as_str().unwrap().contains("stopped"), "{run}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_sweep_is_judged_against_the_registered_slas_and_says_so(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let sweep = |app: axum::Router| async move {
        let id = start(
            &app,
            json!({ "kind": "sweep", "scenario": "smoke", "policies": ["dedicated"], "violation_targets": [0.09] }),
        )
        .await;
        let run = wait_run(&app, &id, finished).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        run
    };
    let file_sla = sweep(app.clone()).await;
    assert_eq!(file_sla["params"]["tenants"], json!([]));
    let (chat, _) = tenant(&app, "chat").await;
    set_sla(&app, &chat, 6.0).await; // a TPOT the smoke tenants cannot meet at any load
    let tight = sweep(app.clone()).await;
    let applied = tight["params"]["tenants"].as_array().unwrap();
    let a = applied.iter().find(|a| a["scenario_tenant"] == "chat").unwrap_or_else(|| panic!("{applied:?}"));
    assert_eq!(
        (a["matched_by"].as_str(), a["sla_version"].as_i64(), a["tpot_ms"].as_f64()),
        (Some("name"), Some(2), Some(6.0))
    );
    // The figures follow the SLA: the sweep's goodput can only fall under a tighter one.
    let scale = |v: &Value| v["summary"]["results"][0]["rate_scale"].as_f64().unwrap();
    assert!(scale(&tight) < scale(&file_sla), "{} vs {}", scale(&tight), scale(&file_sla));
    // And the run's start is in the audit log with what it applied.
    let (_, audit) =
        get(&app, &format!("/api/v1/audit?action=run.start&target={}", tight["id"].as_str().unwrap()), ADMIN).await;
    assert_eq!(audit["items"][0]["detail"]["tenants"][0]["tpot_ms"], 6.0, "{audit}");
}
