//! `slicesched load` against a real `slicesched serve` (on the Postgres DATABASE_URL
//! names) serving two tiny tenants live on the CPU executor: every request of the
//! scenario is sent and accounted for, the server saw each of them, and the comparison
//! with a replay is written.

mod common;

use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "cli-load-test-admin-token-0123456789";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// One HTTP/1.1 exchange as the admin; (status, JSON body).
fn http(port: u16, method: &str, path: &str, body: Option<Value>) -> Option<(u16, Value)> {
    let body = body.map(|b| b.to_string());
    let (status, body) = common::http(port, TOKEN, Duration::from_secs(60), method, path, body.as_deref())?;
    Some((status, serde_json::from_str(&body).unwrap_or(Value::String(body))))
}

struct Server {
    child: Child,
    base: String,
    db: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("psql")
            .args([
                &format!("{}/postgres", self.base),
                "-qc",
                &format!("drop database if exists {} with (force)", self.db),
            ])
            .output();
    }
}

fn serve(port: u16) -> Server {
    let url =
        std::env::var("DATABASE_URL").expect("DATABASE_URL must name a Postgres server (scripts/test.sh sets it)");
    let base = url.rsplit_once('/').map_or(url.as_str(), |x| x.0).to_string();
    let db = format!("slicesched_cli_load_{}", std::process::id());
    let child = Command::new(env!("CARGO_BIN_EXE_slicesched"))
        .args(["serve", "--addr", &format!("127.0.0.1:{port}"), "--no-demo"])
        .current_dir(repo())
        .env("DATABASE_URL", format!("{base}/{db}"))
        .env("SLICESCHED_ADMIN_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("slicesched serve starts");
    let server = Server { child, base, db };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(120) {
        if http(port, "GET", "/readyz", None).is_some_and(|r| r.0 == 200) {
            return server;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("slicesched serve did not get ready on port {port}");
}

/// Registers a tenant with the scenario's SLA; returns its key.
fn tenant(port: u16, name: &str, ttft_ms: f64, tpot_ms: f64) -> String {
    let body = json!({"name": name, "sla": {"ttft_ms": ttft_ms, "ttft_ms_per_1k": ttft_ms, "tpot_ms": tpot_ms}});
    let (s, v) = http(port, "POST", "/api/v1/tenants", Some(body)).unwrap();
    assert_eq!(s, 201, "{v}");
    v["api_key"].as_str().unwrap().to_string()
}

#[test]
fn load_sends_every_arrival_to_a_live_server_and_compares_with_a_replay() {
    let port = free_port();
    let _server = serve(port);
    let chat = tenant(port, "chat", 500.0, 60.0);
    let code = tenant(port, "code", 800.0, 100.0);
    // The cluster scenarios/tiny-live-2t.toml describes.
    let cluster = json!({
        "devices": "cpu:2", "policy": "dedicated",
        "tenants": [
            {"name": "chat", "model": "tiny-2l", "seed": 1, "gpus": [0]},
            {"name": "code", "model": "tiny-4l", "seed": 2, "gpus": [1]}]});
    let (s, v) = http(port, "POST", "/api/v1/live", Some(cluster)).unwrap();
    assert_eq!(s, 201, "{v}");

    let out = std::env::temp_dir().join(format!("slicesched-load-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_slicesched"))
        .args(["load", "--url", &format!("http://127.0.0.1:{port}"), "--scenario", "scenarios/tiny-live-2t.toml"])
        .args(["--keys", &format!("chat={chat},code={code}"), "--compare-replay", "--quiet", "--out"])
        .arg(&out)
        .current_dir(repo())
        .env("SLICESCHED_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("predicted (replay"), "{stdout}");

    let summary: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let load = &summary["load"];
    let n = |v: &Value| v.as_u64().unwrap();
    let sent = n(&load["sent"]);
    assert!(sent >= 20, "a few dozen requests: {load}");
    assert_eq!(n(&load["completed"]) + n(&load["failed"]), sent, "{load}");
    assert_eq!(n(&summary["requests"]), sent);
    assert_eq!(n(&summary["completed"]) + n(&summary["dropped"]), sent);
    assert!(n(&summary["completed"]) > 0, "{load}");
    assert_eq!(summary["policy"], "dedicated", "read from GET /api/v1/live");
    let per_tenant: u64 = summary["tenants"].as_array().unwrap().iter().map(|t| n(&t["requests"])).sum();
    assert_eq!(per_tenant, sent);
    let csv = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    assert_eq!(csv.lines().count() as u64, sent + 1, "a header and a row per request");
    for plot in ["throughput.svg", "latency_cdf.svg"] {
        assert!(out.join(plot).is_file(), "{plot}");
    }

    // The server saw every request it answered 200 to (the loop publishes every 50 ms).
    std::thread::sleep(Duration::from_millis(300));
    let (s, live) = http(port, "GET", "/api/v1/live", None).unwrap();
    assert_eq!(s, 200, "{live}");
    let seen: u64 = live["now"]["tenants"].as_array().unwrap().iter().map(|t| n(&t["requests"])).sum();
    assert_eq!(seen, load["http_status"]["200"].as_u64().unwrap_or(0), "{live}\n{load}");

    let compare: Value = serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    for side in ["measured", "predicted"] {
        assert_eq!(n(&compare[side]["all"]["requests"]), sent, "{compare}");
        for t in ["chat", "code"] {
            assert!(compare[side]["tenants"][t]["goodput_rps"].is_number(), "{compare}");
        }
    }
    assert!(compare["cost_model"].as_str().unwrap().contains("A100"), "{compare}");
    let _ = http(port, "DELETE", "/api/v1/live", None);
    let _ = std::fs::remove_dir_all(&out);
}
