//! Policies a run may name: every plugin row whose state is `active` — Wasm components
//! (shipped or uploaded) and the native built-ins the binary carries.

use slicesched_plugin_host::WasmPolicy;
use slicesched_policy::Policy;
use sqlx::PgPool;
use uuid::Uuid;

/// Names a run may use now.
pub async fn available(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> =
        sqlx::query_as("select distinct name from plugins where state = 'active' order by name").fetch_all(db).await?;
    Ok(rows.into_iter().map(|r| r.0).collect())
}

/// A policy instance for one replay, and the plugin row it came from when it is a Wasm
/// component (whose sandbox may quarantine it during the replay).
pub enum Instance {
    Native(Box<dyn Policy>),
    Plugin { id: Uuid, policy: Box<WasmPolicy> },
}

impl Instance {
    /// The policy itself, for a replay that owns it (the planner's what-if).
    pub fn into_policy(self) -> Box<dyn Policy> {
        match self {
            Instance::Native(p) => p,
            Instance::Plugin { policy, .. } => policy,
        }
    }

    pub fn policy(&mut self) -> &mut dyn Policy {
        match self {
            Instance::Native(p) => p.as_mut(),
            Instance::Plugin { policy, .. } => policy.as_mut(),
        }
    }

    /// The plugin row and what the host recorded, when the host quarantined the plugin.
    pub fn quarantined(&self) -> Option<(Uuid, crate::plugin_host::Quarantined)> {
        match self {
            Instance::Plugin { id, policy } if policy.stats().quarantined => Some((
                *id,
                crate::plugin_host::Quarantined::from_stats(
                    &policy.info().name,
                    &policy.info().version,
                    policy.stats(),
                ),
            )),
            _ => None,
        }
    }
}

/// The prefix of a policy name that pins a run to one plugin row by id, whatever its
/// state (a trial replay of an upload that is not active yet).
pub const PINNED: &str = "plugin:";

/// A fresh policy instance for one run: the newest active component of that name, or
/// the native built-in when no component of that name is active; `plugin:{id}` that
/// exact uploaded component.
pub async fn instantiate(db: &PgPool, name: &str) -> Result<Instance, String> {
    if let Some(id) = name.strip_prefix(PINNED) {
        let id = Uuid::parse_str(id).map_err(|_| format!("`{name}` names no plugin id"))?;
        let row: Option<(Option<Vec<u8>>,)> = sqlx::query_as("select bytes from plugins where id = $1 and not builtin")
            .bind(id)
            .fetch_optional(db)
            .await
            .map_err(|e| e.to_string())?;
        let bytes = row.and_then(|r| r.0).ok_or_else(|| format!("plugin {id} no longer exists"))?;
        return crate::plugin_host::load(&bytes).map(|policy| Instance::Plugin { id, policy: Box::new(policy) });
    }
    let row: Option<(Uuid, bool, Option<Vec<u8>>)> = sqlx::query_as(
        "select id, builtin, bytes from plugins where name = $1 and state = 'active' \
         order by builtin, created_at desc limit 1",
    )
    .bind(name)
    .fetch_optional(db)
    .await
    .map_err(|e| e.to_string())?;
    match row {
        Some((id, false, Some(bytes))) => {
            crate::plugin_host::load(&bytes).map(|policy| Instance::Plugin { id, policy: Box::new(policy) })
        }
        Some(_) => slicesched_policy::builtin(name)
            .map(Instance::Native)
            .ok_or_else(|| format!("`{name}` is not a built-in policy")),
        None => Err(format!("no active policy or plugin named `{name}`")),
    }
}
