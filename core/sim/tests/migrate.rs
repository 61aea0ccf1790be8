//! KV that moves between a tenant's instances (`migrate.rs`): moves happen where a
//! home is short of KV or behind and a copy has room, every request still ends once
//! (finished or dropped with a reason), no GPU runs out of memory, and a replay with
//! moves is as deterministic as one without.

mod common;
use common::*;
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use slicesched_sim::{plan, replay, KvMigration, ReplayOptions, ReplayResult};

/// Tenant `a` bursts long prompts with long outputs onto one GPU; `b` is light on the
/// other, so the planner gives `a` a serving copy there.
fn bursty(gpu: &str, model: &str, rate: f64) -> String {
    format!(
        r#"
name = "moves"
seed = 3
duration_s = 30
drain_s = 120
[cluster]
[[cluster.nodes]]
gpu = "{gpu}"
gpus = 2
[[tenants]]
name = "a"
model = "{model}"
gpus = [0]
sla = {{ ttft_ms = 500, ttft_ms_per_1k = 150, tpot_ms = 60 }}
trace = {{ kind = "gamma", rate = {rate}, cv = 3.0, prompt = {{ dist = "uniform", min = 500, max = 8000 }}, output = {{ dist = "uniform", min = 50, max = 600 }} }}
[[tenants]]
name = "b"
model = "mistral-7b"
gpus = [1]
sla = {{ ttft_ms = 500, tpot_ms = 60 }}
trace = {{ kind = "poisson", rate = 0.2 }}
"#
    )
}

/// Routes every request to the home and runs every op where its instance is: the
/// copies get work only by KV moves.
struct HomeFirst;

impl Policy for HomeFirst {
    fn name(&self) -> &str {
        "home-first"
    }
    fn replicas(&self) -> ReplicaMode {
        ReplicaMode::Serving
    }
    fn place(&mut self, _view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        out.extend(ready.iter().map(|r| Placement { op: r.op, group: r.home, priority: 0 }));
    }
    fn route(&mut self, _view: &View<'_>, _instances: &[InstanceView]) -> usize {
        0
    }
    // Every op home at priority 0, the default `admit`, no state: the fast path applies.
    fn home_only(&self) -> bool {
        true
    }
}

fn replay_home_first(text: &str, kv_migration: KvMigration, fast_path: bool) -> ReplayResult {
    let scn = plan(&scenario(text), ReplicaMode::Serving).unwrap();
    assert!(scn.deployment.replicas(slicesched_gmg::TenantId(0)).any(|h| h.serves), "a serving copy of `a`");
    let opts = ReplayOptions { kv_migration, fast_path, ..checked() };
    replay(&scn, &mut HomeFirst, slicesched_cost::CostModel::default_a100(), opts, &mut |_| {})
}

#[test]
fn a_home_short_of_kv_moves_decodes_to_its_copy() {
    // Llama-2-7B has no GQA: half a megabyte of KV per token, a few long requests fill
    // an L40S's cache.
    let text = bursty("L40S", "llama-2-7b", 8.0);
    let on = replay_home_first(&text, KvMigration::Memory, true);
    sound(&on);
    let s = &on.summary.scheduling;
    assert!(s.kv_migrations_for_memory > 0 && s.kv_migrated_gb > 0.0 && s.kv_migration_pause_ms > 0.0, "{s:?}");
    let off = replay_home_first(&text, KvMigration::Off, true);
    sound(&off);
    assert_eq!(off.summary.scheduling.kv_migrations, 0);
    // Every request's tokens are counted once, wherever it finished.
    let out = |r: &ReplayResult| r.records.iter().filter(|x| x.finish_ns.is_some()).count();
    assert_eq!(on.summary.completed as usize, out(&on));
}

#[test]
fn moves_are_deterministic() {
    let text = bursty("L40S", "llama-2-7b", 8.0);
    let (a, b) = (replay_home_first(&text, KvMigration::Load, true), replay_home_first(&text, KvMigration::Load, true));
    assert!(a.summary.scheduling.kv_migrations > 0, "{:?}", a.summary.scheduling);
    assert_eq!(without_timing(&a.summary), without_timing(&b.summary));
    let ids = |r: &ReplayResult| r.records.iter().map(|x| (x.first_token_ns, x.finish_ns)).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
}

#[test]
fn the_fast_path_gives_the_per_op_results_with_moves() {
    // A home-only policy runs iterations as one event where nothing can reach their
    // GPUs; a move landing on a shared GPU is something that can.
    for (rate, mode) in [(8.0, KvMigration::Memory), (8.0, KvMigration::Load), (4.0, KvMigration::Load)] {
        let text = bursty("L40S", "llama-2-7b", rate);
        let (fast, slow) = (replay_home_first(&text, mode, true), replay_home_first(&text, mode, false));
        assert!(fast.fast_iterations > 0 && slow.fast_iterations == 0);
        assert!(fast.summary.scheduling.kv_migrations > 0, "{mode:?} at {rate}");
        assert_eq!(without_timing(&fast.summary), without_timing(&slow.summary));
        let times = |r: &ReplayResult| r.records.iter().map(|x| (x.first_token_ns, x.finish_ns)).collect::<Vec<_>>();
        assert_eq!(times(&fast), times(&slow));
    }
}
