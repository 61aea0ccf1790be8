//! Policies a run may name: every plugin row whose state is `active` — Wasm components
//! (shipped or uploaded) and the native built-ins the binary carries.

use slicesched_policy::Policy;
use sqlx::PgPool;

/// Names a run may use now.
pub async fn available(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> =
        sqlx::query_as("select distinct name from plugins where state = 'active' order by name").fetch_all(db).await?;
    Ok(rows.into_iter().map(|r| r.0).collect())
}

/// A fresh policy instance for one run: the newest active component of that name, or
/// the native built-in when no component of that name is active.
pub async fn instantiate(db: &PgPool, name: &str) -> Result<Box<dyn Policy>, String> {
    let row: Option<(bool, Option<Vec<u8>>)> = sqlx::query_as(
        "select builtin, bytes from plugins where name = $1 and state = 'active' \
         order by builtin, created_at desc limit 1",
    )
    .bind(name)
    .fetch_optional(db)
    .await
    .map_err(|e| e.to_string())?;
    match row {
        Some((false, Some(bytes))) => crate::plugin_host::load(&bytes),
        Some(_) => slicesched_policy::builtin(name).ok_or_else(|| format!("`{name}` is not a built-in policy")),
        None => Err(format!("no active policy or plugin named `{name}`")),
    }
}
