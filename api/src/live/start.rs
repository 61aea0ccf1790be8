//! Starting a live cluster: the configuration checked, its tenants matched to
//! registered ones (their current SLA), its models resolved and its memory checked
//! against the service's budget before any weight exists, then the loop's thread.

use super::cluster::{self, Plan, Shared};
use super::history;
use super::{Cluster, Live, LiveConfig, ServedTenant, Snapshot};
use crate::error::ApiError;
use crate::state::AppState;
use slicesched_engine::Sla;
use slicesched_exec::model::{ExecModel, HostWeights};
use slicesched_model::ModelConfig;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Nominal memory of a device (the cluster's A100-80GB).
const DEVICE_BYTES: f64 = 80e9;

/// Each served tenant's id, SLA version in force and SLA.
async fn registered(state: &AppState, cfg: &LiveConfig) -> Result<Vec<(Uuid, i32, Sla)>, ApiError> {
    let mut out = Vec::new();
    for (i, t) in cfg.tenants.iter().enumerate() {
        let row: Option<(Uuid, i32, f64, f64, f64)> = sqlx::query_as(
            "select t.id, s.version, s.ttft_ms, s.ttft_ms_per_1k, s.tpot_ms from tenants t \
             join lateral (select * from sla_versions v where v.tenant_id = t.id order by version desc limit 1) s \
             on true where t.name = $1 and t.removed_at is null",
        )
        .bind(&t.name)
        .fetch_optional(&state.db)
        .await?;
        let (id, version, ttft_ms, ttft_ms_per_1k, tpot_ms) = row.ok_or_else(|| {
            ApiError::invalid(format!("tenants[{i}].name"), format!("no registered tenant named `{}`", t.name))
        })?;
        out.push((id, version, Sla { ttft_ms, ttft_ms_per_1k, tpot_ms }));
    }
    Ok(out)
}

/// The models (no weights yet): a preset, or a checkpoint folder's `config.json`.
fn models(
    state: &AppState,
    cfg: &LiveConfig,
) -> Result<Vec<(String, ModelConfig, Option<std::path::PathBuf>)>, ApiError> {
    let mut out = Vec::new();
    for (i, t) in cfg.tenants.iter().enumerate() {
        match (&t.weights, &t.model) {
            (Some(w), _) => {
                let rel = format!("{}/config.json", w.trim_end_matches('/'));
                let path = crate::scenarios::data_file(&state.config, "weights", &rel)
                    .map_err(|e| ApiError::invalid(format!("tenants[{i}].weights"), e))?;
                let text = std::fs::read_to_string(&path)
                    .map_err(|_| ApiError::invalid(format!("tenants[{i}].weights"), "config.json is unreadable"))?;
                let name = std::path::Path::new(w)
                    .file_name()
                    .map_or("checkpoint".into(), |n| n.to_string_lossy().into_owned());
                let m = ModelConfig::from_hf_json(&text, "config.json", &name)
                    .map_err(|e| ApiError::invalid(format!("tenants[{i}].weights"), e.to_string()))?;
                let spec = path.display().to_string();
                out.push((spec, m, path.parent().map(|p| p.to_path_buf())));
            }
            (None, Some(p)) => {
                let m = ModelConfig::preset(p)
                    .map_err(|e| ApiError::invalid(format!("tenants[{i}].model"), e.to_string()))?;
                out.push((p.clone(), m, None));
            }
            (None, None) => unreachable!("checked"),
        }
    }
    Ok(out)
}

/// Starts the configured cluster, a run of kind `live` from now on (`actor` starts it);
/// 409 when one runs.
pub async fn start(state: &AppState, cfg: LiveConfig, actor: &str) -> Result<Arc<Cluster>, ApiError> {
    let live: &Live = &state.live;
    let _g = live.busy.lock().await;
    if live.current().is_some() {
        return Err(ApiError::conflict("devices", "a live cluster is running: stop it first (DELETE /api/v1/live)"));
    }
    let devices = cfg.check()?;
    // What serving may hold on the devices bounds weights and KV caches alike; the host
    // keeps one copy of the weights while they load.
    let serving = cfg.gpu_memory_utilization * DEVICE_BYTES * devices as f64;
    let limit = state.config.limits.memory_budget_bytes as f64;
    if serving > limit {
        return Err(ApiError::OverLimit {
            field: "gpu_memory_utilization".into(),
            detail: format!("devices × utilisation × 80 GB: {serving} bytes over the memory budget of {limit}"),
            limit,
            value: serving,
        });
    }
    let regs = registered(state, &cfg).await?;
    let (st, c) = (state.clone(), cfg.clone());
    let resolved =
        tokio::task::spawn_blocking(move || models(&st, &c)).await.map_err(|e| ApiError::Internal(e.to_string()))??;
    let specs: Vec<(String, Sla)> = resolved.iter().zip(&regs).map(|(m, r)| (m.0.clone(), r.2)).collect();
    let scn = cluster::scenario(&cfg, devices, &specs).map_err(|e| ApiError::invalid("tenants", e))?;
    let (policy, watched) = match crate::policies::instantiate(&state.db, &cfg.policy).await {
        Ok(i) => super::watch::watch(i),
        Err(e) => return Err(ApiError::invalid("policy", e)),
    };
    let mut tenants = Vec::new();
    for (i, ((t, (id, _, _)), (_, model, _))) in cfg.tenants.iter().zip(&regs).zip(&resolved).enumerate() {
        let ceiling = ExecModel::new(model.clone()).numerics.max_positions as u32;
        let max_model_len = t.max_model_len.unwrap_or(ceiling);
        if max_model_len > ceiling {
            return Err(ApiError::invalid(
                format!("tenants[{i}].max_model_len"),
                format!("{max_model_len} is over the model's max_position_embeddings ({ceiling})"),
            ));
        }
        tenants.push(ServedTenant {
            name: t.name.clone(),
            tenant_id: *id,
            model_id: t
                .served_model_name
                .clone()
                .unwrap_or_else(|| t.model.clone().unwrap_or_else(|| model.name.clone())),
            max_model_len,
            max_pending: t.max_pending,
            pending: AtomicU32::new(0),
            kv_blocks: scn.tenants[i].kv_blocks,
            block_size: scn.tenants[i].engine.block_size,
            vocab: model.vocab_size as usize,
            sla: Mutex::new(regs[i].2),
        });
    }
    for (i, t) in tenants.iter().enumerate() {
        if tenants[..i].iter().any(|o| o.model_id == t.model_id) {
            return Err(ApiError::invalid(
                format!("tenants[{i}].served_model_name"),
                format!("model id `{}` is served twice", t.model_id),
            ));
        }
    }
    // Weights last: everything that can be refused was.
    let (c, lens) = (cfg.clone(), tenants.iter().map(|t| t.max_model_len).collect::<Vec<_>>());
    let weights = tokio::task::spawn_blocking(move || {
        resolved
            .into_iter()
            .zip(&c.tenants)
            .zip(lens)
            .map(|(((_, model, dir), t), len)| {
                let (mut m, w) = match dir {
                    Some(d) => slicesched_exec::checkpoint::load(&d).map_err(|e| e.to_string())?,
                    None => {
                        let m = ExecModel::new(model);
                        let w = HostWeights::random(&m, t.seed);
                        (m, w)
                    }
                };
                // The RoPE table covers the context window.
                m.numerics.max_positions = len as usize;
                Ok::<_, String>((m, w))
            })
            .collect::<Result<Vec<_>, String>>()
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
    .map_err(|e| ApiError::invalid("tenants", e))?;
    let policy_shape = (policy.replicas(), policy.spatial_sharing());
    let switch = slicesched_policy::SwitchHandle::default();
    let (id, started_at) = (Uuid::new_v4(), chrono::Utc::now());
    let slas: Vec<(i32, Sla)> = regs.iter().map(|r| (r.1, r.2)).collect();
    let opening = history::Opening { id, config: &cfg, tenants: &tenants, slas: &slas, started_at, actor };
    history::open(&state.db, opening).await?;
    let stats = Arc::new(history::HistoryStats::default());
    let names = tenants.iter().map(|t| t.name.clone()).collect();
    let (wtx, writer) = history::spawn_writer(state.db.clone(), id, names, stats.clone());
    let sink = history::Sink::new(wtx, stats.clone(), cfg.op_sample.window());
    let plan =
        Plan { config: cfg.clone(), scenario: scn, models: weights, policy, switch: switch.clone(), history: sink };
    let shared = Arc::new(Shared { queued: AtomicU32::new(0), snapshot: std::sync::Mutex::new(Snapshot::default()) });
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let sh = shared.clone();
    let failed = |e: String| async move {
        let why = format!("the cluster could not start: {e}");
        let _ = crate::db::runs::finish(&state.db, id, crate::db::runs::RunStatus::Failed, Some(&why)).await;
        why
    };
    let thread = match std::thread::Builder::new()
        .name("live-cluster".into())
        .spawn(move || cluster::run(plan, rx, sh, ready_tx))
    {
        Ok(t) => t,
        Err(e) => return Err(ApiError::Internal(failed(e.to_string()).await)),
    };
    match ready_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            return Err(ApiError::invalid("tenants", failed(e).await));
        }
        Err(_) => {
            let why = failed("its thread ended while starting".into()).await;
            return Err(ApiError::Internal(why));
        }
    }
    let cluster = Arc::new(Cluster {
        id,
        policy: Mutex::new(cfg.policy.clone()),
        config: cfg,
        tenants,
        started_at,
        created: started_at.timestamp(),
        tx,
        shared,
        next_client: AtomicU64::new(0),
        thread: Mutex::new(Some(thread)),
        switch,
        policy_shape,
        metrics: state.metrics.clone(),
        stopping: AtomicBool::new(false),
        history: stats,
        writer: Mutex::new(Some(writer)),
        fallback: Mutex::new(None),
    });
    if let Some(w) = watched {
        super::watch::write_back_when_told(state, &cluster, w);
    }
    live.install(cluster.clone());
    Ok(cluster)
}
