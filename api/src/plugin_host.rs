//! The seam to the Wasm plugin host (`slicesched-plugin-host`): validating an upload by
//! compiling and instantiating it in the sandbox, loading an active plugin as a policy
//! for a run (with the host's default fuel and memory limits), and writing back to the
//! plugin's row that the host quarantined it during a run.

use slicesched_plugin_host::{PluginOptions, PluginStats, WasmPolicy};
use sqlx::PgPool;
use uuid::Uuid;

/// What an upload declares about itself, read by instantiating it.
#[derive(Debug, Clone)]
pub struct Inspected {
    pub name: String,
    pub version: String,
    pub interface_version: String,
    pub size_bytes: u64,
    pub sha256_hex: String,
}

pub fn inspect(bytes: &[u8]) -> Result<Inspected, String> {
    let i = slicesched_plugin_host::inspect(bytes).map_err(|e| e.to_string())?;
    Ok(Inspected {
        name: i.name,
        version: i.version,
        interface_version: i.interface_version,
        size_bytes: i.size_bytes,
        sha256_hex: i.sha256_hex,
    })
}

pub fn load(bytes: &[u8]) -> Result<WasmPolicy, String> {
    WasmPolicy::new(bytes, &PluginOptions::default()).map_err(|e| e.to_string())
}

/// Errors kept in the audit entry of a quarantine (the host keeps the first 32).
const AUDITED_ERRORS: usize = 8;

/// Why the host quarantined a plugin during a run, as the audit log records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Quarantined {
    pub name: String,
    pub version: String,
    pub calls: u64,
    pub failures: u32,
    pub fallback_decisions: u64,
    /// The failure that tipped it over (the last one before the quarantine).
    pub cause: String,
    /// The first failures, in order, each naming plugin, version and cause.
    pub errors: Vec<String>,
}

impl Quarantined {
    pub fn from_stats(name: &str, version: &str, s: &PluginStats) -> Quarantined {
        let failures: Vec<String> = s
            .errors
            .iter()
            .filter(|e| !matches!(e.cause, slicesched_plugin_host::Cause::Quarantined { .. }))
            .map(|e| crate::text::clean(&e.to_string(), crate::text::MAX_MESSAGE))
            .collect();
        Quarantined {
            name: crate::text::clean(name, 64),
            version: crate::text::clean(version, 64),
            calls: s.calls,
            failures: s.failures,
            fallback_decisions: s.fallback_decisions,
            cause: failures.last().cloned().unwrap_or_else(|| format!("quarantined after {} failures", s.failures)),
            errors: failures.into_iter().take(AUDITED_ERRORS).collect(),
        }
    }
}

/// Marks plugin `plugin` quarantined because the host quarantined it during run `run`,
/// with an audit entry naming the cause, in one transaction. False when the row was
/// already quarantined (or is gone): nothing changed, nothing is recorded.
pub async fn write_back_quarantine(db: &PgPool, plugin: Uuid, run: Uuid, q: &Quarantined) -> Result<bool, sqlx::Error> {
    let mut tx = db.begin().await?;
    let r = sqlx::query(
        "update plugins set state = 'quarantined', updated_at = now() where id = $1 and state <> 'quarantined'",
    )
    .bind(plugin)
    .execute(&mut *tx)
    .await?;
    if r.rows_affected() == 0 {
        return Ok(false);
    }
    let detail = serde_json::json!({
        "run_id": run,
        "name": q.name,
        "version": q.version,
        "cause": q.cause,
        "failures": q.failures,
        "calls": q.calls,
        "fallback_decisions": q.fallback_decisions,
        "errors": q.errors,
    });
    crate::db::audit(&mut *tx, &format!("system:run:{run}"), "plugin.quarantine", &plugin.to_string(), detail).await?;
    tx.commit().await?;
    tracing::warn!(plugin = %plugin, name = %q.name, cause = %q.cause, "plugin quarantined during the run");
    Ok(true)
}
