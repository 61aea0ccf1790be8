//! Hostile and random policies cannot break the core's invariants: whatever they
//! answer, no GPU runs out of memory, no op starts before its inputs, and every
//! request completes or is dropped with a reason.

mod common;
use common::*;
use proptest::prelude::*;
use slicesched_gmg::GroupId;
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use slicesched_sim::{plan, replay};

/// Answers at random from a seeded generator: any group (existing or not), any
/// priority, ops dropped or repeated, extra micro-batches always admitted.
struct Chaos {
    state: u64,
    mode: ReplicaMode,
}

impl Chaos {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic and dependency-free.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

impl Policy for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn replicas(&self) -> ReplicaMode {
        self.mode
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        let groups = view.deployment.groups.len() as u64;
        for r in ready {
            let roll = self.next() % 10;
            if roll == 0 {
                continue; // leave it unplaced
            }
            let group = match roll {
                1 => GroupId(u32::MAX), // does not exist
                2 => GroupId((groups + 3) as u32),
                _ => GroupId((self.next() % groups) as u32),
            };
            let priority = (self.next() as i64 % 2_000_000_000) as i32;
            out.push(Placement { op: r.op, group, priority });
            if roll == 9 {
                out.push(Placement { op: r.op, group: r.home, priority }); // twice
            }
        }
    }
    fn admit(&mut self, _view: &View<'_>, _inst: &InstanceView) -> bool {
        true
    }
    fn route(&mut self, _view: &View<'_>, _instances: &[InstanceView]) -> usize {
        self.next() as usize // out of range most of the time
    }
}

/// Sends every op, attention included, to the most loaded group it can name.
struct Hog;

impl Policy for Hog {
    fn name(&self) -> &str {
        "hog"
    }
    fn replicas(&self) -> ReplicaMode {
        ReplicaMode::Weights
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        let busiest = (0..view.deployment.groups.len())
            .max_by_key(|&g| view.group_free_at(GroupId(g as u32)))
            .map_or(GroupId(0), |g| GroupId(g as u32));
        out.extend(ready.iter().map(|r| Placement { op: r.op, group: busiest, priority: i32::MAX }));
    }
    fn admit(&mut self, _view: &View<'_>, inst: &InstanceView) -> bool {
        inst.inflight < 64
    }
}

fn scenario_text(seed: u64, rate: f64, gpu: &str) -> String {
    scenario_text_with(seed, rate, rate, gpu)
}

/// Tenant `a` at `a_rate`, the others at `rate`.
fn scenario_text_with(seed: u64, rate: f64, a_rate: f64, gpu: &str) -> String {
    format!(
        r#"
name = "adversarial"
seed = {seed}
duration_s = 6
drain_s = 60
[planner]
replica_memory_fraction = 0.6
[cluster]
[[cluster.nodes]]
gpu = "{gpu}"
gpus = 4
[[tenants]]
name = "a"
model = "llama-3-8b"
gpus = [0]
sla = {{ ttft_ms = 300, tpot_ms = 40 }}
trace = {{ kind = "gamma", rate = {a_rate}, cv = 3.0, prompt = {{ dist = "uniform", min = 1, max = 6000 }}, output = {{ dist = "uniform", min = 1, max = 200 }} }}
[[tenants]]
name = "b"
model = "mistral-7b"
gpus = [1]
sla = {{ ttft_ms = 300, tpot_ms = 40 }}
trace = {{ kind = "poisson", rate = {rate} }}
[[tenants]]
name = "c"
model = "qwen2.5-7b"
gpus = [2, 3]
sla = {{ ttft_ms = 300, tpot_ms = 40 }}
trace = {{ kind = "poisson", rate = {rate} }}
"#
    )
}

/// `follow`: whether the core places ops with no choice of GPU itself; off, the hostile
/// policy gets to answer for attention and the rest too.
fn check(policy: &mut dyn Policy, seed: u64, rate: f64, gpu: &str, follow: bool) -> Result<(), TestCaseError> {
    let base = scenario(&scenario_text(seed, rate, gpu));
    let scn = plan(&base, policy.replicas()).expect("planner");
    // KV moves on: hostile routing makes instances fall behind and fill up.
    let opts = slicesched_sim::ReplayOptions {
        follow_producer: follow,
        kv_migration: slicesched_sim::KvMigration::Load,
        // Copies coming and going under the hostile answers, on half the cases.
        replan: if seed.is_multiple_of(2) { slicesched_sim::Replan::Online } else { slicesched_sim::Replan::Static },
        ..checked()
    };
    let r = replay(&scn, policy, slicesched_cost::CostModel::default_a100(), opts, &mut |_| {});
    prop_assert_eq!(r.dependency_violations, 0);
    prop_assert_eq!(r.summary.oom_events, 0);
    for g in &r.summary.gpus {
        prop_assert!(g.peak_memory_gb <= g.capacity_gb);
    }
    for rec in &r.records {
        prop_assert!(rec.finish_ns.is_some() != rec.dropped.is_some(), "request {} in limbo", rec.id);
    }
    prop_assert_eq!(r.summary.requests, r.summary.completed + r.summary.dropped);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn random_answers_never_break_invariants(
        seed in 0u64..10_000,
        rate in 1.0f64..8.0,
        serving in any::<bool>(),
        follow in any::<bool>(),
        gpu in prop::sample::select(vec!["H100-80GB", "A100-80GB", "L40S"]),
    ) {
        let mode = if serving { ReplicaMode::Serving } else { ReplicaMode::Weights };
        check(&mut Chaos { state: seed | 1, mode }, seed, rate, gpu, follow)?;
    }

    #[test]
    fn hostile_hogging_never_breaks_invariants(seed in 0u64..10_000, rate in 1.0f64..8.0, follow in any::<bool>()) {
        check(&mut Hog, seed, rate, "H100-80GB", follow)?;
    }
}

#[test]
fn rejections_are_counted_with_reasons() {
    // Tenant `a` bursts at three times the others' rate: its peaks outgrow its GPU, so
    // the planner gives it copies on the others' (and the policy has borrows to get wrong).
    let base = scenario(&scenario_text_with(5, 4.0, 12.0, "H100-80GB"));
    let mut p = Chaos { state: 99, mode: ReplicaMode::Weights };
    let scn = plan(&base, p.replicas()).unwrap();
    // Every op offered, so that attention is too.
    let opts = slicesched_sim::ReplayOptions { follow_producer: false, ..checked() };
    let r = replay(&scn, &mut p, slicesched_cost::CostModel::default_a100(), opts, &mut |_| {});
    let reasons: Vec<&str> = r.summary.rejected_placements.iter().map(|(w, _)| w.as_str()).collect();
    for expected in ["no such GPU group", "op left unplaced", "op placed twice", "attention away from its KV cache"] {
        assert!(reasons.contains(&expected), "missing `{expected}` in {reasons:?}");
    }
    assert!(!r.summary.scheduling.replicas.is_empty(), "the planner placed replicas");
}

#[test]
fn micro_batches_wait_for_room_for_their_activations() {
    // Found by the property above: a policy admitting every micro-batch, long prompts
    // on 48 GB GPUs. Each micro-batch may take the full token budget, so their
    // activations together outgrew the instance's reserve (4,324 OOM events) before the
    // core checked them at launch.
    let (seed, rate) = (6678, 7.899218842884052);
    let mut p = Chaos { state: seed | 1, mode: ReplicaMode::Weights };
    let scn = plan(&scenario(&scenario_text(seed, rate, "L40S")), p.replicas()).unwrap();
    let opts = slicesched_sim::ReplayOptions { follow_producer: false, ..checked() };
    let r = replay(&scn, &mut p, slicesched_cost::CostModel::default_a100(), opts, &mut |_| {});
    assert_eq!(r.summary.oom_events, 0);
    let s = &r.summary.scheduling;
    assert!(s.deferred_micro_batches > 0 && s.micro_batches > 0, "{s:?}");
    assert_eq!(r.summary.requests, r.summary.completed + r.summary.dropped);
}

#[test]
fn copies_inside_a_larger_home_keep_every_invariant() {
    // Tenant `a` (one GPU) outgrows its GPU; the two-GPU home of `c` is light, so `a`
    // gets copies on single GPUs of it: groups overlapping another home's group, each op
    // there waiting for its GPU and booked in its ledger. Hostile policies then push
    // everything they can onto them.
    let base = scenario(&scenario_text_with(11, 1.0, 14.0, "H100-80GB"));
    for mode in [ReplicaMode::Weights, ReplicaMode::Serving] {
        let scn = plan(&base, mode).unwrap();
        let inside = scn.deployment.replicas(slicesched_gmg::TenantId(0)).any(|h| {
            let g = &scn.deployment.group(h.group).gpus;
            g.len() == 1 && g[0].0 >= 2
        });
        assert!(inside, "{mode:?}: no copy of `a` inside c's home: {:?}", scn.deployment.homes);
        let runs: [(&mut dyn Policy, bool); 3] =
            [(&mut Chaos { state: 7, mode }, false), (&mut Chaos { state: 8, mode }, true), (&mut Hog, false)];
        for (p, follow) in runs {
            let scn = plan(&base, p.replicas()).unwrap();
            let opts = slicesched_sim::ReplayOptions { follow_producer: follow, ..checked() };
            let r = replay(&scn, p, slicesched_cost::CostModel::default_a100(), opts, &mut |_| {});
            assert_eq!(r.summary.oom_events, 0, "{mode:?} {}", p.name());
            assert_eq!(r.dependency_violations, 0);
            assert!(r.summary.gpus.iter().all(|g| g.peak_memory_gb <= g.capacity_gb));
            assert_eq!(r.summary.requests, r.summary.completed + r.summary.dropped);
        }
    }
}
