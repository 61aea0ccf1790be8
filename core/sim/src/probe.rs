//! The core's what-if, lent to a policy while it decides (`View::what_if`): for each
//! probe, the verdict the core's checks would give and the committed timeline's
//! prediction, from the committed state plus that one op.

use crate::place::OWNER_BOOST;
use crate::replay::Sim;
use slicesched_gmg::{OpState, TenantId};
use slicesched_policy::{Probe, ProbeOutcome, TenantDelay, Verdict, WhatIf};

impl WhatIf for Sim<'_> {
    fn what_if(&self, probes: &[Probe], out: &mut Vec<ProbeOutcome>, delays: &mut Vec<TenantDelay>) {
        for (k, p) in probes.iter().enumerate() {
            out.push(self.probe(k as u32, p, delays));
        }
    }
}

impl Sim<'_> {
    fn probe(&self, k: u32, p: &Probe, delays: &mut Vec<TenantDelay>) -> ProbeOutcome {
        let Some(r) = self.ready_view.iter().find(|r| r.op == p.op) else {
            return ProbeOutcome::empty(Verdict::NotOffered);
        };
        if self.gmg.op(p.op).state != OpState::Ready {
            return ProbeOutcome::empty(Verdict::NotOffered);
        }
        if p.group.index() >= self.scn.deployment.groups.len() {
            return ProbeOutcome::empty(Verdict::NoSuchGroup);
        }
        let c = self.costs(r.op, p.group);
        // The same checks, in the same order, as an answer gets (`Sim::check`); the
        // borrow check asks the timeline with the most urgent guest priority, the
        // prediction below with the probe's own, as `commit` would queue it.
        let verdict = self.check(r, p.group, &c).unwrap_or(Verdict::Accepted);
        let Some(cell) = self.timeline.as_ref() else {
            return ProbeOutcome {
                verdict,
                transfer_ns: c.xfer_ns,
                transfer_bytes: c.xfer_bytes,
                ..ProbeOutcome::empty(verdict)
            };
        };
        let owner = self.dev.queues[self.dev.queue_of(p.group, r.tenant)].owners.contains(&r.tenant);
        let prio = p.priority.clamp(-OWNER_BOOST + 1, OWNER_BOOST - 1) + if owner { OWNER_BOOST } else { 0 };
        let mem = r.out_bytes + c.xfer_bytes;
        let cand = self.candidate(r.op, r.tenant, p.group, c.dur, prio, self.now + c.xfer_ns, mem, u64::MAX);
        let mut w = self.whatif_scratch.take();
        let mut tl = cell.borrow_mut();
        tl.refresh();
        let outcome = match tl.what_if(std::slice::from_ref(&cand), &mut w) {
            Ok(()) => {
                let o = &w.candidates[0];
                delays.extend(w.tenant_delays.iter().map(|&(t, d)| TenantDelay {
                    probe: k,
                    tenant: TenantId(t),
                    delay_ns: d,
                }));
                ProbeOutcome {
                    verdict,
                    start_ns: o.start_ns,
                    finish_ns: o.finish_ns,
                    transfer_ns: c.xfer_ns,
                    transfer_bytes: c.xfer_bytes,
                    peak_bytes: o.peak_mem.iter().map(|&(_, b)| b).max().unwrap_or(0),
                }
            }
            Err(_) => ProbeOutcome::empty(Verdict::TimelineRefused),
        };
        self.whatif_scratch.put(w);
        outcome
    }
}
