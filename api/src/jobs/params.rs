//! How a run runs, stored with it: the parameters resolved when it is accepted (the
//! scenario and its SHA-256, rate scale, seed, the policy as resolved — plugin name,
//! version, SHA-256, Wasm or native — and the core's options), the registered tenants'
//! SLAs applied when it starts, and, when its plugin failed, the fallback's share.
//!
//! Tenant attribution (documented in the README): a scenario tenant is a registered
//! tenant when the run request names it in `tenants` (scenario tenant name → tenant
//! id), else when a registered tenant, not removed, has its name. The SLA version in
//! force when the run starts replaces the scenario file's SLA for that tenant's
//! requests, and is recorded in `run_tenants` and in the run's `params.tenants`.

use crate::jobs::replay::DECISION_SAMPLE;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use slicesched_sim::Scenario;
use sqlx::PgPool;
use std::collections::BTreeMap;
use utoipa::ToSchema;
use uuid::Uuid;

/// A policy as a run resolved it: exactly which plugin row decided.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct ResolvedPolicy {
    pub name: String,
    pub version: String,
    /// SHA-256 of the component (for native built-ins, of `builtin:NAME:VERSION`).
    pub sha256: String,
    /// `wasm` (a component in the sandbox) or `native` (compiled into the service).
    pub kind: String,
    pub interface_version: String,
    pub plugin_id: Uuid,
    /// A trial: the run named this exact component (`plugin:{id}`), whatever its state.
    #[serde(default)]
    pub trial: bool,
}

/// The core's options a run replayed with (what else would change its figures).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct CoreOptions {
    pub cost_model: String,
    pub cpu_overhead_base_ns: f64,
    pub cpu_overhead_per_seq_ns: f64,
    /// Ops without a real choice of GPU follow their producer (not offered to the policy).
    pub follow_producer: bool,
    pub plugin_fuel_per_call: u64,
    pub plugin_memory_cap_bytes: u64,
    /// Failed plugin calls after which the host quarantines the plugin.
    pub plugin_quarantine_after: u32,
    /// Most ops recorded one by one per timeline window.
    pub record_max_ops: u64,
    pub decision_sample_every: u64,
    /// When a running request's KV may move between its tenant's instances: `off`,
    /// `memory`, `load` (`ReplayOptions::kv_migration`; `off` for runs stored before).
    #[serde(default = "off")]
    pub kv_migration: String,
    /// Whether the planned copies stayed for the whole run (`static`) or came and went
    /// with the load (`online`: `ReplayOptions::replan`; `static` for runs stored before).
    #[serde(default = "static_replan")]
    pub replan: String,
    /// Which of the planner's candidate plans an operator-level policy ran on: `whatif`
    /// (`ReplayOptions::plan`; `tier-first`, the only plan there was, for runs stored
    /// before), so a window re-recorded later replays the run's own plan.
    #[serde(default = "tier_first")]
    pub plan: String,
}

/// A run's KV migration, replanning and plan choice (`CoreOptions::modes`).
pub type Modes = (slicesched_sim::KvMigration, slicesched_sim::Replan, slicesched_sim::PlanPick);

/// The core's defaults by the names it parses, for runs stored before the modes were.
fn off() -> String {
    slicesched_sim::KvMigration::default().name().into()
}

fn static_replan() -> String {
    slicesched_sim::Replan::default().name().into()
}

fn tier_first() -> String {
    slicesched_sim::PlanPick::BEFORE_WHATIF.name().into()
}

impl CoreOptions {
    /// The replay options these stand for (the rest as every API replay has them).
    pub fn modes(&self) -> Result<Modes, String> {
        Ok((self.kv_migration.parse()?, self.replan.parse()?, self.plan.parse()?))
    }
}

/// A registered tenant's SLA as a run applied it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct AppliedSla {
    /// The tenant's name in the scenario.
    pub scenario_tenant: String,
    pub tenant_id: Uuid,
    pub tenant: String,
    /// `request` (named in the run request's `tenants`) or `name` (same name).
    pub matched_by: String,
    pub sla_version: i32,
    pub ttft_ms: f64,
    pub ttft_ms_per_1k: f64,
    pub tpot_ms: f64,
    /// What the scenario file said, replaced by the above.
    pub scenario_sla: SlaFigures,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct SlaFigures {
    pub ttft_ms: f64,
    pub ttft_ms_per_1k: f64,
    pub tpot_ms: f64,
}

fn one_draw() -> u32 {
    1
}

impl RunParams {
    /// The seed the scenario replays with where it is not the file's own (`draw` > 0).
    pub fn drawn_seed(&self) -> Option<u64> {
        (self.draw > 0).then(|| slicesched_sim::draw_seed(self.seed, self.draw))
    }
}

/// Every parameter of a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct RunParams {
    pub scenario: String,
    /// SHA-256 of the scenario's TOML text as stored with the run.
    pub scenario_sha256: String,
    pub seed: u64,
    /// Replays: the arrival-rate multiplier (1 when not asked); sweeps search it.
    pub rate_scale: Option<f64>,
    pub violation_targets: Option<Vec<f64>>,
    /// Sweeps: draws of the scenario replayed at every scale (`seed`, then
    /// `slicesched_sim::draw_seed(seed, k)`), their requests counted together; 1 for
    /// replays and for runs stored before this was recorded.
    #[serde(default = "one_draw")]
    pub seeds: u32,
    /// Replays: which draw of the scenario was replayed, 0 (its own `seed`, and for runs
    /// stored before this was recorded) or k (seed `slicesched_sim::draw_seed(seed, k)`:
    /// the draw a sweep of more than k `seeds` replays as its (k+1)-th).
    #[serde(default)]
    pub draw: u32,
    /// In the order the run names them (one for a replay).
    pub policies: Vec<ResolvedPolicy>,
    pub core: CoreOptions,
    /// Registered tenants whose SLA the run applied (filled when it starts).
    #[serde(default)]
    pub tenants: Vec<AppliedSla>,
    /// The files the scenario names (cluster, models, traces) with their SHA-256 when
    /// the run was accepted (empty for runs stored before this was recorded).
    #[serde(default)]
    pub inputs: Vec<InputFile>,
}

/// A file a run's scenario names, as it was when the run was accepted.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct InputFile {
    /// Which key named it: `cluster`, `tenants[i].model`, `tenants[i].trace.path`
    /// (the first, when several name one file).
    pub role: String,
    /// As the scenario names it (relative to the scenarios folder).
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
}

/// Who decided when the policy could not: set on a run whose plugin failed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Fallback {
    /// The policy that decided instead (the host's baseline).
    pub policy: String,
    pub plugin: String,
    pub version: String,
    /// Decisions the fallback took (failed calls, and every call once quarantined).
    pub decisions: u64,
    /// Calls made into the plugin.
    pub calls: u64,
    pub failures: u32,
    pub quarantined: bool,
    /// The last failure before the quarantine, or the first failure.
    pub cause: Option<String>,
}

pub fn sha256_hex(text: &str) -> String {
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// The options every API replay uses (the job builds its `ReplayOptions` from the same),
/// with the modes a run asked for.
pub fn core_options(record_max_ops: u64, (kv_migration, replan, plan): Modes) -> CoreOptions {
    let cpu = slicesched_cost::CpuOverhead::default_a100();
    let plugin = slicesched_plugin_host::PluginOptions::default();
    CoreOptions {
        cost_model: "default_a100 (Vidur A100 profiles)".into(),
        cpu_overhead_base_ns: cpu.base_ns,
        cpu_overhead_per_seq_ns: cpu.per_seq_ns,
        follow_producer: slicesched_sim::ReplayOptions::default().follow_producer,
        plugin_fuel_per_call: plugin.fuel_per_call,
        plugin_memory_cap_bytes: plugin.memory_cap_bytes as u64,
        plugin_quarantine_after: plugin.quarantine_after,
        record_max_ops,
        decision_sample_every: DECISION_SAMPLE,
        kv_migration: kv_migration.name().into(),
        replan: replan.name().into(),
        plan: plan.name().into(),
    }
}

/// The plugin row a run naming `name` gets now: the newest active component of that
/// name, else the native built-in (as `policies::instantiate` chooses).
pub async fn resolve_policy(db: &PgPool, name: &str) -> Result<Option<ResolvedPolicy>, sqlx::Error> {
    // `plugin:{id}` (a trial) names exactly one component, whatever its state.
    if let Some(id) = name.strip_prefix(crate::policies::PINNED) {
        let Ok(id) = id.parse::<Uuid>() else { return Ok(None) };
        let row: Option<(String, Uuid, String, String, bool, String)> = sqlx::query_as(
            "select name, id, version, sha256_hex, builtin, interface_version from plugins where id = $1",
        )
        .bind(id)
        .fetch_optional(db)
        .await?;
        // Listed under the component's own name, marked as a trial.
        return Ok(
            row.map(|(name, id, v, sha, b, iv)| ResolvedPolicy { trial: true, ..resolved(&name, (id, v, sha, b, iv)) })
        );
    }
    let row: Option<(Uuid, String, String, bool, String)> = sqlx::query_as(
        "select id, version, sha256_hex, builtin, interface_version from plugins where name = $1 and state = 'active' \
         order by builtin, created_at desc limit 1",
    )
    .bind(name)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| resolved(name, r)))
}

/// A `plugins` row (id, version, sha256, builtin, interface version) as the policy a run names.
fn resolved(
    name: &str,
    (id, version, sha256, builtin, interface_version): (Uuid, String, String, bool, String),
) -> ResolvedPolicy {
    ResolvedPolicy {
        name: name.to_string(),
        version,
        sha256,
        kind: if builtin { "native" } else { "wasm" }.into(),
        interface_version,
        plugin_id: id,
        trial: false,
    }
}

/// A fresh instance of exactly the resolved plugin. `require_active`: a queued run
/// refuses a plugin an admin disabled (or the host quarantined) since it was accepted;
/// re-recording a finished run's window uses the same bytes whatever their state now.
pub async fn instantiate(
    db: &PgPool,
    p: &ResolvedPolicy,
    require_active: bool,
) -> Result<crate::policies::Instance, String> {
    let row: Option<(bool, Option<Vec<u8>>, String)> =
        sqlx::query_as("select builtin, bytes, state from plugins where id = $1")
            .bind(p.plugin_id)
            .fetch_optional(db)
            .await
            .map_err(|e| e.to_string())?;
    let Some((builtin, bytes, state)) = row else {
        return Err(format!("plugin `{}` {} (sha256 {}) no longer exists", p.name, p.version, p.sha256));
    };
    if require_active && state != "active" {
        return Err(format!("plugin `{}` {} is {state} since this run was queued", p.name, p.version));
    }
    match (builtin, bytes) {
        (false, Some(b)) => crate::plugin_host::load(&b)
            .map(|policy| crate::policies::Instance::Plugin { id: p.plugin_id, policy: Box::new(policy) }),
        _ => slicesched_policy::builtin(&p.name)
            .map(crate::policies::Instance::Native)
            .ok_or_else(|| format!("`{}` is not a built-in policy", p.name)),
    }
}

/// The fallback's share of a replay, when its plugin failed at least once.
pub fn fallback_of(instance: &crate::policies::Instance) -> Option<Fallback> {
    let crate::policies::Instance::Plugin { policy, .. } = instance else { return None };
    let s = policy.stats();
    if s.fallback_decisions == 0 && s.failures == 0 && !s.quarantined {
        return None;
    }
    let q = crate::plugin_host::Quarantined::from_stats(&policy.info().name, &policy.info().version, s);
    Some(Fallback::of(q, s.quarantined))
}

impl Fallback {
    /// What the host's baseline decided for a plugin whose counts are `q`.
    pub fn of(q: crate::plugin_host::Quarantined, quarantined: bool) -> Fallback {
        Fallback {
            policy: "dedicated".into(),
            cause: (!q.errors.is_empty() || quarantined).then_some(q.cause),
            plugin: q.name,
            version: q.version,
            decisions: q.fallback_decisions,
            calls: q.calls,
            failures: q.failures,
            quarantined,
        }
    }

    /// Sets the run's `fallback` inside the caller's transaction, with a `run.fallback`
    /// audit entry when `audit`.
    pub async fn store(&self, conn: &mut sqlx::PgConnection, run: Uuid, audit: bool) -> Result<(), sqlx::Error> {
        let v = serde_json::to_value(self).expect("fallback serialises");
        sqlx::query("update runs set fallback = $2 where id = $1").bind(run).bind(&v).execute(&mut *conn).await?;
        if audit {
            crate::db::audit(&mut *conn, &format!("system:run:{run}"), "run.fallback", &run.to_string(), v).await?;
        }
        Ok(())
    }
}

/// The registered tenants a starting run attributes its scenario tenants to, with the
/// SLA version in force now. Fails naming the tenant when the request named one that
/// is gone.
pub async fn attribute(
    db: &PgPool,
    scenario_tenants: &[(String, SlaFigures)],
    requested: &BTreeMap<String, Uuid>,
) -> Result<Vec<AppliedSla>, String> {
    let mut out = Vec::new();
    for (name, file_sla) in scenario_tenants {
        let (row, matched_by) = match requested.get(name) {
            Some(id) => {
                let r = current(db, Some(*id), name).await?;
                let r = r.ok_or_else(|| format!("tenants.{name}: tenant {id} does not exist or was removed"))?;
                (r, "request")
            }
            None => match current(db, None, name).await? {
                Some(r) => (r, "name"),
                None => continue,
            },
        };
        let (tenant_id, tenant, sla_version, ttft_ms, ttft_ms_per_1k, tpot_ms) = row;
        out.push(AppliedSla {
            scenario_tenant: name.clone(),
            tenant_id,
            tenant,
            matched_by: matched_by.into(),
            sla_version,
            ttft_ms,
            ttft_ms_per_1k,
            tpot_ms,
            scenario_sla: *file_sla,
        });
    }
    Ok(out)
}

type SlaRow = (Uuid, String, i32, f64, f64, f64);

/// The tenant with this id (when given) or else this name, and its current SLA.
async fn current(db: &PgPool, id: Option<Uuid>, name: &str) -> Result<Option<SlaRow>, String> {
    sqlx::query_as(
        "select t.id, t.name, s.version, s.ttft_ms, s.ttft_ms_per_1k, s.tpot_ms from tenants t \
         join lateral (select * from sla_versions v where v.tenant_id = t.id order by v.version desc limit 1) s on true \
         where t.removed_at is null and (case when $1::uuid is null then t.name = $2 else t.id = $1 end)",
    )
    .bind(id)
    .bind(name)
    .fetch_optional(db)
    .await
    .map_err(|e| format!("reading the registered tenants: {e}"))
}

/// The scenario with the applied SLAs in place of the file's.
pub fn apply(mut scenario: Scenario, applied: &[AppliedSla]) -> Scenario {
    for a in applied {
        if let Some(t) = scenario.tenants.iter_mut().find(|t| t.name == a.scenario_tenant) {
            t.sla.ttft_ms = a.ttft_ms;
            t.sla.ttft_ms_per_1k = a.ttft_ms_per_1k;
            t.sla.tpot_ms = a.tpot_ms;
        }
    }
    scenario
}

/// Each scenario tenant's name and the file's SLA.
pub fn scenario_slas(s: &Scenario) -> Vec<(String, SlaFigures)> {
    s.tenants
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                SlaFigures { ttft_ms: t.sla.ttft_ms, ttft_ms_per_1k: t.sla.ttft_ms_per_1k, tpot_ms: t.sla.tpot_ms },
            )
        })
        .collect()
}

/// Records a starting run's attribution: `run_tenants` rows, the run's `params.tenants`
/// and a `run.start` audit entry with the parameters, in one transaction.
pub async fn record_start(db: &PgPool, run: Uuid, params: &RunParams) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    for a in &params.tenants {
        sqlx::query(
            "insert into run_tenants (run_id, scenario_tenant, tenant_id, matched_by, sla_version, ttft_ms, \
             ttft_ms_per_1k, tpot_ms) values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict do nothing",
        )
        .bind(run)
        .bind(&a.scenario_tenant)
        .bind(a.tenant_id)
        .bind(&a.matched_by)
        .bind(a.sla_version)
        .bind(a.ttft_ms)
        .bind(a.ttft_ms_per_1k)
        .bind(a.tpot_ms)
        .execute(&mut *tx)
        .await?;
    }
    let v = serde_json::to_value(params).expect("params serialise");
    sqlx::query("update runs set params = $2 where id = $1").bind(run).bind(&v).execute(&mut *tx).await?;
    crate::db::audit(&mut *tx, &format!("system:run:{run}"), "run.start", &run.to_string(), v).await?;
    tx.commit().await
}
