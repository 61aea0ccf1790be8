//! Live traffic in the history tables: when a cluster stops, what it served is stored
//! as a run of kind `live` (per-request records with their SLA verdicts, the per-second
//! series, the latency histograms, the summary) in one transaction, after serving ended,
//! so the database never stalls serving.

use super::Cluster;
use crate::state::AppState;
use slicesched_sim::ReplayResult;

/// Stores the stopped cluster's traffic under the cluster's id.
pub async fn store(st: &AppState, c: &Cluster, r: &ReplayResult, actor: &str) -> Result<(), sqlx::Error> {
    let names: Vec<String> = c.tenants.iter().map(|t| t.name.clone()).collect();
    let config = serde_json::to_string_pretty(&c.config).unwrap_or_default();
    let summary = serde_json::to_value(&r.summary).unwrap_or_default();
    let policy = c.policy.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let tenant_map: serde_json::Map<String, serde_json::Value> =
        c.tenants.iter().map(|t| (t.name.clone(), serde_json::json!(t.tenant_id))).collect();
    let mut tx = st.db.begin().await?;
    sqlx::query(
        "insert into runs (id, kind, scenario, scenario_toml, policies, tenant_names, gpus, status, progress, \
         created_by, created_at, started_at, finished_at, summary, tenant_map) \
         values ($1, 'live', 'live', $2, $3, $4, $5, 'succeeded', 1, $6, $7, $7, now(), $8, $9)",
    )
    .bind(c.id)
    .bind(&config)
    .bind(vec![policy])
    .bind(&names)
    .bind(c.config.device_count().unwrap_or(0) as i32)
    .bind(actor)
    .bind(c.started_at)
    .bind(&summary)
    .bind(serde_json::Value::Object(tenant_map))
    .execute(&mut *tx)
    .await?;
    crate::db::results::store_replay(&mut tx, c.id, r, &names).await?;
    crate::db::latency::store(&mut tx, c.id, None).await?;
    crate::db::audit(
        &mut *tx,
        actor,
        "live.stored",
        &c.id.to_string(),
        serde_json::json!({"requests": r.records.len()}),
    )
    .await?;
    tx.commit().await
}
