//! Decode pacing: an owner's decode-only steps keep to a share of its TPOT target while
//! another tenant could use its GPUs.
//!
//! An engine runs decode steps back to back (vLLM does), so a GPU whose owner has a
//! few requests decoding is busy all the time, though its SLA needs a step only every
//! TPOT target: a 7B model's step takes ~10 ms on an H100 against a 40–65 ms target.
//! Owners' ops go first at every op boundary (`place::OWNER_BOOST`), so a serving copy
//! or a borrowed op on that GPU gets only the gaps between iterations, and the planner,
//! which prices a load's decode steps at the pace its TPOT target needs
//! (`load::ServiceCost`), counts on slices that are never there. While another tenant
//! is using the owner's GPUs — its serving copy there holds requests, or its borrowed
//! ops are there — the owner's next decode-only step reaches the GPUs no sooner than
//! [`PACE_SHARE`] of its TPOT target after the previous one: the time between is the
//! guests', and the owner's next need (`owner_need_ns` in the view, what the core's
//! guard and the policies read) is that launch. A request arriving at a paced instance,
//! or any other work it can schedule, launches the paced step at once: a paced owner
//! never makes a prefill wait. Nothing changes where no other tenant holds weights on
//! the GPUs (`dedicated`, and co-located homes: those are owners alike).
//!
//! Measured on the 20 mixes of `scenarios/family` (300 s, each at the larger of
//! `pooled`'s and `slice`'s full-length 9% rate scales; mean violation rate): `slice`
//! 10.03% -> 7.23%, `pooled` 10.63% -> 6.74%, `dedicated` unchanged; `azure-code-4t`
//! (`slice`, rate scale 1.139 / 0.393) 8.40% -> 8.36% / 1.10% -> 0.76%; `bursty-8t`
//! (5.187 / 3.712) 8.54% -> 7.25% / 0.96% -> 0.68%. Pacing whenever a tenant with a
//! copy on the GPUs had requests anywhere (it might borrow or be routed there) gave
//! `slice` 7.36% on the mixes but `azure-code-4t` 10.31% and `bursty-8t` 10.05% at their
//! higher scales: owners slowed for guests that did not come. A 0.35 share gave `slice`
//! 7.99%, 0.7 6.92% (with the wider rule); half the target keeps the owner's margin.

use slicesched_engine::BatchId;

use crate::replay::{Ev, Sim};

/// The longest gap between an owner's paced decode steps, as a share of its TPOT
/// target: its requests' mean TPOT stays near half the target, leaving the other half
/// for steps that carry a prefill chunk and for a guest's op that is running when the
/// step launches.
pub(crate) const PACE_SHARE: f64 = 0.5;

/// Who could use a home's GPUs while its decode steps wait.
#[derive(Debug, Clone, Default)]
pub(crate) struct PaceGuests {
    /// Other tenants' serving copies on its GPUs (instance indices).
    pub copies: Vec<u32>,
    /// Another tenant holds weights on its GPUs (its ops may be borrowed there).
    pub borrowed: bool,
}

/// A decode step waiting for its paced launch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paced {
    pub batch: BatchId,
    /// When its CPU overhead is over (it launches no sooner).
    pub ready_at: u64,
    /// Tells a stale [`Ev::Paced`] (its step launched early) from the current one.
    pub token: u32,
}

impl Sim<'_> {
    /// Per home instance, who could use its GPUs: other tenants' serving copies on them
    /// (instances), and whether any other tenant holds weights there at all.
    pub(crate) fn init_pacing(&mut self) {
        let dep = &self.scn.deployment;
        let n = self.insts.len();
        self.pace_guests = (0..n)
            .map(|i| {
                let rt = &self.insts[i];
                let mut g = PaceGuests::default();
                if !rt.is_home || !self.opts.decode_pacing {
                    return g;
                }
                let gpus = &dep.group(rt.group).gpus;
                let shares = |group| dep.group(group).gpus.iter().any(|x| gpus.contains(x));
                // The instances sharing its GPUs, as the fast path found them.
                g.copies = self.fast.shared[i]
                    .0
                    .iter()
                    .copied()
                    .filter(|&j| {
                        let o = &self.insts[j as usize];
                        !o.is_home && o.tenant != rt.tenant
                    })
                    .collect();
                g.borrowed = dep.homes.iter().any(|h| !h.is_home && h.tenant != rt.tenant && shares(h.group));
                g
            })
            .collect();
    }

    /// When a batch ready at `ready_at` reaches the GPUs: then, or for a home's
    /// decode-only step while another tenant could use its GPUs, its paced time.
    pub(crate) fn paced_launch(&self, inst: usize, batch: BatchId, ready_at: u64) -> u64 {
        let rt = &self.insts[inst];
        let g = &self.pace_guests[inst];
        if !g.borrowed || rt.last_decode_launch == u64::MAX {
            return ready_at;
        }
        if !decode_only(rt.engine.batch(batch)) {
            return ready_at;
        }
        let working = |j: usize| {
            let o = &self.insts[j];
            o.inflight > 0 || o.engine.queue_lengths() != (0, 0)
        };
        // A serving copy there holding requests, or borrowed ops there now (their
        // activations are held from placement to the last consumer).
        let wanted = g.copies.iter().any(|&j| working(j as usize))
            || self.scn.deployment.group(rt.group).gpus.iter().any(|x| self.stats.guest_bytes[x.0 as usize] > 0);
        if !wanted {
            return ready_at;
        }
        let gap = (self.scn.tenants[rt.tenant.index()].sla.tpot_target_ns() as f64 * PACE_SHARE) as u64;
        ready_at.max(rt.last_decode_launch.saturating_add(gap))
    }

    /// Holds `batch` until `at` (later than its ready time).
    pub(crate) fn pace(&mut self, inst: usize, batch: BatchId, ready_at: u64, at: u64) {
        self.pace_seq = self.pace_seq.wrapping_add(1);
        let token = self.pace_seq;
        self.insts[inst].paced = Some(Paced { batch, ready_at, token });
        self.paced_steps += 1;
        self.push(at, Ev::Paced(inst as u32, token));
    }

    /// A paced step's time came.
    pub(crate) fn paced_due(&mut self, inst: usize, token: u32) {
        match self.insts[inst].paced {
            Some(p) if p.token == token => {
                self.insts[inst].paced = None;
                self.launch(inst, p.batch);
            }
            _ => {}
        }
    }

    /// The instance has other work: its paced step launches as soon as it is ready.
    pub(crate) fn unpace(&mut self, inst: usize) {
        if let Some(p) = self.insts[inst].paced.take() {
            let at = p.ready_at.max(self.now);
            self.insts[inst].next_launch = self.insts[inst].next_launch.min(at);
            self.push(at, Ev::Launch(inst as u32, p.batch));
        }
    }
}

/// A batch of decode steps and nothing else: what pacing holds back.
pub(crate) fn decode_only(b: &slicesched_model::IterationBatch) -> bool {
    b.prefills.is_empty() && !b.decodes.is_empty()
}
