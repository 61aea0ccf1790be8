//! Issue 20, while serving: live traffic reaches the history tables as it is served (a
//! run of kind `live`, `running`, with records, series and figures that grow, tenants'
//! statistics including it, judged against the tenant's current SLA); a policy switch
//! mid-traffic loses nothing; a hostile plugin switched in is quarantined, written back,
//! while traffic goes on under the fallback.

use super::*;

/// Registers alpha and beta, starts the cluster: (alpha's id, alpha's key, beta's key,
/// the live run's id).
async fn started(app: &axum::Router, extra: Value) -> (String, String, String, String) {
    let (ida, ka) = tenant(app, "alpha").await;
    let (_, kb) = tenant(app, "beta").await;
    let (s, v) = post(app, "/api/v1/live", ADMIN, cluster(extra)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    (ida, ka, kb, v["id"].as_str().unwrap().to_string())
}

async fn complete(c: &reqwest::Client, base: &str, key: &str, model: &str, prompt: &str, n: u32) -> Value {
    let body = json!({"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "return_token_ids": true});
    let r = c.post(format!("{base}/v1/completions")).bearer_auth(key).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// GET `path` until `until` holds (the writer flushes every second); panics after 60 s.
async fn poll(app: &axum::Router, path: &str, until: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        let (s, v) = get(app, path, ADMIN).await;
        assert_eq!(s, StatusCode::OK, "{path}: {v}");
        if until(&v) {
            return v;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{path} never got there: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn live_traffic_is_stored_while_it_is_served(pool: PgPool) {
    let (base, app) = serve(pool.clone()).await;
    let (alpha, ka, kb, id) = started(&app, json!({})).await;
    let run_path = format!("/api/v1/runs/{id}");
    let (s, run) = get(&app, &run_path, ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{run}");
    assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("live"), Some("running")), "{run}");
    let c = reqwest::Client::new();
    for (k, m) in [(&ka, "tiny-2l"), (&kb, "tiny-4l"), (&ka, "tiny-2l")] {
        complete(&c, &base, k, m, "remember me", 6).await;
    }
    // The cluster still serves; its run already holds what ended, and its figures.
    let run = poll(&app, &run_path, |r| r["summary"]["completed"] == 3).await;
    assert_eq!(run["status"], "running");
    // Once history has them, the loop forgets the requests that ended; its counts stay.
    let st = poll(&app, "/api/v1/live", |st| st["now"]["held_records"] == 0 && st["now"]["held_sequences"] == 0).await;
    let alpha_now = &st["now"]["tenants"][0];
    assert_eq!((alpha_now["requests"].as_u64(), alpha_now["completed"].as_u64()), (Some(2), Some(2)), "{st}");
    let reqs = poll(&app, &format!("{run_path}/requests"), |v| v["items"].as_array().unwrap().len() == 3).await;
    assert!(reqs["items"].as_array().unwrap().iter().all(|r| r["dropped"].is_null() && r["output_tokens"] == 6));
    let series = poll(&app, &format!("{run_path}/series"), |v| {
        v["output_tokens"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).sum::<i64>() == 18
    })
    .await;
    assert_eq!(series["gpu_busy_ns"].as_array().unwrap().len(), 2, "{series}");
    // The tenant's statistics include the live run, with its SLA in force.
    let (_, stats) = get(&app, &format!("/api/v1/tenants/{alpha}/stats"), &ka).await;
    let live: Vec<&Value> = stats["runs"].as_array().unwrap().iter().filter(|r| r["run_id"] == json!(id)).collect();
    assert_eq!(live.len(), 1, "{stats}");
    assert_eq!((live[0]["stats"]["completed"].as_u64(), live[0]["sla_version"].as_i64()), (Some(2), Some(1)));

    // A new SLA judges alpha's requests from then on: one no request can meet.
    let strict = json!({"ttft_ms": 0.001, "tpot_ms": 0.001});
    let (s, v) =
        call(&app, axum::http::Method::PUT, &format!("/api/v1/tenants/{alpha}/sla"), Some(&ka), Some(strict)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    complete(&c, &base, &ka, "tiny-2l", "judge me", 4).await;
    let reqs =
        poll(&app, &format!("{run_path}/requests?tenant=alpha"), |v| v["items"].as_array().unwrap().len() == 3).await;
    let last = reqs["items"].as_array().unwrap().iter().max_by_key(|r| r["id"].as_i64()).unwrap().clone();
    assert_eq!((last["violated"].as_bool(), last["ttft_target_ms"].as_f64()), (Some(true), Some(0.001)), "{last}");
    let (_, stats) = get(&app, &format!("/api/v1/tenants/{alpha}/stats"), &ka).await;
    let live = stats["runs"].as_array().unwrap().iter().find(|r| r["run_id"] == json!(id)).unwrap().clone();
    assert_eq!((live["sla_version"].as_i64(), live["sla_tpot_ms"].as_f64()), (Some(2), Some(0.001)), "{live}");

    // The stop completes the run: every record, nothing lost on the way.
    let (s, v) = call(&app, axum::http::Method::DELETE, "/api/v1/live", Some(ADMIN), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["history"]["records_dropped"], 0, "{v}");
    assert!(v["history"]["records_written"].as_u64().unwrap() >= 3, "{v}");
    let (_, run) = get(&app, &run_path, ADMIN).await;
    assert_eq!((run["status"].as_str(), run["summary"]["completed"].as_u64()), (Some("succeeded"), Some(4)), "{run}");
    let (n,): (i64,) = sqlx::query_as("select count(*) from run_requests where run_id = $1::uuid")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 4);
    // A live run is ended by stopping its cluster, never by cancelling the run.
    let (s, _) = post(&app, &format!("{run_path}/cancel"), ADMIN, json!({})).await;
    assert_eq!(s, StatusCode::CONFLICT);
}

/// Once alpha has a request in service (generous: the machine may be busy building).
async fn alpha_serving(app: &axum::Router) {
    poll(app, "/api/v1/live", |st| st["now"]["tenants"][0]["in_service"].as_u64() > Some(0)).await;
}

/// Alpha's and beta's greedy answers, each request on its own task, sent every 30 ms
/// until `during` has run and four more after it, so `during` always meets traffic and
/// traffic always meets what `during` changed (tiny requests finish too fast for a fixed
/// handful to outlast a poll).
async fn traffic_during(base: &str, ka: &str, kb: &str, during: impl std::future::Future<Output = ()>) -> Vec<Value> {
    let c = reqwest::Client::new();
    let done = std::sync::atomic::AtomicBool::new(false);
    let sender = async {
        let mut tasks = Vec::new();
        let mut after = 0;
        while after < 4 && tasks.len() < 300 {
            // A handful in flight at once keeps the test's load light on a busy machine;
            // answers do not depend on the batch (the CPU GEMM is batch-invariant).
            while tasks.iter().filter(|t: &&tokio::task::JoinHandle<Value>| !t.is_finished()).count() >= 6 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if done.load(std::sync::atomic::Ordering::SeqCst) {
                after += 1;
            }
            let i = tasks.len();
            let (c, base) = (c.clone(), base.to_string());
            let (k, m) = if i % 2 == 0 { (ka.to_string(), "tiny-2l") } else { (kb.to_string(), "tiny-4l") };
            tasks.push(tokio::spawn(async move { complete(&c, &base, &k, m, &format!("request {i}"), 24).await }));
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        tasks
    };
    let during = async {
        during.await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let (tasks, ()) = tokio::join!(sender, during);
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// Every answer is whole and equals the offline greedy run of its model and seed.
fn all_greedy(answers: &[Value]) {
    for (i, v) in answers.iter().enumerate() {
        let (preset, seed) = if i % 2 == 0 { ("tiny-2l", 1) } else { ("tiny-4l", 2) };
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{i}: {v}");
        assert_eq!(ids(&v["choices"][0]["token_ids"]), offline(preset, seed, &format!("request {i}"), 24), "{i}");
    }
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_policy_switch_mid_traffic_loses_nothing(pool: PgPool) {
    let (base, app) = serve(pool.clone()).await;
    // pooled and timeslice plan the same deployment (serving replicas, no device sharing).
    let (_, ka, kb, id) = started(&app, json!({"policy": "pooled"})).await;
    let switch = async {
        alpha_serving(&app).await;
        let body = json!({"policy": "timeslice"});
        let (s, v) = call(&app, axum::http::Method::PUT, "/api/v1/live/policy", Some(ADMIN), Some(body)).await;
        assert_eq!((s, v["policy"].as_str()), (StatusCode::OK, Some("timeslice")), "{v}");
    };
    let answers = traffic_during(&base, &ka, &kb, switch).await;
    all_greedy(&answers);
    let (s, v) = call(&app, axum::http::Method::DELETE, "/api/v1/live", Some(ADMIN), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let t = &v["now"]["tenants"];
    let sent = answers.len() as u64;
    assert_eq!(
        (t[0]["completed"].as_u64(), t[1]["completed"].as_u64()),
        (Some(sent.div_ceil(2)), Some(sent / 2)),
        "{v}"
    );
    assert_eq!((t[0]["dropped"].as_u64(), t[1]["dropped"].as_u64()), (Some(0), Some(0)), "{v}");
    let (n,): (i64,) = sqlx::query_as("select count(*) from audit_log where action = 'live.policy' and target = $1")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    let (_, run) = get(&app, &format!("/api/v1/runs/{id}"), ADMIN).await;
    assert_eq!(run["policies"], json!(["timeslice"]), "{run}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_hostile_plugin_switched_in_is_quarantined_while_traffic_continues(pool: PgPool) {
    let (base, app) = serve(pool.clone()).await;
    let (s, p) = send(&app, crate::plugins::upload("application/wasm", crate::plugins::hostile("panic"))).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    let plugin = p["id"].as_str().unwrap().to_string();
    let (s, v) = post(&app, &format!("/api/v1/plugins/{plugin}/activate"), ADMIN, json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, ka, kb, id) = started(&app, json!({})).await;
    let switch = async {
        alpha_serving(&app).await;
        let body = json!({"policy": "hostile"});
        let (s, v) = call(&app, axum::http::Method::PUT, "/api/v1/live/policy", Some(ADMIN), Some(body)).await;
        assert_eq!(s, StatusCode::OK, "{v}");
    };
    // It panics on every batch: the host quarantines it, every request still completes.
    let answers = traffic_during(&base, &ka, &kb, switch).await;
    all_greedy(&answers);
    let p = poll(&app, &format!("/api/v1/plugins/{plugin}"), |p| p["state"] == "quarantined").await;
    assert_eq!(p["state"], "quarantined");
    let (_, audit) = get(&app, &format!("/api/v1/audit?action=plugin.quarantine&target={plugin}"), ADMIN).await;
    let items = audit["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{audit}");
    assert_eq!(
        (items[0]["actor"].clone(), items[0]["detail"]["run_id"].clone()),
        (json!(format!("system:run:{id}")), json!(id))
    );
    assert!(items[0]["detail"]["cause"].as_str().unwrap().contains("trapped in `place`"), "{audit}");
    // Serving goes on under the fallback, and the live run says so, as a replay does.
    let st = live_status(&app).await;
    assert_eq!(st["policy"], "dedicated", "{st}");
    let run_path = format!("/api/v1/runs/{id}");
    let run = poll(&app, &run_path, |r| !r["fallback"].is_null()).await;
    let f = &run["fallback"];
    assert_eq!(
        (f["policy"].as_str(), f["plugin"].as_str(), f["quarantined"].as_bool()),
        (Some("dedicated"), Some("hostile"), Some(true)),
        "{run}"
    );
    assert!(f["cause"].as_str().unwrap().contains("trapped in `place`"), "{run}");
    let at_quarantine = f["decisions"].as_u64().unwrap();
    let (_, audit) = get(&app, &format!("/api/v1/audit?action=run.fallback&target={id}"), ADMIN).await;
    assert_eq!(audit["items"].as_array().unwrap().len(), 1, "{audit}");
    complete(&reqwest::Client::new(), &base, &ka, "tiny-2l", "after", 3).await;
    assert_eq!(call(&app, axum::http::Method::DELETE, "/api/v1/live", Some(ADMIN), None).await.0, StatusCode::OK);
    // The stop stores the decisions the fallback took after the quarantine too.
    let run = poll(&app, &run_path, |r| r["status"] == "succeeded").await;
    assert!(run["fallback"]["decisions"].as_u64().unwrap() > at_quarantine, "{run}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_live_run_samples_its_operators_with_predicted_and_measured_times(pool: PgPool) {
    let (base, app) = serve(pool.clone()).await;
    // Half of every second sampled, so the test's few requests are sure to be seen.
    let (_, ka, kb, id) = started(&app, json!({"op_sample": {"every_s": 1.0, "length_s": 0.5}})).await;
    let c = reqwest::Client::new();
    for (k, m) in [(&ka, "tiny-2l"), (&kb, "tiny-4l")] {
        complete(&c, &base, k, m, "sample me", 24).await;
    }
    // While it serves, closed samples that saw work are recorded windows of the run.
    let meta_path = format!("/api/v1/runs/{id}/timeline/meta");
    let meta = poll(&app, &meta_path, |m| m["windows"].as_array().is_some_and(|w| !w.is_empty())).await;
    let w = meta["windows"][0].clone();
    assert_eq!((w["reason"].as_str(), w["status"].as_str()), (Some("sampled"), Some("recorded")), "{meta}");
    assert!(
        w["ops"].as_i64().unwrap() > 0 && w["to_ns"].as_i64().unwrap() - w["from_ns"].as_i64().unwrap() <= 500_000_000
    );
    assert_eq!(call(&app, axum::http::Method::DELETE, "/api/v1/live", Some(ADMIN), None).await.0, StatusCode::OK);
    // Every op of a window, op by op: the cost model's prediction beside the executor's
    // measured time, and nothing outside a sample.
    let meta = poll(&app, &meta_path, |m| m["status"] == "succeeded").await;
    let windows = meta["windows"].as_array().unwrap();
    assert!(windows.iter().all(|w| w["reason"] == "sampled" && w["ops"].as_i64().unwrap() > 0), "{meta}");
    let (from, to) = (w["from_ns"].as_i64().unwrap(), w["recorded_to_ns"].as_i64().unwrap());
    let (s, tl) = get(&app, &format!("/api/v1/runs/{id}/timeline?from_ns={from}&to_ns={to}"), ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{tl}");
    assert_eq!(tl["mode"], "ops", "{tl}");
    let ops = &tl["ops"];
    let n = ops["start_ns"].as_array().unwrap().len();
    assert_eq!(n as i64, w["ops"].as_i64().unwrap(), "every op of the window");
    for i in 0..n {
        let (a, b) = (ops["start_ns"][i].as_i64().unwrap(), ops["end_ns"][i].as_i64().unwrap());
        assert!(a >= from && a < to && b > a, "op {i}: {a}..{b}");
        assert!(ops["predicted_ns"][i].as_i64().unwrap() > 0, "op {i} has a prediction");
    }
    let (stored,): (i64,) = sqlx::query_as("select count(*) from run_ops where run_id = $1::uuid")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    let in_windows: i64 = windows.iter().map(|w| w["ops"].as_i64().unwrap()).sum();
    assert!(stored >= in_windows && in_windows > 0, "{stored} stored, {in_windows} in windows");
}
