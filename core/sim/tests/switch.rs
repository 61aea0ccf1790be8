//! Switching a running replay to another policy at a decision boundary: the switch
//! takes effect, nothing is dropped, and a policy needing another deployment is refused.

mod common;
use common::*;
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, SwitchHandle, Switchable, View};
use slicesched_sim::{plan, replay};

const SMOKE: &str = include_str!("../../../scenarios/smoke.toml");

/// Runs `first` and, at its `after`-th decision, asks for `next`.
struct SwitchAfter {
    first: Box<dyn Policy>,
    next: Option<Box<dyn Policy>>,
    after: u32,
    decisions: u32,
    handle: SwitchHandle,
}

impl Policy for SwitchAfter {
    fn name(&self) -> &str {
        self.first.name()
    }
    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        self.decisions += 1;
        if self.decisions == self.after {
            self.handle.request(self.next.take().expect("asked once"));
        }
        self.first.place(view, ready, out)
    }
    fn replicas(&self) -> ReplicaMode {
        self.first.replicas()
    }
    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        self.first.admit(view, inst)
    }
    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        self.first.route(view, instances)
    }
}

fn switching(first: &str, next: &str, after: u32) -> (Switchable, slicesched_sim::ReplayResult) {
    let handle = SwitchHandle::default();
    let wrapper = SwitchAfter {
        first: slicesched_policy::builtin(first).unwrap(),
        next: Some(slicesched_policy::builtin(next).unwrap()),
        after,
        decisions: 0,
        handle: handle.clone(),
    };
    let mut sw = Switchable::with_handle(Box::new(wrapper), handle);
    let scn = scenario(SMOKE);
    let planned = plan(&scn, sw.replicas()).unwrap();
    let r = replay(&planned, &mut sw, slicesched_cost::CostModel::default_a100(), checked(), &mut |_| {});
    (sw, r)
}

fn unswitched(name: &str) -> slicesched_sim::ReplayResult {
    let scn = scenario(SMOKE);
    let mut p = slicesched_policy::builtin(name).unwrap();
    let planned = plan(&scn, p.replicas()).unwrap();
    replay(&planned, p.as_mut(), slicesched_cost::CostModel::default_a100(), checked(), &mut |_| {})
}

#[test]
fn a_switch_takes_over_at_the_next_decision_and_drops_nothing() {
    let (sw, r) = switching("pooled", "timeslice", 200);
    assert_eq!(sw.switches, 1);
    assert_eq!(sw.name(), "timeslice");
    assert!(sw.last_refusal.is_none());
    assert_eq!(r.dependency_violations, 0);
    assert_eq!(r.summary.oom_events, 0);
    assert_eq!(r.summary.completed + r.summary.dropped, r.summary.requests, "every request completes or is dropped");
    // After the switch timeslice decides (and pays its context switches): the run is
    // not pooled's.
    let p = unswitched("pooled");
    assert_eq!(p.summary.requests, r.summary.requests);
    let strip = |s: &slicesched_sim::Summary| {
        let mut v = serde_json::to_value(s).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("timing");
        o.remove("policy");
        v
    };
    assert_ne!(strip(&r.summary), strip(&p.summary), "the switch changed the decisions after it");
}

#[test]
fn a_policy_needing_other_replicas_is_refused_and_the_run_goes_on() {
    let (sw, r) = switching("pooled", "dedicated", 50);
    assert_eq!(sw.switches, 0);
    assert_eq!(sw.name(), "pooled");
    assert!(sw.last_refusal.as_ref().is_some_and(|e| e.to_string().contains("replicas")), "{:?}", sw.last_refusal);
    assert_eq!(r.summary.oom_events, 0);
    assert!(r.summary.completed > 0);
}
