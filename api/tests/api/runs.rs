//! Runs end to end: a replay stored whole and read back through every results route;
//! history listing and paging; cancellation; a restart in the middle of a run.

use crate::common::*;
use axum::http::StatusCode;
use serde_json::{json, Value};
use sqlx::PgPool;

async fn start(app: &axum::Router, body: Value) -> String {
    let (s, v) = post(app, "/api/v1/runs", ADMIN, body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["status"], "queued");
    v["id"].as_str().unwrap().to_string()
}

/// Reads every page of a paginated route.
async fn all_pages(app: &axum::Router, path: &str, token: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let sep = if path.contains('?') { '&' } else { '?' };
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}{sep}cursor={c}"),
            None => path.to_string(),
        };
        let (s, v) = get(app, &url, token).await;
        assert_eq!(s, StatusCode::OK, "{url}: {v}");
        items.extend(v["items"].as_array().unwrap().iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return items,
        }
    }
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_replay_is_stored_whole_and_read_back(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let ana = analyst(&app).await;
    let id = start(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" })).await;
    let run = wait_run(&app, &id, finished).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["progress"], 1.0);
    assert_eq!(run["policies"], json!(["dedicated"]));
    let summary = &run["summary"];
    assert_eq!(summary["policy"], "dedicated");
    let requests = summary["requests"].as_u64().unwrap();
    assert!(requests > 50, "{summary}");

    // Every request record, page by page, exactly once and in order.
    let recs = all_pages(&app, &format!("/api/v1/runs/{id}/requests?limit=37"), &ana).await;
    assert_eq!(recs.len() as u64, requests);
    let ids: Vec<i64> = recs.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let violated = recs.iter().filter(|r| r["violated"] == true).count();
    let expect = (summary["violation_rate"].as_f64().unwrap() * requests as f64).round() as usize;
    assert_eq!(violated, expect);
    let only = all_pages(&app, &format!("/api/v1/runs/{id}/requests?violated=true&limit=1000"), &ana).await;
    assert_eq!(only.len(), violated);
    for t in summary["tenants"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let mine = all_pages(&app, &format!("/api/v1/runs/{id}/requests?tenant={name}&limit=1000"), &ana).await;
        assert_eq!(mine.len() as u64, t["requests"].as_u64().unwrap(), "{name}");
        assert!(mine.iter().all(|r| r["tenant"] == name));
    }

    // The whole run's latency distributions, computed in SQL when the run was stored, agree
    // with the records themselves: counts per bin and percentile_cont's percentiles.
    let (kept,): (i64,) = sqlx::query_as("select count(*) from run_latency where run_id = $1 and tenant = ''")
        .bind(uuid::Uuid::parse_str(&id).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 1, "computed in the run's own transaction");
    let (s, lat) = get(&app, &format!("/api/v1/runs/{id}/latency"), &ana).await;
    assert_eq!(s, StatusCode::OK, "{lat}");
    assert_eq!(lat["requests"].as_u64().unwrap(), requests);
    assert!(lat["tenant"].is_null());
    // Completed requests only, as the summary's percentiles count them.
    let ms = |r: &Value, k: &str| r[k].as_f64().filter(|v| *v > 0.0 && r["finish_ns"].is_i64());
    let e2e =
        |r: &Value| Some((r["finish_ns"].as_i64()? - r["arrival_ns"].as_i64()?) as f64 / 1e6).filter(|v| *v > 0.0);
    let columns: [(&str, Vec<f64>); 3] = [
        ("ttft_ms", recs.iter().filter_map(|r| ms(r, "ttft_ms")).collect()),
        ("tpot_ms", recs.iter().filter_map(|r| ms(r, "tpot_ms")).collect()),
        ("e2e_ms", recs.iter().filter_map(e2e).collect()),
    ];
    for (name, key) in [("ttft_ms", "ttft_p99_ms"), ("tpot_ms", "tpot_p99_ms")] {
        let card = summary[key].as_f64().unwrap();
        assert!(
            (lat[name]["p99_ms"].as_f64().unwrap() - card).abs() < 1e-9,
            "{name}: the summary's p99 is the histogram's"
        );
    }
    for (name, mut v) in columns {
        let h = &lat[name];
        assert_eq!(h["count"].as_u64().unwrap(), v.len() as u64, "{name}");
        assert!(!v.is_empty(), "{name}");
        v.sort_by(f64::total_cmp);
        let edges: Vec<f64> = h["edges_ms"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let counts: Vec<u64> = h["counts"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(edges.len(), counts.len() + 1, "{name}");
        assert_eq!(counts.iter().sum::<u64>(), v.len() as u64, "{name}: every request in a bin");
        assert!(edges.windows(2).all(|w| (w[1] / w[0] - 10f64.powf(0.1)).abs() < 1e-9), "{name}: log-spaced");
        assert!(edges[0] <= v[0] && v[v.len() - 1] < edges[edges.len() - 1], "{name}: the bins span the values");
        for (i, c) in counts.iter().enumerate() {
            let inside =
                v.iter().filter(|x| **x >= edges[i] * (1.0 - 1e-12) && **x < edges[i + 1] * (1.0 - 1e-12)).count();
            assert!((inside as i64 - *c as i64).abs() <= 1, "{name} bin {i}: {inside} against {c}");
        }
        // Nearest rank (percentile_disc), the summary's definition: one p99 per figure.
        for (p, key) in [(0.5, "p50_ms"), (0.9, "p90_ms"), (0.99, "p99_ms")] {
            let want = v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
            let got = h[key].as_f64().unwrap();
            assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "{name} {key}: {got} against {want}");
        }
        assert_eq!(h["min_ms"].as_f64().unwrap(), v[0]);
        assert_eq!(h["max_ms"].as_f64().unwrap(), v[v.len() - 1]);
    }
    for t in summary["tenants"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let (s, l) = get(&app, &format!("/api/v1/runs/{id}/latency?tenant={name}"), &ana).await;
        assert_eq!(s, StatusCode::OK, "{l}");
        assert_eq!(l["tenant"], name);
        assert_eq!(l["requests"].as_u64().unwrap(), t["requests"].as_u64().unwrap(), "{name}");
    }
    let (_, none) = get(&app, &format!("/api/v1/runs/{id}/latency?tenant=nobody"), &ana).await;
    assert_eq!((none["requests"].as_i64(), none["ttft_ms"]["count"].as_i64()), (Some(0), Some(0)));
    assert!(none["ttft_ms"]["p50_ms"].is_null() && none["ttft_ms"]["counts"] == json!([]));
    let (kept,): (i64,) = sqlx::query_as("select count(*) from run_latency where run_id = $1")
        .bind(uuid::Uuid::parse_str(&id).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 1 + summary["tenants"].as_array().unwrap().len() as i64, "an unknown tenant is not kept");
    // Kept answers are the computed ones, read back.
    let (_, again) = get(&app, &format!("/api/v1/runs/{id}/latency"), &ana).await;
    assert_eq!(again, lat);

    let (s, series) = get(&app, &format!("/api/v1/runs/{id}/series"), &ana).await;
    assert_eq!(s, StatusCode::OK);
    let completed: i64 = series["completed"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).sum();
    assert_eq!(completed as u64, summary["completed"].as_u64().unwrap());
    assert_eq!(series["gpu_busy_ns"].as_array().unwrap().len(), 2);

    let (_, gpus) = get(&app, &format!("/api/v1/runs/{id}/gpus"), &ana).await;
    let gpus = gpus["items"].as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    for g in gpus {
        let f = g["busy_fraction"].as_f64().unwrap();
        assert!(f > 0.0 && f < 1.0, "{g}");
        assert_eq!(
            g["histogram"]["count"].as_array().unwrap().len(),
            g["histogram"]["upper_edge_ms"].as_array().unwrap().len()
        );
    }

    let (_, meta) = get(&app, &format!("/api/v1/runs/{id}/timeline/meta"), &ana).await;
    assert_eq!(meta["gpus"], json!([0, 1]));
    assert_eq!(meta["tenants"], json!(["chat", "code"]));
    let ops = meta["ops"].as_i64().unwrap();
    // The recorded start window: every op of the run's first ops, one by one.
    let start = meta["windows"].as_array().unwrap().iter().find(|w| w["reason"] == "start").unwrap().clone();
    let (from, to) = (start["from_ns"].as_i64().unwrap(), start["recorded_to_ns"].as_i64().unwrap());
    assert!(ops > 10_000 && to > from, "{meta}");
    // A narrow window comes back op by op, every op overlapping it, on the GPUs asked:
    // 50 ms from a stretch of the start window where GPU 1 was busy (its buckets say).
    let (_, b) =
        get(&app, &format!("/api/v1/runs/{id}/timeline?from_ns={from}&to_ns={to}&gpus=1&max_ops=1"), &ana).await;
    assert_eq!(b["mode"], "buckets", "{b}");
    let busy = b["buckets"]["busy_ns"].as_array().unwrap().iter().position(|x| x.as_i64().unwrap() > 0).unwrap();
    let t0 = b["buckets"]["t0_ns"][busy].as_i64().unwrap().max(from);
    let w = (t0, (t0 + 50_000_000).min(to));
    let (s, tl) = get(&app, &format!("/api/v1/runs/{id}/timeline?from_ns={}&to_ns={}&gpus=1", w.0, w.1), &ana).await;
    assert_eq!(s, StatusCode::OK, "{tl}");
    assert_eq!(tl["mode"], "ops");
    let starts = tl["ops"]["start_ns"].as_array().unwrap();
    assert!(!starts.is_empty());
    for (i, st) in starts.iter().enumerate() {
        assert!(st.as_i64().unwrap() < w.1 && tl["ops"]["end_ns"][i].as_i64().unwrap() > w.0);
        assert_eq!(tl["ops"]["gpu"][i], 1);
        assert!(tl["ops"]["kind"][i].is_string());
    }
    // The whole run (the default window) with a small budget: buckets whose busy time
    // adds up per tenant, and to every GPU's busy time.
    let (_, tl) = get(&app, &format!("/api/v1/runs/{id}/timeline?max_ops=1000"), &ana).await;
    assert_eq!(tl["mode"], "buckets", "{}", tl["mode"]);
    let b = &tl["buckets"];
    let n = b["t0_ns"].as_array().unwrap().len();
    assert!(n > 100 && n <= 2 * 2000 + 2, "{n} buckets");
    let mut total = 0;
    for i in 0..n {
        let per: i64 = b["tenant_busy_ns"][i].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).sum();
        assert_eq!(per, b["busy_ns"][i].as_i64().unwrap());
        total += per;
    }
    let busy: f64 = summary["gpus"].as_array().unwrap().iter().map(|g| g["busy_s"].as_f64().unwrap()).sum();
    assert!((total as f64 / 1e9 - busy).abs() < 1e-6, "bucketed busy time {total} ns is the GPUs' {busy} s");
    let (s, v) = get(&app, &format!("/api/v1/runs/{id}/timeline?max_ops=0"), &ana).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::BAD_REQUEST, Some("max_ops")));
    let (s, v) = get(&app, &format!("/api/v1/runs/{id}/timeline?gpus=7"), &ana).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::BAD_REQUEST, Some("gpus")));
    let decisions = all_pages(&app, &format!("/api/v1/runs/{id}/decisions?limit=1000"), &ana).await;
    let calls = summary["scheduling"]["decisions"].as_u64().unwrap();
    assert!(!decisions.is_empty() && decisions.len() as u64 <= calls / 16 + 1, "{} of {calls}", decisions.len());

    // The history lists it; a tenant registered after it ran does not own it (its
    // statistics list only runs attributed to it when they started: tests/api/truth.rs).
    let (_, list) = get(&app, "/api/v1/runs?policy=dedicated&status=succeeded", &ana).await;
    assert_eq!(list["items"][0]["id"], json!(id));
    let (tid, key) = tenant(&app, "chat").await;
    let (_, stats) = get(&app, &format!("/api/v1/tenants/{tid}/stats"), &key).await;
    assert_eq!(stats["runs"], json!([]));
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn history_pages_and_filters(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    for i in 0..7 {
        let policy = if i % 2 == 0 { "dedicated" } else { "slice" };
        let status = if i < 5 { "succeeded" } else { "failed" };
        sqlx::query(
            "insert into runs (id, kind, scenario, scenario_toml, policies, status, created_by, created_at) \
             values (gen_random_uuid(), 'replay', $1, '', $2, $3, 'test', now() - make_interval(mins => $4))",
        )
        .bind(if i < 3 { "smoke" } else { "bursty-8t" })
        .bind(vec![policy])
        .bind(status)
        .bind(i)
        .execute(&pool)
        .await
        .unwrap();
    }
    for i in 0..2 {
        sqlx::query(
            "insert into runs (id, kind, scenario, scenario_toml, policies, status, created_by, created_at) \
             values (gen_random_uuid(), 'sweep', 'smoke', '', '{dedicated,slice}', 'succeeded', 'test', \
             now() - make_interval(mins => $1))",
        )
        .bind(100 + i)
        .execute(&pool)
        .await
        .unwrap();
    }
    let sweeps = all_pages(&app, "/api/v1/runs?kind=sweep&limit=1", ADMIN).await;
    assert_eq!(sweeps.len(), 2);
    assert!(sweeps.iter().all(|r| r["kind"] == "sweep"));
    assert_eq!(all_pages(&app, "/api/v1/runs?kind=replay&scenario=smoke", ADMIN).await.len(), 3);
    assert_eq!(all_pages(&app, "/api/v1/runs?kind=sweep&policy=slice&status=succeeded", ADMIN).await.len(), 2);
    let (s, v) = get(&app, "/api/v1/runs?kind=teleport", ADMIN).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::BAD_REQUEST, Some("kind")), "{v}");
    sqlx::query("delete from runs where kind = 'sweep'").execute(&pool).await.unwrap();
    let all = all_pages(&app, "/api/v1/runs?limit=3", ADMIN).await;
    assert_eq!(all.len(), 7);
    let times: Vec<&str> = all.iter().map(|r| r["created_at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] > w[1]), "{times:?}");
    assert_eq!(all_pages(&app, "/api/v1/runs?limit=2&policy=slice", ADMIN).await.len(), 3);
    assert_eq!(all_pages(&app, "/api/v1/runs?status=failed", ADMIN).await.len(), 2);
    assert_eq!(all_pages(&app, "/api/v1/runs?scenario=smoke&policy=dedicated", ADMIN).await.len(), 2);
    let since =
        (chrono::Utc::now() - chrono::Duration::seconds(150)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(all_pages(&app, &format!("/api/v1/runs?since={since}"), ADMIN).await.len(), 3);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn queued_runs_cancel_and_ended_ones_refuse(pool: PgPool) {
    // One run at a time: the second waits in the queue.
    let app = slicesched_api::app(state(pool.clone()).await);
    let first = start(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" })).await;
    let second = start(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "slice" })).await;
    let (s, v) = post(&app, &format!("/api/v1/runs/{second}/cancel"), ADMIN, json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let second = wait_run(&app, &second, finished).await;
    assert_eq!(second["status"], "cancelled");
    let first = wait_run(&app, &first, finished).await;
    assert_eq!(first["status"], "succeeded");
    let id = first["id"].as_str().unwrap();
    let (s, v) = post(&app, &format!("/api/v1/runs/{id}/cancel"), ADMIN, json!({})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["field"], "status");
    let (n,): (i64,) = sqlx::query_as("select count(*) from run_requests where run_id = $1")
        .bind(uuid::Uuid::parse_str(second["id"].as_str().unwrap()).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_running_run_cancels_and_keeps_nothing(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let id = start(&app, json!({ "kind": "replay", "scenario": "bursty-8t", "policy": "slice" })).await;
    wait_run(&app, &id, |v| v["status"] == "running").await;
    let (s, v) = post(&app, &format!("/api/v1/runs/{id}/cancel"), ADMIN, json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let run = wait_run(&app, &id, finished).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    assert!(run["summary"].is_null());
    let (n,): (i64,) = sqlx::query_as("select count(*) from run_ops where run_id = $1")
        .bind(uuid::Uuid::parse_str(&id).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_restart_in_the_middle_of_a_run_marks_it_interrupted(pool: PgPool) {
    // The first process: a run gets going.
    let before = state(pool.clone()).await;
    let app = slicesched_api::app(before.clone());
    let id = start(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "slice", "rate_scale": 2.0 })).await;
    let queued = start(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated" })).await;
    wait_run(&app, &id, |v| v["status"] == "running").await;
    // A second process starts on the same database while the first one's run is in
    // flight, as after a crash: the run can never finish there, so it is interrupted.
    let after = state(pool.clone()).await;
    assert_eq!(after.jobs.recover().await.unwrap(), 1);
    let app2 = slicesched_api::app(after);
    let (_, v) = get(&app2, &format!("/api/v1/runs/{id}"), ADMIN).await;
    assert_eq!(v["status"], "interrupted", "{v}");
    assert!(v["finished_at"].is_string() && v["error"].is_string());
    // The old process's replay finishing later changes nothing: its results are not kept.
    for _ in 0..2400 {
        if before.jobs.in_flight() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(before.jobs.in_flight(), 0);
    // The queued run was queued again by the new process (and run by one of them).
    assert_eq!(wait_run(&app2, &queued, finished).await["status"], "succeeded");
    let (_, v) = get(&app2, &format!("/api/v1/runs/{id}"), ADMIN).await;
    assert_eq!(v["status"], "interrupted");
    let (n,): (i64,) = sqlx::query_as("select count(*) from run_requests where run_id = $1")
        .bind(uuid::Uuid::parse_str(&id).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "an interrupted run keeps no half-written results");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_run_replays_with_the_modes_it_asked_for_and_records_them(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let body = json!({ "kind": "replay", "scenario": "smoke", "policy": "slice", "kv_migration": "load",
                       "replan": "online", "plan": "serving-only" });
    let id = start(&app, body).await;
    let run = wait_run(&app, &id, finished).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["params"]["core"]["kv_migration"], "load");
    assert_eq!(run["params"]["core"]["replan"], "online");
    // A plan fixed by the request: no what-if, so the summary names none.
    assert_eq!(run["params"]["core"]["plan"], "serving-only");
    assert!(run["summary"].get("plan").is_none(), "{}", run["summary"]["plan"]);
    assert_eq!(run["summary"]["scheduling"]["replan"], "online", "{}", run["summary"]["scheduling"]);
    // Unasked, a run records the defaults.
    let plain = start(&app, json!({ "kind": "replay", "scenario": "smoke", "policy": "slice" })).await;
    let plain = wait_run(&app, &plain, finished).await;
    assert_eq!(
        (plain["params"]["core"]["kv_migration"].as_str(), plain["params"]["core"]["replan"].as_str()),
        (Some("off"), Some("static"))
    );
    assert_eq!(plain["summary"]["scheduling"]["replan"], "static");
    // The plan: the what-if's, and where it had candidates, the kept one is the best of them.
    assert_eq!(plain["params"]["core"]["plan"], "whatif");
    if let Some(p) = plain["summary"].get("plan") {
        let rates: Vec<f64> =
            p["candidates"].as_array().unwrap().iter().map(|c| c["violation_rate"].as_f64().unwrap()).collect();
        let kept = p["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["order"] == p["chosen"])
            .expect("kept is a candidate");
        assert!(rates.iter().all(|&r| r >= kept["violation_rate"].as_f64().unwrap()), "{p}");
    }
    // A mode the core does not know is refused, naming the field and the modes it knows.
    for (field, bad) in [("kv_migration", "sometimes"), ("replan", "weekly"), ("plan", "best")] {
        let mut b = json!({ "kind": "replay", "scenario": "smoke", "policy": "slice" });
        b[field] = json!(bad);
        let (s, v) = post(&app, "/api/v1/runs", ADMIN, b).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(v.to_string().contains(field) && v.to_string().contains("known:"), "{v}");
    }
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_sweep_of_several_draws_counts_the_requests_of_every_draw(pool: PgPool) {
    let app = slicesched_api::app(state(pool).await);
    let id = start(
        &app,
        json!({ "kind": "sweep", "scenario": "smoke", "policies": ["dedicated"], "violation_targets": [0.09], "seeds": 2 }),
    )
    .await;
    let run = wait_run(&app, &id, finished).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["params"]["seeds"], 2, "{}", run["params"]);
    let rep = &run["summary"];
    let smoke = std::fs::read_to_string(repo().join("scenarios/smoke.toml")).unwrap();
    let file_seed: u64 = 7;
    assert!(smoke.contains(&format!("\nseed = {file_seed}\n")));
    let second = slicesched_sim::draw_seed(file_seed, 1);
    assert_eq!(rep["seeds"], json!([file_seed, second]), "{rep}");

    // A point is the two draws' requests together: replay each draw (the second as an
    // inline scenario naming its seed) at the point's scale and pool them by hand.
    let point = &rep["points"].as_array().unwrap()[0];
    let scale = point["rate_scale"].as_f64().unwrap();
    let mut requests = 0.0;
    let mut violating = 0.0;
    let mut inline_second = Value::Null;
    for seed in [file_seed, second] {
        let text = smoke.replace(&format!("\nseed = {file_seed}\n"), &format!("\nseed = {seed}\n"));
        let rid =
            start(&app, json!({ "kind": "replay", "scenario": text, "policy": "dedicated", "rate_scale": scale }))
                .await;
        let r = wait_run(&app, &rid, finished).await;
        assert_eq!(r["status"], "succeeded", "{r}");
        let n = r["summary"]["requests"].as_f64().unwrap();
        requests += n;
        violating += n * r["summary"]["violation_rate"].as_f64().unwrap();
        inline_second = r["summary"].clone();
    }
    let pooled = violating / requests;
    let got = point["violation_rate"].as_f64().unwrap();
    assert!((got - pooled).abs() <= 1e-12, "point {got}, two draws pooled {pooled}");

    // A replay of draw 1 of the shipped scenario is that second draw, and says so.
    let rid = start(
        &app,
        json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated", "rate_scale": scale, "draw": 1 }),
    )
    .await;
    let r = wait_run(&app, &rid, finished).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!((r["params"]["seed"].as_u64(), r["params"]["draw"].as_u64()), (Some(file_seed), Some(1)));
    for k in ["seed", "requests", "violation_rate", "output_tokens_per_s", "ttft_p99_ms", "op_events"] {
        assert_eq!(r["summary"][k], inline_second[k], "{k}");
    }

    // Draws are a sweep's: a replay takes none, and a sweep from 1 to 8.
    for (body, field) in [
        (json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated", "seeds": 2 }), "seeds"),
        (json!({ "kind": "sweep", "scenario": "smoke", "policies": ["dedicated"], "seeds": 0 }), "seeds"),
        (json!({ "kind": "sweep", "scenario": "smoke", "policies": ["dedicated"], "seeds": 9 }), "seeds"),
        (json!({ "kind": "sweep", "scenario": "smoke", "policies": ["dedicated"], "draw": 1 }), "draw"),
        (json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated", "draw": 1_000_001 }), "draw"),
    ] {
        let (s, v) = post(&app, "/api/v1/runs", ADMIN, body.clone()).await;
        assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some(field)), "{body}: {v}");
    }
}
