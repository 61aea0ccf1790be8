//! The core's what-if lent to a policy while it decides (`View::what_if`): its verdicts
//! are the core's own checks, and asking changes nothing.

mod common;

use common::{checked, scenario, without_timing};
use slicesched_gmg::GroupId;
use slicesched_model::OpKind;
use slicesched_policy::{
    InstanceView, Placement, Policy, Probe, ProbeOutcome, ReadyOp, ReplicaMode, TenantDelay, Verdict, View,
};
use slicesched_sim::{plan, replay, ReplayResult};
use std::collections::HashMap;

/// Probes every op on every group (and one past the last) before the shipped `slice`
/// decides, tallying the verdicts by what the probe was.
struct Prober {
    inner: Box<dyn Policy>,
    tally: HashMap<(&'static str, Verdict), u64>,
    probes: Vec<Probe>,
    out: Vec<ProbeOutcome>,
    delays: Vec<TenantDelay>,
}

impl Policy for Prober {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn replicas(&self) -> ReplicaMode {
        self.inner.replicas()
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        let groups = view.deployment.groups.len() as u32;
        self.probes.clear();
        for r in ready {
            for g in 0..=groups {
                self.probes.push(Probe { op: r.op, group: GroupId(g), priority: 7 });
            }
        }
        self.out.clear();
        self.delays.clear();
        view.what_if.ask(&self.probes, &mut self.out, &mut self.delays);
        assert_eq!(self.out.len(), self.probes.len());
        for (p, o) in self.probes.iter().zip(&self.out) {
            let r = ready.iter().find(|r| r.op == p.op).unwrap();
            let what = if p.group.0 == groups {
                "past the last group"
            } else if p.group == r.home {
                "home"
            } else if r.kind == OpKind::Attention {
                "attention away"
            } else {
                let layers = view.tenants[r.tenant.index()].layers;
                if view.deployment.holds(r.tenant, p.group, r.layer, layers) {
                    "a holder"
                } else {
                    "not a holder"
                }
            };
            *self.tally.entry((what, o.verdict)).or_default() += 1;
            if o.verdict != Verdict::NoSuchGroup {
                assert!(o.finish_ns >= o.start_ns && o.start_ns >= view.now_ns.min(r.ready_ns), "{o:?}");
            }
        }
        assert!(self.delays.iter().all(|d| (d.probe as usize) < self.probes.len() && d.delay_ns > 0));
        self.inner.place(view, ready, out);
    }
    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        self.inner.admit(view, inst)
    }
    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        self.inner.route(view, instances)
    }
}

/// Two single-GPU tenants with bursty load: each GPU has room for a copy of the other's
/// weights, so borrows are possible and sometimes refused.
const SMOKE: &str = include_str!("../../../scenarios/smoke.toml");

fn run(p: &mut dyn Policy) -> ReplayResult {
    let scn = plan(&scenario(SMOKE), p.replicas()).unwrap();
    replay(&scn, p, slicesched_cost::CostModel::default_a100(), checked(), &mut |_| {})
}

#[test]
fn verdicts_are_the_core_checks_and_asking_changes_nothing() {
    let mut prober = Prober {
        inner: slicesched_policy::builtin("slice").unwrap(),
        tally: HashMap::new(),
        probes: Vec::new(),
        out: Vec::new(),
        delays: Vec::new(),
    };
    let asked = run(&mut prober);
    let plain = run(slicesched_policy::builtin("slice").unwrap().as_mut());
    assert_eq!(without_timing(&asked.summary), without_timing(&plain.summary));
    assert_eq!((asked.dependency_violations, asked.summary.oom_events), (0, 0));

    let t = &prober.tally;
    let count = |what: &str, v: Verdict| t.get(&(what, v)).copied().unwrap_or(0);
    let total = |what: &str| t.iter().filter(|((w, _), _)| *w == what).map(|(_, n)| n).sum::<u64>();
    // What cannot depend on the moment: home is always accepted, a group past the last
    // does not exist, attention stays home, a group without the weights is refused.
    assert!(total("home") > 1000, "{t:?}");
    assert_eq!(count("home", Verdict::Accepted), total("home"), "{t:?}");
    assert_eq!(count("past the last group", Verdict::NoSuchGroup), total("past the last group"));
    assert_eq!(count("attention away", Verdict::AttentionAway), total("attention away"));
    assert_eq!(count("not a holder", Verdict::WeightsMissing), total("not a holder"));
    // On a holder it depends on the moment: some borrows pass, some hit a guard.
    assert!(count("a holder", Verdict::Accepted) > 0, "{t:?}");
    assert!(total("a holder") > count("a holder", Verdict::Accepted), "{t:?}");
}

/// Each op where the what-if predicts it finishes first among accepted probes, asked
/// one op at a time.
#[derive(Default)]
struct Earliest {
    out: Vec<ProbeOutcome>,
    delays: Vec<TenantDelay>,
    chosen_away: u64,
}

impl Policy for Earliest {
    fn name(&self) -> &str {
        "earliest-core"
    }
    fn replicas(&self) -> ReplicaMode {
        ReplicaMode::Weights
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        let groups = view.deployment.groups.len() as u32;
        for r in ready {
            let probes: Vec<Probe> = std::iter::once(r.home)
                .chain((0..groups).map(GroupId).filter(|&g| g != r.home))
                .map(|group| Probe { op: r.op, group, priority: 0 })
                .collect();
            self.out.clear();
            view.what_if.ask(&probes, &mut self.out, &mut self.delays);
            let (p, _) = probes
                .iter()
                .zip(&self.out)
                .filter(|(_, o)| o.verdict == Verdict::Accepted)
                .min_by_key(|(_, o)| o.finish_ns)
                .expect("home is always accepted");
            self.chosen_away += u64::from(p.group != r.home);
            out.push(Placement { op: r.op, group: p.group, priority: 0 });
        }
    }
    /// Concurrent micro-batches are what make a tenant's home busy when its next op is
    /// ready, and so what gives borrowing a chance.
    fn admit(&mut self, _view: &View<'_>, inst: &InstanceView) -> bool {
        inst.inflight < 4 && (inst.inflight == 0 || inst.waiting > 0)
    }
}

#[test]
fn placements_the_what_if_accepts_are_accepted() {
    let mut p = Earliest::default();
    let r = run(&mut p);
    assert!(p.chosen_away > 0, "the rule borrowed nothing: the test would prove nothing");
    // Ops that follow a borrowed producer run away from home too.
    assert!(r.summary.scheduling.borrowed_ops >= p.chosen_away);
    let rejected: u64 = r.summary.rejected_placements.iter().map(|(_, n)| n).sum();
    assert_eq!(rejected, 0, "{:?}", r.summary.rejected_placements);
    assert_eq!((r.dependency_violations, r.summary.oom_events), (0, 0));
}
