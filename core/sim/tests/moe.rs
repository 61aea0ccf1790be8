//! Mixture-of-experts tenants: the policy places expert GEMMs like any weight GEMM, the
//! core's checks hold them to the same rules, and expert parallelism replays whole.

mod common;

use common::{checked, scenario, scenario_err};
use slicesched_model::OpKind;
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use slicesched_sim::{plan, replay, ReplayResult};

/// A bursty Mixtral on a TP pair beside a light dense tenant on another.
fn moe_scenario(expert_parallel: bool) -> String {
    format!(
        r#"
name = "moe"
seed = 5
duration_s = 60
[cluster]
[[cluster.nodes]]
gpu = "H100-80GB"
gpus = 4
[[tenants]]
name = "mixtral"
model = "mixtral-8x7b"
gpus = [0, 1]
expert_parallel = {expert_parallel}
sla = {{ ttft_ms = 600, ttft_ms_per_1k = 300, tpot_ms = 80 }}
trace = {{ kind = "onoff", rate_on = 8.0, rate_off = 0.5, mean_on_s = 15, mean_off_s = 15, prompt = {{ dist = "lognormal", median = 1500, p90 = 4000, max = 8192 }}, output = {{ dist = "lognormal", median = 100, p90 = 300, max = 512 }} }}
[[tenants]]
name = "light"
model = "llama-3-8b"
gpus = [2, 3]
sla = {{ ttft_ms = 400, ttft_ms_per_1k = 200, tpot_ms = 50 }}
trace = {{ kind = "poisson", rate = 0.5 }}
"#
    )
}

/// The shipped `slice` policy, noting what it was offered and where it put expert GEMMs.
struct Offered {
    inner: Box<dyn Policy>,
    kinds: Vec<OpKind>,
    experts_away: u64,
}

impl Policy for Offered {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn replicas(&self) -> ReplicaMode {
        self.inner.replicas()
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        for r in ready {
            if !self.kinds.contains(&r.kind) {
                self.kinds.push(r.kind);
            }
        }
        let start = out.len();
        self.inner.place(view, ready, out);
        for p in &out[start..] {
            let Some(r) = ready.iter().find(|r| r.op == p.op) else { continue };
            if matches!(r.kind, OpKind::ExpertUp | OpKind::ExpertDown) && p.group != r.home {
                self.experts_away += 1;
            }
        }
    }
    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        self.inner.admit(view, inst)
    }
    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        self.inner.route(view, instances)
    }
}

fn run(expert_parallel: bool, policy: &str) -> (ReplayResult, Offered) {
    let mut p = Offered { inner: slicesched_policy::builtin(policy).unwrap(), kinds: Vec::new(), experts_away: 0 };
    let scn = plan(&scenario(&moe_scenario(expert_parallel)), p.replicas()).unwrap();
    let r = replay(&scn, &mut p, slicesched_cost::CostModel::default_a100(), checked(), &mut |_| {});
    (r, p)
}

#[test]
fn slice_places_expert_gemms_like_any_weight_gemm() {
    let (r, p) = run(false, "slice");
    for k in [OpKind::Router, OpKind::ExpertUp, OpKind::ExpertDown] {
        assert!(p.kinds.contains(&k), "{k:?} not offered: {:?}", p.kinds);
    }
    assert!(p.kinds.iter().all(|k| !k.follows_producer()), "{:?}", p.kinds);
    assert!(p.experts_away > 0, "slice never borrowed an expert GEMM");
    assert!(r.summary.scheduling.borrowed_ops > 0);
    assert_eq!((r.dependency_violations, r.summary.oom_events), (0, 0));
    assert!(r.summary.requests > 0);
}

#[test]
fn expert_parallelism_replays_with_its_all_to_all() {
    let (r, p) = run(true, "dedicated");
    assert!(!p.kinds.contains(&OpKind::AllToAll), "collectives follow their producer");
    assert_eq!((r.dependency_violations, r.summary.oom_events), (0, 0));
    let (tp, _) = run(false, "dedicated");
    assert_eq!(r.summary.requests, tp.summary.requests);
    // Four whole experts a GPU instead of eight halves: fewer, larger expert GEMMs.
    assert!(r.summary.op_events < tp.summary.op_events);
    assert_ne!(r.summary.tpot_p50_ms, tp.summary.tpot_p50_ms, "expert parallelism changes the iteration's cost");
}

#[test]
fn expert_parallel_needs_a_mixture_of_experts() {
    let text = moe_scenario(false)
        .replace("expert_parallel = false", "")
        .replace("gpus = [2, 3]\n", "gpus = [2, 3]\nexpert_parallel = true\n");
    let e = scenario_err(&text);
    assert!(e.contains("expert_parallel") && e.contains("llama-3-8b"), "{e}");
}

#[test]
fn borrowed_expert_gemms_go_home_when_their_lenders_owner_comes_back() {
    let scn = plan(&scenario(&moe_scenario(false)), ReplicaMode::Both).unwrap();
    let go = |recall: bool| {
        let mut p = slicesched_policy::builtin("slice").unwrap();
        let opts = slicesched_sim::ReplayOptions { recall_guests: recall, ..checked() };
        replay(&scn, p.as_mut(), slicesched_cost::CostModel::default_a100(), opts, &mut |_| {})
    };
    let (on, off) = (go(true), go(false));
    for r in [&on, &off] {
        assert_eq!((r.dependency_violations, r.summary.oom_events), (0, 0));
        assert!(r.records.iter().all(|q| q.ended()), "a request left unfinished");
    }
    assert_eq!(off.summary.scheduling.recalled_ops, 0);
    let s = &on.summary.scheduling;
    assert!(s.recalled_ops > 0 && s.borrowed_ops > 0, "{s:?}");
    // Deterministic with recalls too.
    let times = |r: &ReplayResult| r.records.iter().map(|q| (q.first_token_ns, q.finish_ns)).collect::<Vec<_>>();
    assert_eq!(times(&go(true)), times(&on));
}
