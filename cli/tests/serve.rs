//! `slicesched serve` as a real process on a real Postgres (DATABASE_URL names the
//! server): killed with SIGKILL in the middle of a run, the next process marks the run
//! `interrupted` instead of leaving it `running` forever.

mod common;

use serde_json::Value;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "cli-test-admin-token-0123456789";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One HTTP/1.1 exchange; (status, body).
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    common::http(port, TOKEN, Duration::from_secs(30), method, path, body)
}

fn serve(db_url: &str, port: u16) -> Child {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_slicesched"))
        .args(["serve", "--addr", &format!("127.0.0.1:{port}"), "--no-demo"])
        .current_dir(repo)
        .env("DATABASE_URL", db_url)
        .env("SLICESCHED_ADMIN_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("slicesched serve starts");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(120) {
        if http(port, "GET", "/readyz", None).is_some_and(|r| r.0 == 200) {
            return child;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("slicesched serve did not get ready on port {port}");
}

fn run_status(port: u16, id: &str) -> Value {
    let (s, body) = http(port, "GET", &format!("/api/v1/runs/{id}"), None).expect("the server answers");
    assert_eq!(s, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn a_killed_server_leaves_its_run_interrupted() {
    let base =
        std::env::var("DATABASE_URL").expect("DATABASE_URL must name a Postgres server (scripts/test.sh sets it)");
    let base = base.rsplit_once('/').map_or(base.as_str(), |x| x.0).to_string();
    let db = format!("slicesched_cli_restart_{}", std::process::id());
    let url = format!("{base}/{db}");
    let port = free_port();
    let mut first = serve(&url, port);
    let (s, body) =
        http(port, "POST", "/api/v1/runs", Some(r#"{"kind":"replay","scenario":"bursty-8t","policy":"slice"}"#))
            .unwrap();
    assert_eq!(s, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    let t0 = Instant::now();
    while run_status(port, &id)["status"] != "running" {
        assert!(t0.elapsed() < Duration::from_secs(60), "the run never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill().unwrap(); // SIGKILL: no shutdown code runs
    first.wait().unwrap();

    let port = free_port();
    let mut second = serve(&url, port);
    let run = run_status(port, &id);
    second.kill().unwrap();
    second.wait().unwrap();
    let _ = Command::new("psql")
        .args([&format!("{base}/postgres"), "-qc", &format!("drop database if exists {db} with (force)")])
        .output();
    assert_eq!(run["status"], "interrupted", "{run}");
    assert!(run["error"].as_str().unwrap().contains("stopped"), "{run}");
}
