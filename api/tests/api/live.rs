//! Issue 20: two tenants' tiny models served live on the CPU executor, over a real
//! socket: completions (plain and streamed) equal an offline greedy run of the same
//! model and seed; a full queue is a 429 with Retry-After; a client that goes away
//! mid-stream frees its KV at once; a tenant's key reaches its own model only; a stop
//! finishes or fails every in-flight request.

use crate::common::*;
use axum::http::StatusCode;
use serde_json::{json, Value};
use slicesched_exec::model::{ByteTokenizer, ExecModel, HostWeights};
use slicesched_exec::runner::{ExecBatch, OpPlace, Runner, SeqWork};
use slicesched_exec::{CpuBackend, CpuDeviceSpec};
use slicesched_model::ModelConfig;
use sqlx::PgPool;
use std::time::{Duration, Instant};

mod history;

pub(crate) async fn serve(pool: PgPool) -> (String, axum::Router) {
    let app = slicesched_api::app(state(pool).await);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let a = app.clone();
    tokio::spawn(async move { axum::serve(listener, a).await.unwrap() });
    (format!("http://{addr}"), app)
}

/// alpha: tiny-2l (seed 1) on device 0; beta: tiny-4l (seed 2) on device 1.
pub(crate) fn cluster(extra: Value) -> Value {
    let mut c = json!({
        "devices": "cpu:2",
        "policy": "dedicated",
        "gpu_memory_utilization": 0.001,
        "drain_s": 0.5,
        "tenants": [
            {"name": "alpha", "model": "tiny-2l", "seed": 1, "gpus": [0], "max_model_len": 4096,
             "engine": {"max_num_batched_tokens": 512}},
            {"name": "beta", "model": "tiny-4l", "seed": 2, "gpus": [1], "max_model_len": 4096,
             "engine": {"max_num_batched_tokens": 512}},
        ],
    });
    if let Value::Object(m) = extra {
        for (k, v) in m {
            if k == "alpha" {
                for (kk, vv) in v.as_object().unwrap() {
                    c["tenants"][0][kk] = vv.clone();
                }
            } else {
                c[k] = v;
            }
        }
    }
    c
}

/// Registers alpha and beta and starts the cluster; returns their keys.
pub(crate) async fn start(app: &axum::Router, extra: Value) -> (String, String) {
    let (_, ka) = tenant(app, "alpha").await;
    let (_, kb) = tenant(app, "beta").await;
    let (s, v) = post(app, "/api/v1/live", ADMIN, cluster(extra)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    (ka, kb)
}

/// Greedy tokens of an offline run: one prefill of the prompt, then decodes.
pub(crate) fn offline(preset: &str, seed: u64, prompt: &str, n: usize) -> Vec<i32> {
    let mut m = ExecModel::new(ModelConfig::preset(preset).unwrap());
    m.numerics.max_positions = 4096;
    let w = HostWeights::random(&m, seed);
    let b = CpuBackend::new(&[CpuDeviceSpec { memory_bytes: 1 << 30, cores: 1 }]);
    let mut r = Runner::new(&b);
    let t = r.load_tenant(m, &w, &[slicesched_exec::DeviceId(0)], 64).unwrap();
    let place = |_: u32, _: slicesched_model::OpKind, _: slicesched_model::Segment| OpPlace { group: 0, priority: 0 };
    let ids = ByteTokenizer::encode(prompt);
    let seq = |tokens: Vec<i32>, start_pos, prefill| ExecBatch {
        seqs: vec![SeqWork { seq: 1, tokens, start_pos, prefill, samples: true }],
    };
    let mut out = vec![r.run(t, &seq(ids.clone(), 0, true), &place, false).unwrap().tokens[0].1];
    while out.len() < n {
        let pos = ids.len() + out.len() - 1;
        out.push(r.run(t, &seq(vec![*out.last().unwrap()], pos, false), &place, false).unwrap().tokens[0].1);
    }
    out
}

/// The text the server streams: each token decoded on its own.
pub(crate) fn text_of(ids: &[i32]) -> String {
    ids.iter().map(|&t| ByteTokenizer::decode(&[t])).collect()
}

pub(crate) fn ids(v: &Value) -> Vec<i32> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap() as i32).collect()
}

/// The `data:` payloads of an SSE body read so far, and the unfinished rest.
pub(crate) fn events(buf: &mut String) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(i) = buf.find("\n\n") {
        let block: String = buf.drain(..i + 2).collect();
        for line in block.lines() {
            if let Some(d) = line.strip_prefix("data: ") {
                out.push(d.to_string());
            }
        }
    }
    out
}

pub(crate) async fn read_stream(mut resp: reqwest::Response) -> Vec<String> {
    let (mut buf, mut all) = (String::new(), Vec::new());
    while let Some(c) = resp.chunk().await.unwrap() {
        buf += &String::from_utf8_lossy(&c);
        all.extend(events(&mut buf));
    }
    all
}

pub(crate) async fn live_status(app: &axum::Router) -> Value {
    let (s, v) = get(app, "/api/v1/live", ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

/// The live status once `until` holds of alpha's figures (the loop publishes them every
/// 50 ms); panics after 10 s.
pub(crate) async fn alpha_until(app: &axum::Router, until: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        let st = live_status(app).await;
        if until(&st["now"]["tenants"][0]) {
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never got there: {st}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn two_tenants_served_live_answer_what_an_offline_greedy_run_gives(pool: PgPool) {
    let (base, app) = serve(pool).await;
    let (ka, kb) = start(&app, json!({})).await;
    let c = reqwest::Client::new();
    let body = json!({"model": "tiny-2l", "prompt": "Hello, live world", "max_tokens": 12, "temperature": 0,
                      "return_token_ids": true});
    let r = c.post(format!("{base}/v1/completions")).bearer_auth(&ka).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let want = offline("tiny-2l", 1, "Hello, live world", 12);
    assert_eq!(ids(&v["choices"][0]["token_ids"]), want);
    assert_eq!(v["choices"][0]["text"], text_of(&want));
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"], json!({"prompt_tokens": 17, "completion_tokens": 12, "total_tokens": 29}));
    assert_eq!(v["object"], "text_completion");

    // Streamed, the other tenant: a chunk per token, a last one with the reason, [DONE].
    let body = json!({"model": "tiny-4l", "prompt": "Stream me", "max_tokens": 10, "temperature": 0,
                      "stream": true, "stream_options": {"include_usage": true}, "return_token_ids": true});
    let r = c.post(format!("{base}/v1/completions")).bearer_auth(&kb).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let data = read_stream(r).await;
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let tokens: Vec<i32> = chunks
        .iter()
        .filter(|c| c["choices"][0]["finish_reason"].is_null() && !c["choices"].as_array().unwrap().is_empty())
        .flat_map(|c| ids(&c["choices"][0]["token_ids"]))
        .collect();
    assert_eq!(chunks.len(), 10 + 2, "ten token chunks, the finish chunk and the usage chunk");
    assert_eq!(tokens, offline("tiny-4l", 2, "Stream me", 10));
    assert_eq!(chunks[10]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[11]["usage"]["completion_tokens"], 10);
    let metrics = c.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "vllm:time_to_first_token_seconds_count{model_name=\"tiny-4l\",tenant=\"beta\"} 1",
        "vllm:generation_tokens_total{model_name=\"tiny-2l\",tenant=\"alpha\"} 12",
        "vllm:request_success_total{finished_reason=\"length\",model_name=\"tiny-4l\",tenant=\"beta\"} 1",
        "vllm:num_requests_running{model_name=\"tiny-2l\",tenant=\"alpha\"} 0",
        "slicesched_live_offered_load{model_name=\"tiny-4l\",tenant=\"beta\",what=\"requests\",window=\"forecast\"} ",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }

    // Chat, with the plain template and a stop sequence that cuts the text.
    let plain = "user: hi\nassistant:";
    let full = text_of(&offline("tiny-2l", 1, plain, 8));
    let stop: String = full.chars().skip(3).take(2).collect();
    let body = json!({"model": "tiny-2l", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                      "temperature": 0, "stop": [stop]});
    let r = c.post(format!("{base}/v1/chat/completions")).bearer_auth(&ka).json(&body).send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(content, &full[..full.find(&stop).unwrap()]);

    // The models a key sees, and what it may not reach.
    let m: Value = c.get(format!("{base}/v1/models")).bearer_auth(&ka).send().await.unwrap().json().await.unwrap();
    assert_eq!(m["data"].as_array().unwrap().len(), 1);
    assert_eq!(m["data"][0]["id"], "tiny-2l");
    let r = c
        .post(format!("{base}/v1/completions"))
        .bearer_auth(&ka)
        .json(&json!({"model": "tiny-4l", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    let unknown: Value = c
        .post(format!("{base}/v1/completions"))
        .bearer_auth(&ka)
        .json(&json!({"model": "no-such", "prompt": "x"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["error"]["code"], unknown["error"]["code"], "the same answer as a model that does not exist");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let r = c
        .post(format!("{base}/v1/completions"))
        .json(&json!({"model": "tiny-2l", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());

    // The context window and the KV cache are refused up front, naming the limit.
    let long = "y".repeat(5000);
    let v: Value = c
        .post(format!("{base}/v1/completions"))
        .bearer_auth(&ka)
        .json(&json!({"model": "tiny-2l", "prompt": long}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("maximum context length is 4096"), "{v}");
    let r = c
        .post(format!("{base}/v1/completions"))
        .bearer_auth(&ka)
        .json(&json!({"model": "tiny-2l", "prompt": "ab", "max_tokens": 4095}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["param"], "max_tokens");

    let st = alpha_until(&app, |a| a["completed"] == 2).await;
    let a = &st["now"]["tenants"][0];
    assert_eq!(a["kv_blocks_free"], a["kv_blocks_total"], "{st}");
    assert_eq!((a["requests"].as_u64(), a["dropped"].as_u64()), (Some(2), Some(0)));
    // The offered-load meter (0 until its first 10-s window closes): the forecast is
    // never under the average.
    let (avg, fc) = (a["offered_requests_per_s"].as_f64(), a["forecast_requests_per_s"].as_f64());
    assert!(avg.zip(fc).is_some_and(|(x, y)| x >= 0.0 && y >= x), "{st}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_full_queue_is_a_429_with_retry_after(pool: PgPool) {
    let (base, app) = serve(pool).await;
    let (ka, _) = start(&app, json!({"alpha": {"max_pending": 2}})).await;
    let c = reqwest::Client::new();
    let body = json!({"model": "tiny-2l", "prompt": "busy", "max_tokens": 200, "temperature": 0});
    let sends = (0..6).map(|_| c.post(format!("{base}/v1/completions")).bearer_auth(&ka).json(&body).send());
    let answers = futures_util::future::join_all(sends).await;
    let (mut ok, mut limited) = (0, 0);
    for r in answers {
        let r = r.unwrap();
        match r.status().as_u16() {
            200 => ok += 1,
            429 => {
                assert_eq!(r.headers()["retry-after"], "1");
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["error"]["code"], "rate_limit_exceeded");
                limited += 1;
            }
            s => panic!("unexpected {s}"),
        }
    }
    assert_eq!((ok, limited), (2, 4));
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_client_gone_mid_stream_frees_its_kv_at_once(pool: PgPool) {
    let (base, app) = serve(pool).await;
    let (ka, _) = start(&app, json!({})).await;
    let c = reqwest::Client::new();
    let body = json!({"model": "tiny-2l", "prompt": "a long answer, please", "max_tokens": 3000, "stream": true});
    let mut r = c.post(format!("{base}/v1/completions")).bearer_auth(&ka).json(&body).send().await.unwrap();
    let mut buf = String::new();
    let mut got = 0;
    while got < 3 {
        buf += &String::from_utf8_lossy(&r.chunk().await.unwrap().unwrap());
        got += events(&mut buf).len();
    }
    alpha_until(&app, |a| a["kv_blocks_free"].as_u64() < a["kv_blocks_total"].as_u64()).await;
    drop(r);
    let gone = Instant::now();
    let st = alpha_until(&app, |a| a["kv_blocks_free"] == a["kv_blocks_total"] && a["in_service"] == 0).await;
    assert!(gone.elapsed() < Duration::from_secs(5), "the KV was held {:?} after the client left", gone.elapsed());
    assert_eq!(st["now"]["tenants"][0]["dropped"], 1, "{st}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_stop_finishes_or_fails_every_request_in_flight(pool: PgPool) {
    let (base, app) = serve(pool.clone()).await;
    let (ka, kb) = start(&app, json!({})).await;
    let c = reqwest::Client::new();
    let long = |model: &str| json!({"model": model, "prompt": "never ending", "max_tokens": 3000, "stream": true});
    let mut streams = Vec::new();
    for (k, m) in [(&ka, "tiny-2l"), (&kb, "tiny-4l"), (&ka, "tiny-2l")] {
        let r = c.post(format!("{base}/v1/completions")).bearer_auth(k).json(&long(m)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        streams.push(tokio::spawn(read_stream(r)));
    }
    let short = json!({"model": "tiny-4l", "prompt": "quick", "max_tokens": 3, "temperature": 0});
    let quick = tokio::spawn(c.post(format!("{base}/v1/completions")).bearer_auth(&kb).json(&short).send());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (s, v) = call(&app, axum::http::Method::DELETE, "/api/v1/live", Some(ADMIN), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "stopped");
    let r = quick.await.unwrap().unwrap();
    assert_eq!(r.status(), 200, "a short request finishes within the drain time");
    for h in streams {
        let data = h.await.unwrap();
        assert_eq!(data.last().unwrap(), "[DONE]");
        let last: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
        assert!(last["error"]["message"].as_str().unwrap().contains("shut down"), "{last}");
    }
    let t = &v["now"]["tenants"];
    assert_eq!(t[0]["dropped"].as_u64().unwrap() + t[1]["dropped"].as_u64().unwrap(), 3, "{v}");
    assert_eq!(t[1]["completed"], 1);
    // Nothing serves any more; the start and stop are in the audit log.
    let r = c.post(format!("{base}/v1/completions")).bearer_auth(&ka).json(&short).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let (n,): (i64,) = sqlx::query_as("select count(*) from audit_log where action in ('live.start', 'live.stop')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 2);
    // What it served is a run of kind `live`, with a record per request.
    let id = v["id"].as_str().unwrap();
    let (s, run) = get(&app, &format!("/api/v1/runs/{id}"), ADMIN).await;
    assert_eq!(s, StatusCode::OK, "{run}");
    assert_eq!((run["kind"].as_str(), run["status"].as_str()), (Some("live"), Some("succeeded")));
    let (_, reqs) = get(&app, &format!("/api/v1/runs/{id}/requests"), ADMIN).await;
    let items = reqs["items"].as_array().unwrap();
    assert_eq!(items.len(), 4, "{reqs}");
    assert_eq!(items.iter().filter(|r| !r["dropped"].is_null()).count(), 3);
}

/// Every `$ref` the live routes reach (through their schemas too) names a schema the
/// document defines.
#[test]
fn every_ref_of_the_live_routes_resolves() {
    let doc = serde_json::to_value(slicesched_api::http::openapi()).unwrap();
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut todo = Vec::new();
    for p in ["/v1/completions", "/v1/chat/completions", "/v1/models", "/api/v1/live", "/api/v1/live/policy"] {
        assert!(doc["paths"][p].is_object(), "{p} is not documented");
        refs(&doc["paths"][p], &mut todo);
    }
    let mut seen = std::collections::BTreeSet::new();
    while let Some(r) = todo.pop() {
        if !seen.insert(r.clone()) {
            continue;
        }
        let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{r}"));
        let schema = &doc["components"]["schemas"][name];
        assert!(schema.is_object(), "{r} does not resolve");
        refs(schema, &mut todo);
    }
    for s in ["LiveConfig", "LiveTenant", "Completion", "ChatCompletion", "OaiError", "Prompt"] {
        assert!(seen.contains(&format!("#/components/schemas/{s}")), "{s} is not reached: {seen:?}");
    }
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn the_admin_api_refuses_what_cannot_be_served(pool: PgPool) {
    let app = slicesched_api::app(state(pool).await);
    let (s, v) = post(&app, "/api/v1/live", ADMIN, cluster(json!({}))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["field"], "tenants[0].name", "alpha is not registered yet");
    tenant(&app, "alpha").await;
    tenant(&app, "beta").await;
    for (extra, field) in [
        (json!({"devices": "cuda:0"}), "devices"),
        (json!({"policy": "no-such-policy"}), "policy"),
        (json!({"alpha": {"model": "llama-3-70b"}}), "tenants"),
        (json!({"alpha": {"model": "nope"}}), "tenants[0].model"),
        (json!({"alpha": {"max_model_len": 100000}}), "tenants[0].max_model_len"),
        (json!({"gpu_memory_utilization": 0.05}), "gpu_memory_utilization"),
    ] {
        let (s, v) = post(&app, "/api/v1/live", ADMIN, cluster(extra.clone())).await;
        assert!(s == StatusCode::UNPROCESSABLE_ENTITY, "{extra}: {s} {v}");
        assert_eq!(v["field"], field, "{extra}: {v}");
    }
    assert_eq!(get(&app, "/api/v1/live", ADMIN).await.0, StatusCode::NOT_FOUND);
    let (_, key) = tenant(&app, "gamma").await;
    assert_eq!(post(&app, "/api/v1/live", &key, cluster(json!({}))).await.0, StatusCode::FORBIDDEN);
    let (s, _) = post(&app, "/api/v1/live", ADMIN, cluster(json!({}))).await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(post(&app, "/api/v1/live", ADMIN, cluster(json!({}))).await.0, StatusCode::CONFLICT);
    let (s, v) =
        call(&app, axum::http::Method::PUT, "/api/v1/live/policy", Some(ADMIN), Some(json!({"policy": "timeslice"})))
            .await;
    assert!(s == StatusCode::OK || s == StatusCode::CONFLICT, "{s} {v}");
    assert_eq!(call(&app, axum::http::Method::DELETE, "/api/v1/live", Some(ADMIN), None).await.0, StatusCode::OK);
}
