//! Postgres: the pool, the migrations (applied at start-up and by the tests' harness),
//! the audit log and the run history's queries.

pub mod busy;
pub mod latency;
pub mod results;
pub mod runs;
pub mod windows;

use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgExecutor, PgPool};
use std::time::Duration;

/// The plain-SQL migrations of `migrations/`, compiled in.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Connects (retrying for a few seconds while a fresh server starts), creates the
/// database when the server has none of that name, and migrates.
pub async fn connect(url: &str) -> Result<PgPool, sqlx::Error> {
    use sqlx::migrate::MigrateDatabase;
    let mut tries = 0;
    loop {
        match sqlx::Postgres::database_exists(url).await {
            Ok(true) => break,
            Ok(false) => {
                sqlx::Postgres::create_database(url).await?;
                break;
            }
            Err(e) if tries < 20 => {
                tries += 1;
                tracing::warn!(error = %e, "database server not reachable yet, retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
    let mut tries = 0;
    let pool = loop {
        match PgPoolOptions::new().max_connections(16).acquire_timeout(Duration::from_secs(5)).connect(url).await {
            Ok(p) => break p,
            Err(e) if tries < 20 => {
                tries += 1;
                tracing::warn!(error = %e, "database not reachable yet, retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    };
    MIGRATOR.run(&pool).await?;
    Ok(pool)
}

/// Appends a row to the audit log (inside the caller's transaction, so a change and its
/// record commit together). Every text is cleaned first (`crate::text`): a detail quoting
/// a plugin's message can never make the write fail, nor grow without bound.
pub async fn audit(
    db: impl PgExecutor<'_>,
    actor: &str,
    action: &str,
    target: &str,
    detail: Value,
) -> Result<(), sqlx::Error> {
    sqlx::query("insert into audit_log (actor, action, target, detail) values ($1, $2, $3, $4)")
        .bind(crate::text::clean(actor, 256))
        .bind(crate::text::clean(action, 64))
        .bind(crate::text::clean(target, 256))
        .bind(crate::text::clean_json(&detail))
        .execute(db)
        .await?;
    Ok(())
}
