//! The core places ops with no real choice of GPU (elementwise ops, collectives,
//! attention) with their producer, and asks the policy only about the rest.

mod common;

use common::{checked, scenario, TWO_TENANTS};
use slicesched_model::OpKind;
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};
use slicesched_sim::{plan, replay, ReplayOptions, ReplayResult};

/// The shipped `slice` policy, noting the kinds of op it was offered.
struct Offered {
    inner: Box<dyn Policy>,
    kinds: Vec<OpKind>,
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
        self.inner.place(view, ready, out);
    }
    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        self.inner.admit(view, inst)
    }
    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        self.inner.route(view, instances)
    }
}

fn run(follow_producer: bool) -> (ReplayResult, Vec<OpKind>) {
    let mut p = Offered { inner: slicesched_policy::builtin("slice").unwrap(), kinds: Vec::new() };
    let scn = plan(&scenario(TWO_TENANTS), p.replicas()).unwrap();
    let opts = ReplayOptions { follow_producer, ..checked() };
    let r = replay(&scn, &mut p, slicesched_cost::CostModel::default_a100(), opts, &mut |_| {});
    (r, p.kinds)
}

#[test]
fn the_policy_is_asked_only_about_ops_with_a_choice_of_gpu() {
    let (r, kinds) = run(true);
    let followed: Vec<_> = kinds.iter().filter(|k| k.follows_producer()).collect();
    assert!(followed.is_empty(), "offered ops that follow their producer: {followed:?}");
    assert!(kinds.contains(&OpKind::QkvProj) && kinds.contains(&OpKind::Embedding), "{kinds:?}");
    let s = &r.summary.scheduling;
    assert!(s.followed_ops > 0);
    assert!(s.followed_ops < s.placements);
    assert_eq!((r.dependency_violations, r.summary.oom_events), (0, 0));
}

#[test]
fn with_following_off_the_policy_decides_every_op() {
    let (on, _) = run(true);
    let (off, kinds) = run(false);
    assert_eq!(off.summary.scheduling.followed_ops, 0);
    assert!(kinds.contains(&OpKind::Attention) && kinds.contains(&OpKind::Rope), "{kinds:?}");
    // The same ops, far fewer policy calls.
    assert_eq!(on.summary.requests, off.summary.requests);
    assert!(
        on.summary.scheduling.decisions * 2 < off.summary.scheduling.decisions,
        "{} decisions following, {} not",
        on.summary.scheduling.decisions,
        off.summary.scheduling.decisions
    );
    assert_eq!((off.dependency_violations, off.summary.oom_events), (0, 0));
}
