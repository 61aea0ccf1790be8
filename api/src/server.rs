//! Start-up and shutdown: connect and migrate, register the shipped policies, recover
//! runs a previous process left, store a demo replay on an empty database and start the
//! demo's live cluster (unless the configuration starts one), serve until SIGINT/SIGTERM.

use crate::config::Config;
use crate::state::AppState;
use crate::telemetry::Metrics;
use std::sync::Arc;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    // Each cause is in the message, not `source()`: shown once where a caller prints the
    // chain (hence the `From`s below rather than `#[from]`, which implies a source).
    #[error("database: {0}")]
    Db(sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    #[error("listening on {addr}: {err}")]
    Bind { addr: String, err: std::io::Error },
    #[error("serving: {0}")]
    Io(std::io::Error),
    #[error("demo run: {0}")]
    Demo(String),
    #[error("live cluster (`[live]` of the configuration): {0}")]
    Live(String),
}

impl From<sqlx::Error> for ServeError {
    fn from(e: sqlx::Error) -> Self {
        ServeError::Db(e)
    }
}

impl From<sqlx::migrate::MigrateError> for ServeError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        ServeError::Migrate(e)
    }
}

impl From<std::io::Error> for ServeError {
    fn from(e: std::io::Error) -> Self {
        ServeError::Io(e)
    }
}

/// How long shutdown waits for cancelled replays to notice their flag.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The demo replays: what a newcomer sees at once.
pub const DEMO_SCENARIO: &str = "smoke";
pub const DEMO_POLICIES: &[&str] = &["dedicated", "slice"];

/// Everything before serving; returns the state `app` is built on.
pub async fn prepare(config: Config) -> Result<AppState, ServeError> {
    let db = crate::db::connect(&config.database_url).await?;
    let state = AppState::new(db, config, Arc::new(Metrics::new()));
    register_shipped(&state).await?;
    state.jobs.recover().await?;
    state.jobs.start_watchdog(crate::jobs::watchdog::EVERY, crate::jobs::watchdog::GRACE);
    if state.config.demo_run {
        demo(&state).await?;
    }
    let configured = state.config.live.as_ref().is_some_and(|c| c.autostart);
    if state.config.demo_run && !configured {
        let msg = crate::live::demo::start(&state).await.map_err(|e| ServeError::Live(format!("the demo: {e}")))?;
        // The keys are for the person who started the service, not for the logs.
        println!("{msg}");
    }
    if let Some(cfg) = state.config.live.clone().filter(|c| c.autostart) {
        let c = crate::live::start(&state, cfg, "system:config").await.map_err(|e| ServeError::Live(e.to_string()))?;
        let detail = serde_json::to_value(&c.config).unwrap_or_default();
        crate::db::audit(&state.db, "system:config", "live.start", &c.id.to_string(), detail).await?;
        tracing::info!(cluster = %c.id, "live cluster serving /v1");
    }
    Ok(state)
}

pub async fn serve(config: Config) -> Result<(), ServeError> {
    let addr = config.addr.clone();
    let state = prepare(config).await?;
    let listener =
        tokio::net::TcpListener::bind(&addr).await.map_err(|err| ServeError::Bind { addr: addr.clone(), err })?;
    tracing::info!(%addr, "serving the API and web UI");
    let jobs = state.jobs.clone();
    let st = state.clone();
    let stopping = async move {
        shutdown().await;
        // In-flight completions finish (for the cluster's drain time) or fail first.
        if let Some((c, served)) = st.live.stop().await {
            tracing::info!(cluster = %c.id, "live cluster stopped");
            if let Some(s) = served {
                if let Err(e) = crate::live::history::store(&st, &c, &s, "system:shutdown").await {
                    tracing::error!(error = %e, "storing the live run failed");
                }
            }
        }
        // Runs are cancelled at once and marked interrupted, not left to finish (a long
        // replay would hold the process for minutes) nor left `running`.
        if let Err(e) = jobs.shutdown(SHUTDOWN_GRACE).await {
            tracing::error!(error = %e, "marking runs interrupted at shutdown failed");
        }
    };
    axum::serve(listener, crate::app(state)).with_graceful_shutdown(stopping).await?;
    Ok(())
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}

/// The shipped plugin components (`plugins_dir/*.wasm`, validated like uploads) and the
/// native built-in policies as plugin rows, once each: what `GET /api/v1/plugins` lists,
/// runs name and admins disable.
pub async fn register_shipped(state: &AppState) -> Result<(), sqlx::Error> {
    let version = env!("CARGO_PKG_VERSION");
    for name in slicesched_policy::BUILTIN {
        let digest = hex::encode(crate::auth::sha256(&format!("builtin:{name}:{version}")));
        sqlx::query(
            "insert into plugins (id, name, version, interface_version, sha256_hex, size_bytes, builtin, uploaded_by) \
             values ($1, $2, $3, 'native', $4, 0, true, 'system') on conflict do nothing",
        )
        .bind(Uuid::new_v4())
        .bind(name)
        .bind(format!("{version}-native"))
        .bind(digest)
        .execute(&state.db)
        .await?;
    }
    let dir = &state.config.plugins_dir;
    let files = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path());
    // Only the shipped policies: the folder also holds the template and test plugins.
    let shipped = |p: &std::path::Path| {
        p.extension().is_some_and(|e| e == "wasm")
            && p.file_stem().and_then(|s| s.to_str()).is_some_and(|s| slicesched_policy::BUILTIN.contains(&s))
    };
    for path in files.filter(|p| shipped(p)) {
        let Ok(bytes) = std::fs::read(&path) else { continue };
        match crate::plugin_host::inspect(&bytes) {
            Ok(info) => register_component(state, &info, &bytes).await?,
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "shipped plugin not registered"),
        }
    }
    Ok(())
}

/// One shipped component, once per build. A rebuilt component keeps its crate's version
/// (the workspace's), so a build whose bytes the database has not seen is registered as
/// `{version}+{sha256 prefix}` (semver build metadata), the newest row of its name and so
/// what runs naming it get; with `on conflict do nothing` alone an upgraded binary kept
/// running the component of the first start. A policy an admin disabled stays disabled
/// in its new build (a quarantine, the host's verdict on other bytes, does not carry
/// over); the older rows stay as they were, for the runs that name them.
async fn register_component(
    state: &AppState,
    info: &crate::plugin_host::Inspected,
    bytes: &[u8],
) -> Result<(), sqlx::Error> {
    let (seen,): (bool,) = sqlx::query_as("select exists (select 1 from plugins where sha256_hex = $1)")
        .bind(&info.sha256_hex)
        .fetch_one(&state.db)
        .await?;
    if seen {
        return Ok(());
    }
    let earlier: Option<(String,)> = sqlx::query_as(
        "select state from plugins where name = $1 and uploaded_by = 'system' and not builtin \
         order by created_at desc limit 1",
    )
    .bind(&info.name)
    .fetch_optional(&state.db)
    .await?;
    let (version, plugin_state) = match &earlier {
        None => (info.version.clone(), "active".to_string()),
        Some((st,)) => (
            format!("{}+{}", info.version, &info.sha256_hex[..12]),
            if st == "disabled" { "disabled" } else { "active" }.to_string(),
        ),
    };
    let inserted = sqlx::query(
        "insert into plugins (id, name, version, interface_version, sha256_hex, size_bytes, bytes, \
         uploaded_by, state) values ($1, $2, $3, $4, $5, $6, $7, 'system', $8) on conflict do nothing",
    )
    .bind(Uuid::new_v4())
    .bind(&info.name)
    .bind(&version)
    .bind(&info.interface_version)
    .bind(&info.sha256_hex)
    .bind(info.size_bytes as i64)
    .bind(bytes)
    .bind(&plugin_state)
    .execute(&state.db)
    .await?;
    if inserted.rows_affected() > 0 && earlier.is_some() {
        tracing::info!(name = %info.name, version, state = plugin_state, "a new build of a shipped plugin registered");
    }
    Ok(())
}

/// Queues the demo replays when the database has no run at all.
async fn demo(state: &AppState) -> Result<(), ServeError> {
    let (runs,): (i64,) = sqlx::query_as("select count(*) from runs").fetch_one(&state.db).await?;
    if runs > 0 {
        return Ok(());
    }
    let cfg = state.config.clone();
    let resolved = tokio::task::spawn_blocking(move || crate::scenarios::resolve(&cfg, DEMO_SCENARIO, 0, 1, 1.0))
        .await
        .map_err(|e| ServeError::Demo(e.to_string()))?
        .map_err(|e| ServeError::Demo(e.to_string()))?;
    for policy in DEMO_POLICIES {
        let id = Uuid::new_v4();
        sqlx::query(
            "insert into runs (id, kind, scenario, scenario_toml, policies, tenant_names, gpus, created_by) \
             values ($1, 'replay', $2, $3, $4, $5, $6, 'system:demo')",
        )
        .bind(id)
        .bind(&resolved.name)
        .bind(&resolved.toml)
        .bind(vec![policy.to_string()])
        .bind(&resolved.tenant_names)
        .bind(resolved.gpus as i32)
        .execute(&state.db)
        .await?;
        state.jobs.submit(id);
        tracing::info!(run_id = %id, policy, "demo replay queued");
    }
    Ok(())
}
