//! Issue 16: budgets before work, checked conversions and paths, against the real
//! router and Postgres.

use crate::common::*;
use axum::http::StatusCode;
use serde_json::{json, Value};
use sqlx::PgPool;

fn inline(cluster: &str, tenants: &str, extra: &str) -> String {
    format!("name = \"x\"\nseed = 1\nduration_s = 3600\n{extra}\n{cluster}\n{tenants}")
}

const ONE_GPU: &str = "[cluster]\n[[cluster.nodes]]\ngpu = \"A100-80GB\"\ngpus = 1\n";

fn tenant_toml(name: &str, gpu: u32, trace: &str) -> String {
    format!(
        "[[tenants]]\nname = \"{name}\"\nmodel = \"llama-2-7b\"\ngpus = [{gpu}]\n\
         sla = {{ ttft_ms = 500, tpot_ms = 60 }}\ntrace = {trace}\n"
    )
}

async fn run_with(app: &axum::Router, scenario: &str) -> (StatusCode, Value) {
    post(app, "/api/v1/runs", ADMIN, json!({ "kind": "replay", "policy": "dedicated", "scenario": scenario })).await
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_four_billion_node_cluster_is_a_422_naming_limit_and_value(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let before = snapshot(&pool).await;
    let spec = json!({ "name": "big", "nodes": [{ "gpu": "A100-80GB", "gpus": 1, "count": 4294967295u32 }] });
    let (s, v) = post(&app, "/api/v1/clusters", ADMIN, json!({ "name": "big", "spec": spec })).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(
        (v["field"].as_str(), v["limit"].as_f64(), v["value"].as_f64()),
        (Some("spec.nodes[0]"), Some(1024.0), Some(4294967295.0)),
        "{v}"
    );
    let cluster = "[cluster]\n[[cluster.nodes]]\ngpu = \"A100-80GB\"\ngpus = 1\ncount = 4294967295\n";
    let (s, v) = run_with(&app, &inline(cluster, &tenant_toml("a", 0, "{ kind = \"poisson\", rate = 1.0 }"), "")).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("scenario.cluster.nodes[0]")), "{v}");
    assert_eq!(v["limit"], 1024.0);
    assert_eq!(before, snapshot(&pool).await);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn four_tenants_at_13000_requests_a_second_are_refused_before_generation(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let cluster = "[cluster]\n[[cluster.nodes]]\ngpu = \"A100-80GB\"\ngpus = 4\n";
    let tenants: String =
        (0..4).map(|i| tenant_toml(&format!("t{i}"), i, "{ kind = \"poisson\", rate = 13000.0 }")).collect();
    let scenario = inline(cluster, &tenants, "");
    assert!(scenario.len() < 1024, "a small request: {} bytes", scenario.len());
    let (s, v) = run_with(&app, &scenario).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["field"], "scenario.tenants[0].trace", "{v}");
    assert_eq!((v["limit"].as_f64(), v["value"].as_f64()), (Some(1e6), Some(46.8e6)), "{v}");
    // Under the per-tenant limit but over the run's: named as such.
    let tenants: String =
        (0..4).map(|i| tenant_toml(&format!("t{i}"), i, "{ kind = \"poisson\", rate = 200.0 }")).collect();
    let (s, v) = run_with(&app, &inline(cluster, &tenants, "")).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("scenario.tenants")), "{v}");
    let (n,): (i64,) = sqlx::query_as("select count(*) from runs").fetch_one(&pool).await.unwrap();
    assert_eq!(n, 0);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_reserve_of_2e10_gb_is_refused_not_wrapped(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let t = tenant_toml("a", 0, "{ kind = \"poisson\", rate = 1.0 }");
    let (s, v) = run_with(&app, &inline(ONE_GPU, &t, "[memory]\nreserve_gb = 2e10\n")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains("memory.reserve_gb") && detail.contains("20000000000"), "{detail}");
    // A big but checked KV request is refused too (it would overflow bytes per token).
    let t = t.replace("trace =", "keep_kv_tokens = 18446744073709551615\ntrace =");
    let (s, v) = run_with(&app, &inline(ONE_GPU, &t, "")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("keep_kv_tokens"), "{v}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn refused_paths_get_one_answer_and_echo_nothing(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let t = tenant_toml("a", 0, "{ kind = \"poisson\", rate = 1.0 }");
    let root = repo().display().to_string();
    let readme_line3 = std::fs::read_to_string(repo().join("README.md")).unwrap().lines().nth(2).unwrap().to_string();
    std::fs::create_dir_all(repo().join(".data")).unwrap();
    let token_like = repo().join(".data/hardening-secret.toml");
    std::fs::write(&token_like, "nodes = \"s3cr3t\"\n").unwrap();
    let mut answers = Vec::new();
    for rel in [
        "../README.md",
        "../.data/hardening-secret.toml",
        "../.git/config",
        "../no-such-file.toml",
        "/etc/passwd",
        "../../../../../../etc/hostname",
        "../data/../.data/hardening-secret.toml",
    ] {
        let (s, v) = run_with(&app, &inline(&format!("cluster = \"{rel}\""), &t, "")).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{rel}: {v}");
        let detail = v["detail"].as_str().unwrap().to_string();
        assert!(!detail.contains(&root), "{rel}: a server path in `{detail}`");
        assert!(!detail.contains(&readme_line3) && !detail.contains("s3cr3t"), "{rel}: file contents in `{detail}`");
        answers.push(detail.replace(rel, "PATH"));
    }
    answers.dedup();
    assert_eq!(answers.len(), 1, "one answer for every refused path: {answers:?}");
    // A data file that does not parse: named relative to the project, no snippet.
    let (s, v) = run_with(&app, &inline("cluster = \"../data/traces/azure2023_code.csv\"", &t, "")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains("../data/traces/azure2023_code.csv") && !detail.contains(&root), "{detail}");
    let first_row = std::fs::read_to_string(repo().join("data/traces/azure2023_code.csv")).unwrap();
    let row = first_row.lines().nth(1).unwrap();
    assert!(!detail.contains(row), "{detail}");
    std::fs::remove_file(token_like).ok();
}
