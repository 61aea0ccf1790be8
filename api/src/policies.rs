//! Policies a run may name: the built-ins the binary carries and active uploaded plugins.

use slicesched_policy::Policy;
use sqlx::PgPool;

/// Names a run may use now: built-ins, and plugins whose state is `active`.
pub async fn available(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    let mut names: Vec<String> = slicesched_policy::BUILTIN.iter().map(|s| s.to_string()).collect();
    let rows: Vec<(String,)> =
        sqlx::query_as("select distinct name from plugins where state = 'active' and not builtin order by name")
            .fetch_all(db)
            .await?;
    for (n,) in rows {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    Ok(names)
}

/// A fresh policy instance for one run. Built-in names win over plugins of the same name
/// unless the built-in was disabled.
pub async fn instantiate(db: &PgPool, name: &str) -> Result<Box<dyn Policy>, String> {
    let state: Option<(String,)> =
        sqlx::query_as("select state from plugins where name = $1 and builtin order by created_at desc limit 1")
            .bind(name)
            .fetch_optional(db)
            .await
            .map_err(|e| e.to_string())?;
    if let Some(p) = slicesched_policy::builtin(name) {
        if state.as_ref().is_none_or(|s| s.0 == "active") {
            return Ok(p);
        }
    }
    let row: Option<(Vec<u8>,)> = sqlx::query_as(
        "select bytes from plugins where name = $1 and state = 'active' and bytes is not null \
         order by created_at desc limit 1",
    )
    .bind(name)
    .fetch_optional(db)
    .await
    .map_err(|e| e.to_string())?;
    match row {
        Some((bytes,)) => crate::plugin_host::load(&bytes),
        None => Err(format!("no active policy or plugin named `{name}`")),
    }
}
