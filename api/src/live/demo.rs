//! The demo's live cluster: what `bash scripts/demo.sh` serves beside the demo replays —
//! two tiny tenants (seeded weights) on two CPU devices under `dedicated`. The tenants
//! are registered on the first start, when their keys are printed, once, with a `curl`
//! for a streamed completion (a key is stored only as its SHA-256: later starts say how
//! to get a new one). Idle, the loop wakes ten times a second and the devices' threads
//! sleep.

use super::{LiveConfig, LiveEngine, LiveTenant};
use crate::error::ApiError;
use crate::http::tenants::SlaTargets;
use crate::state::AppState;

/// The demo tenants: (name, preset, seed).
pub const TENANTS: &[(&str, &str, u64)] = &[("demo-chat", "tiny-2l", 1), ("demo-code", "tiny-4l", 2)];

pub fn config() -> LiveConfig {
    LiveConfig {
        devices: "cpu:2".into(),
        policy: "dedicated".into(),
        tenants: TENANTS
            .iter()
            .enumerate()
            .map(|(i, &(name, model, seed))| LiveTenant {
                name: name.into(),
                model: Some(model.into()),
                weights: None,
                seed,
                served_model_name: None,
                gpus: vec![i as u32],
                max_model_len: Some(2048),
                max_pending: 16,
                engine: LiveEngine { max_num_batched_tokens: Some(512), ..LiveEngine::default() },
            })
            .collect(),
        queue_capacity: 64,
        gpu_memory_utilization: 0.001,
        drain_s: 2.0,
        autostart: true,
        op_sample: Default::default(),
    }
}

/// Registers the demo tenants that do not exist yet: (name, model, key) of each new one.
async fn register(state: &AppState) -> Result<Vec<(String, String, String)>, ApiError> {
    let mut made = Vec::new();
    let sla = SlaTargets { ttft_ms: 2000.0, ttft_ms_per_1k: 0.0, tpot_ms: 200.0 };
    for &(name, model, _) in TENANTS {
        let mut tx = state.db.begin().await?;
        let (exists,): (bool,) = sqlx::query_as("select exists (select 1 from tenants where name = $1)")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        if exists {
            continue;
        }
        let (id, key) = crate::http::tenants::register(&mut tx, name, &sla, "system:demo").await?;
        let detail = serde_json::json!({ "name": name, "sla": sla });
        crate::db::audit(&mut *tx, "system:demo", "tenant.create", &id.to_string(), detail).await?;
        tx.commit().await?;
        made.push((name.to_string(), model.to_string(), key));
    }
    Ok(made)
}

/// Starts the demo cluster (registering its tenants first); the message to print.
pub async fn start(state: &AppState) -> Result<String, ApiError> {
    let made = register(state).await?;
    let c = super::start(state, config(), "system:demo").await?;
    let detail = serde_json::to_value(&c.config).unwrap_or_default();
    crate::db::audit(&state.db, "system:demo", "live.start", &c.id.to_string(), detail).await?;
    let addr = &state.config.addr;
    let mut msg = format!(
        "live demo: {} served on the CPU executor (run {} in the web UI)\n",
        TENANTS.iter().map(|t| format!("{} ({})", t.0, t.1)).collect::<Vec<_>>().join(", "),
        c.id
    );
    if made.is_empty() {
        msg += "  the demo tenants' keys were printed when they were registered; a new one: \
                POST /api/v1/keys {\"role\": \"tenant\", \"tenant_id\": ...} (admin)\n";
    }
    for (name, model, key) in &made {
        msg += &format!(
            "  {name}'s key (shown once): {key}\n  curl -N http://{addr}/v1/completions -H 'Authorization: Bearer {key}' \
             -H 'Content-Type: application/json' -d '{{\"model\": \"{model}\", \"prompt\": \"Hello\", \
             \"max_tokens\": 16, \"stream\": true}}'\n"
        );
    }
    Ok(msg)
}
