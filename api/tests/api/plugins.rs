//! A real policy component (the template plugin, built by `scripts/test.sh` into
//! `target/plugins/`) uploads once, inactive; a trial replays it; once an admin activates
//! it, it runs a replay by name, and it stops being offered once disabled.

use crate::common::*;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::json;
use sqlx::PgPool;

fn component(name: &str) -> Vec<u8> {
    let path = repo().join(format!("target/plugins/{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (build the shipped plugins first: scripts/test.sh does)", path.display()))
}

pub(crate) fn upload(ct: &str, body: Vec<u8>) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri("/api/v1/plugins")
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .header(header::CONTENT_TYPE, ct)
        .body(Body::from(body))
        .unwrap()
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_valid_component_uploads_once_runs_and_disables(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let bytes = component("template");
    let (s, p) = send(&app, upload("application/wasm", bytes.clone())).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    assert_eq!(p["name"], "template");
    assert_eq!(p["state"], "inactive", "an upload waits for an admin");
    assert_eq!(p["builtin"], false);
    assert_eq!(p["size_bytes"], bytes.len() as u64);
    assert_eq!(p["sha256_hex"], hex_sha256(&bytes));
    // The same bytes again, raw or in a form: a conflict, nothing stored twice.
    let (s, v) = send(&app, upload("application/wasm", bytes.clone())).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::CONFLICT, Some("bytes")));
    let mut form = b"--XX\r\nContent-Disposition: form-data; name=\"component\"; filename=\"t.wasm\"\r\n\r\n".to_vec();
    form.extend_from_slice(&bytes);
    form.extend_from_slice(b"\r\n--XX--\r\n");
    let (s, _) = send(&app, upload("multipart/form-data; boundary=XX", form)).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (n,): (i64,) =
        sqlx::query_as("select count(*) from plugins where name = 'template'").fetch_one(&pool).await.unwrap();
    assert_eq!(n, 1);

    let id = p["id"].as_str().unwrap();
    // Inactive: no run may name it, and the policy list does not offer it...
    let replay = json!({ "kind": "replay", "scenario": "smoke", "policy": "template" });
    let (s, v) = post(&app, "/api/v1/runs", ADMIN, replay.clone()).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("policy")), "{v}");
    // ...but an admin may try it out: a trial replays exactly this component.
    let ana = analyst(&app).await;
    let (s, v) = post(&app, &format!("/api/v1/plugins/{id}/trial"), &ana, json!({ "scenario": "smoke" })).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, v) = post(&app, &format!("/api/v1/plugins/{id}/trial"), ADMIN, json!({ "scenario": "nowhere" })).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("scenario")), "{v}");
    let (s, v) =
        post(&app, &format!("/api/v1/plugins/{id}/trial"), ADMIN, json!({ "scenario": "smoke", "rate_scale": 0 }))
            .await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("rate_scale")), "{v}");
    let (s, trial) = post(&app, &format!("/api/v1/plugins/{id}/trial"), ADMIN, json!({ "scenario": "smoke" })).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{trial}");
    assert_eq!(trial["policies"], json!([format!("plugin:{id}")]));
    let trial = wait_run(&app, trial["id"].as_str().unwrap(), finished).await;
    assert_eq!(trial["status"], "succeeded", "{trial}");
    // It is listed under the component's own name, as a trial of exactly those bytes.
    let resolved = &trial["params"]["policies"][0];
    assert_eq!(
        (resolved["name"].as_str(), resolved["trial"].as_bool(), resolved["sha256"].as_str()),
        (Some("template"), Some(true), p["sha256_hex"].as_str()),
        "{resolved}"
    );
    let (_, trials) = get(&app, &format!("/api/v1/runs?policy=plugin:{id}"), &ana).await;
    assert_eq!(trials["items"][0]["id"], trial["id"]);
    let (_, still) = get(&app, &format!("/api/v1/plugins/{id}"), ADMIN).await;
    assert_eq!(still["state"], "inactive", "a trial activates nothing");
    // Activated by an admin (an analyst may not), recorded, and from then on runnable by name.
    let (s, _) = post(&app, &format!("/api/v1/plugins/{id}/activate"), &ana, json!({})).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = post(&app, &format!("/api/v1/plugins/{id}/activate"), ADMIN, json!({})).await;
    assert_eq!((s, v["state"].as_str()), (StatusCode::OK, Some("active")), "{v}");
    let (_, audit) = get(&app, &format!("/api/v1/audit?action=plugin.active&target={id}"), ADMIN).await;
    assert_eq!(audit["items"].as_array().unwrap().len(), 1, "{audit}");
    let (s, run) = post(&app, "/api/v1/runs", ADMIN, replay).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{run}");
    let run = wait_run(&app, run["id"].as_str().unwrap(), finished).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["summary"]["oom_events"], 0);
    // The trial ran the same component on the same scenario: the same figures.
    assert_eq!(run["summary"]["violation_rate"], trial["summary"]["violation_rate"]);
    assert_eq!(run["summary"]["output_tokens_per_s"], trial["summary"]["output_tokens_per_s"]);

    let (s, v) = post(&app, &format!("/api/v1/plugins/{id}/disable"), ADMIN, json!({})).await;
    assert_eq!((s, v["state"].as_str()), (StatusCode::OK, Some("disabled")));
    let (s, v) =
        post(&app, "/api/v1/runs", ADMIN, json!({ "kind": "replay", "scenario": "smoke", "policy": "template" })).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("policy")), "{v}");
}

fn hex_sha256(b: &[u8]) -> String {
    slicesched_api::auth::sha256_bytes(b).iter().map(|x| format!("{x:02x}")).collect()
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn the_shipped_components_are_registered_at_start_up(pool: PgPool) {
    let mut c = config();
    c.plugins_dir = repo().join("target/plugins");
    let _ = component("slice"); // fails clearly when the plugins were not built
    let app = slicesched_api::app(state_with(pool.clone(), c.clone()).await);
    // Registering again (a restart) adds nothing.
    slicesched_api::server::register_shipped(&state_with(pool, c).await).await.unwrap();
    let (_, list) = get(&app, "/api/v1/plugins", ADMIN).await;
    let items = list["items"].as_array().unwrap();
    for name in ["dedicated", "timeslice", "mps", "pooled", "slice"] {
        let of: Vec<_> = items.iter().filter(|p| p["name"] == name).collect();
        assert_eq!(of.len(), 2, "{name}: the component and the native build: {of:?}");
        assert!(of.iter().any(|p| p["builtin"] == false && p["size_bytes"].as_i64().unwrap() > 1000));
    }
    assert!(!items.iter().any(|p| p["name"] == "template"), "only the shipped policies are registered");
}

/// `bytes` with one more custom section: the same component (name, version, exports)
/// as another build of it would be, with other bytes.
fn rebuilt(bytes: &[u8], mark: &str) -> Vec<u8> {
    let name = b"slicesched-test-build";
    let payload = [&[name.len() as u8][..], name, mark.as_bytes()].concat();
    assert!(payload.len() < 128, "one LEB128 byte of size");
    [bytes, &[0u8, payload.len() as u8][..], &payload].concat()
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_new_build_of_a_shipped_component_is_what_runs_get(pool: PgPool) {
    let dir = std::env::temp_dir().join(format!("slicesched-shipped-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = config();
    c.plugins_dir = dir.clone();
    let original = component("slice");
    std::fs::write(dir.join("slice.wasm"), &original).unwrap();
    let st = state_with(pool.clone(), c.clone()).await;
    let app = slicesched_api::app(st);
    let resolve = || slicesched_api::jobs::params::resolve_policy(&pool, "slice");
    let first = resolve().await.unwrap().expect("slice resolves");
    assert_eq!((first.kind.as_str(), first.sha256.as_str()), ("wasm", hex_sha256(&original).as_str()));

    // An upgrade: same crate version, other bytes.
    let second = rebuilt(&original, "2");
    std::fs::write(dir.join("slice.wasm"), &second).unwrap();
    slicesched_api::server::register_shipped(&state_with(pool.clone(), c.clone()).await).await.unwrap();
    let now = resolve().await.unwrap().unwrap();
    assert_eq!(now.sha256, hex_sha256(&second), "runs get the new build");
    assert_eq!(now.version, format!("{}+{}", first.version, &now.sha256[..12]));
    assert_ne!(now.plugin_id, first.plugin_id);
    // Restarting on the same build adds nothing.
    slicesched_api::server::register_shipped(&state_with(pool.clone(), c.clone()).await).await.unwrap();
    let (_, list) = get(&app, "/api/v1/plugins", ADMIN).await;
    let slices = list["items"].as_array().unwrap().iter().filter(|p| p["name"] == "slice").count();
    assert_eq!(slices, 3, "the native build and two component builds: {list}");

    // An admin's `disable` outlives the next build.
    let (s, _) = post(&app, &format!("/api/v1/plugins/{}/disable", now.plugin_id), ADMIN, json!({})).await;
    assert_eq!(s, StatusCode::OK);
    let third = rebuilt(&original, "3");
    std::fs::write(dir.join("slice.wasm"), &third).unwrap();
    slicesched_api::server::register_shipped(&state_with(pool.clone(), c).await).await.unwrap();
    let (state,): (String,) = sqlx::query_as("select state from plugins where sha256_hex = $1")
        .bind(hex_sha256(&third))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(state, "disabled");
    let later = resolve().await.unwrap().unwrap();
    assert_eq!(later.plugin_id, first.plugin_id, "the newest active build of the name: {}", later.version);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The hostile plugin of the host's tests, built with one misbehaviour (once per target dir).
pub(crate) fn hostile(feature: &str) -> Vec<u8> {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let out = repo().join(format!("target/plugins/hostile/{feature}.wasm"));
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        slicesched_plugin_host::toolchain::build(
            &repo().join("plugins/hostile"),
            &out,
            &repo().join("target/wasm"),
            &[feature],
        )
        .unwrap_or_else(|e| panic!("building the hostile plugin `{feature}`: {e}"));
    }
    std::fs::read(out).unwrap()
}

/// Uploads the hostile plugin built with `feature`, activates it and replays smoke under
/// it to the end: (plugin id, the finished run).
async fn activated_hostile_replay(app: &axum::Router, feature: &str) -> (String, serde_json::Value) {
    let (s, p) = send(app, upload("application/wasm", hostile(feature))).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    assert_eq!((p["name"].as_str(), p["state"].as_str()), (Some("hostile"), Some("inactive")));
    let id = p["id"].as_str().unwrap().to_string();
    let (s, v) = post(app, &format!("/api/v1/plugins/{id}/activate"), ADMIN, json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, run) =
        post(app, "/api/v1/runs", ADMIN, json!({ "kind": "replay", "scenario": "smoke", "policy": "hostile" })).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{run}");
    let run = wait_run(app, run["id"].as_str().unwrap(), finished).await;
    (id, run)
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_plugin_the_host_quarantines_during_a_run_is_marked_quarantined(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    // It describes itself fine, so the upload is accepted; it panics on every batch.
    let (id, run) = activated_hostile_replay(&app, "panic").await;
    let run_id = run["id"].as_str().unwrap().to_string();
    // The run completes under the fallback, nothing lost...
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["summary"]["completed"], run["summary"]["requests"]);
    // ...and says it ran under the fallback, with how many decisions that took.
    let f = &run["fallback"];
    assert_eq!(
        (f["quarantined"].as_bool(), f["policy"].as_str(), f["plugin"].as_str()),
        (Some(true), Some("dedicated"), Some("hostile")),
        "{run}"
    );
    assert!(f["decisions"].as_u64().unwrap() > 0 && f["failures"] == 3, "{f}");
    assert_eq!(run["params"]["policies"][0]["kind"], "wasm");
    let (_, list) = get(&app, "/api/v1/runs", ADMIN).await;
    assert_eq!(list["items"].as_array().unwrap().iter().find(|r| r["id"] == run["id"]).unwrap()["fallback"], *f);
    // ...and the plugin's row says what the host decided, with the cause in the audit log.
    let (_, p) = get(&app, &format!("/api/v1/plugins/{id}"), ADMIN).await;
    assert_eq!(p["state"], "quarantined", "{p}");
    let (_, audit) = get(&app, &format!("/api/v1/audit?action=plugin.quarantine&target={id}"), ADMIN).await;
    let items = audit["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{audit}");
    let e = &items[0];
    assert_eq!(e["actor"], format!("system:run:{run_id}"));
    assert_eq!(e["detail"]["run_id"], json!(run_id));
    assert_eq!(e["detail"]["failures"], 3);
    let cause = e["detail"]["cause"].as_str().unwrap();
    assert!(cause.starts_with("plugin `hostile` 6.6.6: trapped in `place`"), "{cause}");
    assert!(cause.contains("hostile plugin gave up on a batch of"), "{cause}");
    // A quarantined plugin is not offered to the next run.
    let (s, v) =
        post(&app, "/api/v1/runs", ADMIN, json!({ "kind": "replay", "scenario": "smoke", "policy": "hostile" })).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("policy")), "{v}");
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_component_declaring_a_nul_or_huge_version_is_refused_naming_the_field(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    for (feature, says) in [("nul-version", "U+0000"), ("long-version", "limit 64")] {
        let (s, v) = send(&app, upload("application/wasm", hostile(feature))).await;
        assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("version")), "{feature}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{feature}: {detail}");
        // The problem quotes none of the declared text back.
        assert!(!detail.contains('\0') && detail.len() < 300, "{feature}: {detail}");
    }
    // Nothing was half-stored.
    let (n,): (i64,) =
        sqlx::query_as("select count(*) from plugins where name = 'hostile'").fetch_one(&pool).await.unwrap();
    assert_eq!(n, 0);
}

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn a_refusal_of_24_mib_with_nuls_is_recorded_clean_and_bounded(pool: PgPool) {
    let app = slicesched_api::app(state(pool.clone()).await);
    let (id, run) = activated_hostile_replay(&app, "nul-refusal").await;
    assert_eq!(run["status"], "succeeded", "the fallback finishes the run: {run}");
    assert_eq!(run["fallback"]["quarantined"], true, "{run}");
    let (_, p) = get(&app, &format!("/api/v1/plugins/{id}"), ADMIN).await;
    assert_eq!(p["state"], "quarantined", "{p}");
    let (_, audit) = get(&app, &format!("/api/v1/audit?action=plugin.quarantine&target={id}"), ADMIN).await;
    let cause = audit["items"][0]["detail"]["cause"].as_str().unwrap_or_else(|| panic!("{audit}")).to_string();
    assert!(
        !cause.contains('\0') && !cause.contains('\u{1b}'),
        "control characters kept: {:?}",
        cause.chars().take(200).collect::<String>()
    );
    assert!(cause.chars().count() <= 2048 + 64, "a cause of {} characters", cause.chars().count());
    assert!(cause.contains("no\u{FFFD}way"), "{:?}", cause.chars().take(300).collect::<String>());
}
