//! OTLP export against a real receiver: a tiny HTTP server in the test accepts
//! OTLP/HTTP protobuf `POST /v1/traces`; `telemetry::init_with` (what `slicesched serve`
//! installs when `OTEL_EXPORTER_OTLP_ENDPOINT` is set) sends it the spans of real requests
//! and of a real replay, whose sampled scheduling decisions arrive as spans under the
//! run's span. Its own test binary: it installs the process's global subscriber.

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

/// (path, content type, body) of every request the receiver got.
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// An HTTP/1.1 server that answers every request 200 with an empty protobuf body.
fn receiver() -> (String, Received) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let got: Received = Arc::default();
    let keep = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let keep = keep.clone();
            std::thread::spawn(move || {
                let mut w = stream.try_clone().unwrap();
                let mut r = BufReader::new(stream);
                // Requests on one connection until the client closes it.
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let (mut len, mut ct) = (0usize, String::new());
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap_or((h, ""));
                        match k.to_ascii_lowercase().as_str() {
                            "content-length" => len = v.trim().parse().unwrap_or(0),
                            "content-type" => ct = v.trim().to_string(),
                            _ => {}
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    keep.lock().unwrap().push((path, ct, body));
                    let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if w.write_all(ok.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (base, got)
}

fn spans(got: &Received) -> Vec<Span> {
    let got = got.lock().unwrap();
    let mut out = Vec::new();
    for (_, ct, body) in got.iter().filter(|(p, _, _)| p == "/v1/traces") {
        assert_eq!(ct, "application/x-protobuf");
        let req = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP protobuf export request");
        for rs in req.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name").and_then(|a| a.value.clone()));
            assert!(format!("{service:?}").contains("slicesched"), "{service:?}");
            for ss in rs.scope_spans {
                out.extend(ss.spans);
            }
        }
    }
    out
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|a| a.key == key).map(|a| format!("{:?}", a.value))
}

#[test]
fn spans_of_requests_runs_and_decisions_reach_an_otlp_receiver() {
    let (base, got) = receiver();
    // Before the runtime starts, as `slicesched serve` does.
    let telemetry = slicesched_api::telemetry::init_with(Some(&base)).expect("telemetry with OTLP export");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = std::env::var("DATABASE_URL").expect("DATABASE_URL names the test server");
    let server = server.rsplit_once('/').map_or(server.as_str(), |(b, _)| b).to_string();
    let db_url = format!("{server}/slicesched_otlp_{}_{}", std::process::id(), rand_suffix());
    let run_id = rt.block_on(async {
        let pool = slicesched_api::db::connect(&db_url).await.expect("a fresh database");
        let app = slicesched_api::app(state(pool.clone()).await);
        let (s, _) = get(&app, "/api/v1/me", ADMIN).await;
        assert_eq!(s, 200);
        let (s, run) = post(
            &app,
            "/api/v1/runs",
            ADMIN,
            json!({ "kind": "replay", "scenario": "smoke", "policy": "dedicated", "rate_scale": 0.5 }),
        )
        .await;
        assert_eq!(s, 202, "{run}");
        let id = run["id"].as_str().unwrap().to_string();
        let run = wait_run(&app, &id, finished).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        pool.close().await;
        id
    });
    drop(rt);
    // Shutting down exports what is still batched.
    telemetry.shutdown();
    let all = spans(&got);
    drop_database(&server, &db_url);

    assert!(!all.is_empty(), "no span reached the receiver");
    let paths: Vec<String> = got.lock().unwrap().iter().map(|r| r.0.clone()).collect();
    assert!(paths.iter().all(|p| p == "/v1/traces" || p == "/v1/metrics"), "{paths:?}");
    assert!(paths.iter().any(|p| p == "/v1/metrics"), "the metrics are exported too: {paths:?}");
    let named = |n: &str| all.iter().filter(|s| s.name == n).collect::<Vec<_>>();
    let http = named("http");
    assert!(
        http.iter().any(|s| attr(s, "route").is_some_and(|r| r.contains("/api/v1/me"))),
        "the request's span, with its route: {http:?}"
    );
    let runs: Vec<_> =
        named("run").into_iter().filter(|s| attr(s, "run_id").is_some_and(|v| v.contains(&run_id))).collect();
    assert_eq!(runs.len(), 1, "one span for the run");
    let sched = named("scheduling");
    assert_eq!(sched.len(), 1);
    assert_eq!(sched[0].parent_span_id, runs[0].span_id, "scheduling is a child of the run");
    assert_eq!(sched[0].trace_id, runs[0].trace_id);
    let decisions = named("decision");
    assert!(!decisions.is_empty(), "sampled decisions are exported as spans");
    assert!(decisions.len() <= slicesched_api::jobs::DECISION_SPANS);
    for d in &decisions {
        assert_eq!(d.parent_span_id, sched[0].span_id, "each decision is a child of the scheduling span");
        assert_eq!(d.trace_id, runs[0].trace_id);
        for k in ["at_ns", "ready_ops", "borrowed", "rejected"] {
            assert!(attr(d, k).is_some(), "decision span without {k}");
        }
    }
}

fn rand_suffix() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos())
}

fn drop_database(server: &str, db_url: &str) {
    let name = db_url.rsplit('/').next().unwrap().to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use sqlx::Connection;
        if let Ok(mut c) = sqlx::PgConnection::connect(&format!("{server}/postgres")).await {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("drop database if exists {name} with (force)")))
                .execute(&mut c)
                .await;
        }
    });
}
