//! `earliest`: an example of a policy that asks the core's what-if (interface 0.2.0).
//!
//! For each ready op it asks, in one batched call, what the op would get on its home
//! group and on every other group holding its weights, and places it where the core
//! would accept it and the committed timeline predicts it finishes first. The
//! prediction includes what a policy cannot see in the view: the transfers of every
//! input, the queue order the priority implies, other ops' dependencies, and the
//! memory peak; the verdict is the core's own checks, so an answer is never rejected.
//!
//! It is a greedy, one-op-at-a-time rule with no notion of SLA slack or of whom a
//! borrow delays (the answer's `delays` say, and a real policy would weigh them):
//! the shipped `slice` is the policy to run; this one shows the import.

use slicesched_plugin_sdk::{
    Info, Instance, OpKind, Placement, Policy, Probe, ReadyOp, ReplicaMode, Verdict, View, WhatIf, WhatIfAnswer,
};

#[derive(Debug, Default)]
pub struct Earliest {
    /// Per tenant, the groups holding some of its weights: (group, first layer, end
    /// layer), from `configure`.
    holders: Vec<Vec<(u32, u32, u32)>>,
    probes: Vec<Probe>,
    answer: WhatIfAnswer,
}

impl Policy for Earliest {
    fn info(&self) -> Info {
        Info { replicas: ReplicaMode::Weights, ..Info::new("earliest", env!("CARGO_PKG_VERSION")) }
    }

    fn configure(&mut self, view: &View) -> Result<(), String> {
        view.weight_holders(&mut self.holders);
        Ok(())
    }

    fn place_with_what_if(
        &mut self,
        view: &View,
        ready: &[ReadyOp],
        what_if: &mut dyn WhatIf,
        out: &mut Vec<Placement>,
    ) -> Result<(), String> {
        // One probe per candidate group, home first, all ops in one call.
        self.probes.clear();
        for (k, r) in ready.iter().enumerate() {
            let op = k as u32;
            self.probes.push(Probe { op, group: r.home, priority: 0 });
            if r.kind == OpKind::Attention {
                continue;
            }
            let layers = view.tenants.get(r.tenant as usize).map_or(0, |t| t.layers);
            for &(group, first, end) in self.holders.get(r.tenant as usize).into_iter().flatten() {
                let holds = match r.layer {
                    Some(l) => first <= l && l < end,
                    None => first == 0 && end == layers,
                };
                if group != r.home && holds {
                    self.probes.push(Probe { op, group, priority: 0 });
                }
            }
        }
        what_if.ask(&self.probes, &mut self.answer);
        // The earliest accepted finish per op; home wins ties (it was asked first).
        let mut best: Option<(u32, u64, u32)> = None;
        for (p, o) in self.probes.iter().zip(&self.answer.outcomes) {
            if best.is_some_and(|b| b.0 != p.op) {
                let (op, _, group) = best.take().expect("checked");
                out.push(Placement { op, group, priority: 0 });
            }
            if o.verdict == Verdict::Accepted && best.is_none_or(|b| o.finish_ns < b.1) {
                best = Some((p.op, o.finish_ns, p.group));
            }
        }
        if let Some((op, _, group)) = best {
            out.push(Placement { op, group, priority: 0 });
        }
        // Ops with no accepted probe (none, in practice: home is always accepted) are
        // left out and run home.
        Ok(())
    }

    /// Up to 4 micro-batches at once while requests wait: only then is a tenant's home
    /// busy when its next op is ready, so only then can another group finish it first.
    fn admit(&mut self, _view: &View, inst: &Instance) -> Result<bool, String> {
        Ok(inst.inflight == 0 || (inst.inflight < 4 && inst.waiting > 0))
    }
}

slicesched_plugin_sdk::export_policy!(Earliest);
