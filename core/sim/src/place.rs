//! From ready ops to running ops: the policy's view, its answer, the core's checks of
//! every placement, transfers, group queues and op starts.

use crate::replay::{Ev, Sim};
use slicesched_gmg::{GroupId, MemoryKind, OpId, OpState, TenantId};
use slicesched_model::OpKind;
use slicesched_policy::{InstanceView, ReadyOp, TenantView, Verdict, View};

/// The policy's view, borrowing only the fields it shows (so the policy itself and
/// the output buffers stay mutably borrowable).
macro_rules! view {
    ($s:expr) => {
        View {
            now_ns: $s.now,
            cluster: &$s.scn.cluster,
            deployment: $s.copies.dep(&$s.scn.deployment),
            gpu_busy_until: &$s.busy_until,
            gpu_queued_ns: &$s.queued_ns,
            gpu_owner_need_ns: &$s.owner_need,
            tenants: &$s.tenant_views,
            instances: &$s.inst_views,
            group_links: &$s.group_links,
            epoch: $s.epoch,
            what_if: Default::default(),
        }
    };
}
pub(crate) use view;

/// Owners' ops go first at every op boundary, whatever priority a policy gives.
pub(crate) const OWNER_BOOST: i32 = 1 << 24;

/// A reusable what-if answer buffer, lent out from `&self` checks.
#[derive(Default)]
pub(crate) struct Scratch(std::cell::Cell<Option<slicesched_whatif::WhatIf>>);

impl Scratch {
    pub(crate) fn take(&self) -> slicesched_whatif::WhatIf {
        self.0.take().unwrap_or_default()
    }
    pub(crate) fn put(&self, w: slicesched_whatif::WhatIf) {
        self.0.set(Some(w));
    }
}

/// The transfer and run time of an op on a group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Costs {
    pub xfer_ns: u64,
    pub xfer_bytes: u64,
    pub dur: u64,
}

/// Counters of placement decisions.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlaceStats {
    pub decisions: u64,
    pub placed: u64,
    pub borrowed: u64,
    pub transfers: u64,
    pub transfer_bytes: u64,
    /// Wall time of each decision (a sketch: a live loop decides for ever).
    pub decision_wall: crate::sketch::Sketch,
    pub decision_wall_total_ns: u64,
    /// Per GPU: busy ns spent on ops of tenants it is not home to.
    pub guest_busy_ns: Vec<u64>,
    /// Per GPU: activation bytes of borrowed ops alive now.
    pub guest_bytes: Vec<u64>,
    /// Per op slot: guest bytes to release when it ends (inputs copied in, output).
    pub op_guest: Vec<u64>,
    /// Per op slot: the priority its placement was given (before the owner boost), for
    /// the ops that follow it.
    pub op_prio: Vec<i32>,
    /// Ops the core placed with their producer (no policy call).
    pub followed: u64,
    /// Borrowed ops taken back before they started, because their lender's owner came
    /// back (`Sim::recall_guests`), and the scratch lists of them and of their costs at home.
    pub recalled: u64,
    pub recall_buf: Vec<(OpId, i32, u64)>,
    pub(crate) recall_costs: Vec<Costs>,
}

impl PlaceStats {
    pub fn new(gpus: usize) -> Self {
        Self { guest_busy_ns: vec![0; gpus], guest_bytes: vec![0; gpus], ..Default::default() }
    }
}

impl Sim<'_> {
    /// Refreshes the per-GPU and per-tenant figures the policy sees.
    pub(crate) fn build_views(&mut self) {
        self.build_gpu_views();
        self.build_tenant_views();
    }

    /// Refreshes the per-GPU figures (`busy_until`, `queued_ns`, `owner_need`): what the
    /// core's checks of a placement away from home read.
    pub(crate) fn build_gpu_views(&mut self) {
        let now = self.now;
        for (i, g) in self.dev.gpus.iter().enumerate() {
            self.busy_until[i] = if g.busy() { g.busy_until } else { now };
            self.queued_ns[i] = 0;
            self.owner_need[i] = u64::MAX;
        }
        for q in &self.dev.queues {
            let ns = q.queued_ns();
            for &x in &q.gpus {
                self.queued_ns[x] += ns;
            }
        }
        self.fast_views();
        for rt in &self.insts {
            if rt.is_home {
                // The owner needs its GPUs now when it has work executing or schedulable,
                // else at its next launch.
                let need = if rt.inflight > 0 && rt.next_launch == u64::MAX || rt.engine.has_schedulable() {
                    now
                } else {
                    rt.next_launch
                };
                for g in &self.scn.deployment.group(rt.group).gpus {
                    let slot = &mut self.owner_need[g.0 as usize];
                    *slot = (*slot).min(need);
                }
            }
        }
    }

    fn build_tenant_views(&mut self) {
        let now = self.now;
        self.tenant_views.clear();
        for (i, t) in self.scn.tenants.iter().enumerate() {
            let home = &self.insts[self.tenant_insts[i][0] as usize];
            let slack = match home.engine.oldest_waiting() {
                Some(seq) => {
                    let r = &self.records[home.seq_to_req[seq.0 as usize] as usize];
                    (r.arrival_ns + r.ttft_target_ns) as i64 - now as i64
                }
                None => i64::MAX,
            };
            self.tenant_views.push(TenantView {
                tenant: TenantId(i as u32),
                home: home.group,
                layers: t.model.num_hidden_layers as u32,
                slack_ns: slack,
                tpot_target_ns: t.sla.tpot_target_ns(),
            });
        }
    }

    /// Refreshes the per-instance figures (for `admit` and `route`).
    pub(crate) fn build_instance_views(&mut self) {
        for i in 0..self.insts.len() {
            self.kv_refresh(i);
        }
        self.inst_views.clear();
        for (i, rt) in self.insts.iter().enumerate() {
            let (w, r) = rt.engine.queue_lengths();
            self.inst_views.push(InstanceView {
                index: i as u32,
                tenant: rt.tenant,
                group: rt.group,
                is_home: rt.is_home,
                waiting: w as u32,
                running: r as u32,
                inflight: rt.inflight,
                kv_free_blocks: rt.engine.kv_blocks_free(),
                kv_total_blocks: rt.engine.kv_blocks_total(),
                prefill_tokens: rt.engine.prefill_backlog(),
                batch_tokens: rt.engine.config().max_batched_tokens,
            });
        }
    }

    /// Asks the policy, validates its answer, and queues every ready op somewhere safe.
    /// `producer`: the op whose end made `ready` ready (None at an iteration's launch).
    pub(crate) fn place(&mut self, ready: &[OpId], producer: Option<OpId>) {
        if ready.is_empty() {
            return;
        }
        self.ready_view.clear();
        self.followers.clear();
        let follow = self.opts.follow_producer && producer.is_some();
        for &op in ready {
            if follow && self.gmg.op(op).kind.follows_producer() {
                self.followers.push(self.follower_op(op));
            } else {
                let r = self.ready_op(op);
                self.ready_view.push(r);
            }
        }
        if let Some(p) = producer {
            self.follow(p);
        }
        if self.ready_view.is_empty() {
            return;
        }
        // A decision batch is the view, the policy call and the core's checks (what-ifs
        // included). Timing every one would cost more than many decisions: sample 1/64.
        let t0 = (self.opts.time_decisions && self.stats.decisions.is_multiple_of(64)).then(std::time::Instant::now);
        let sample = self.rec.decisions_every > 0 && self.stats.decisions.is_multiple_of(self.rec.decisions_every);
        let (borrowed0, rejected0) = (self.stats.borrowed, self.rec.rejected_total);
        if self.policy.reads_view() {
            self.build_views();
        }
        let mut placements = std::mem::take(&mut self.placements);
        placements.clear();
        {
            // The policy may ask the core's what-if (`crate::probe`) about the batch
            // while it decides: lend it the simulator's state read-only, with the
            // policy itself set aside for the call.
            let policy = std::mem::replace(&mut self.policy, Box::leak(Box::new(Unset)));
            let mut view = view!(self);
            if self.timeline.is_some() {
                view.what_if = slicesched_policy::WhatIfHandle(Some(&*self));
            }
            policy.place(&view, &self.ready_view, &mut placements);
            self.policy = policy;
        }
        // As in `follow`: the checks away from home read the GPUs' state as of now.
        if !self.policy.reads_view()
            && placements.iter().any(|p| self.ready_view.iter().any(|r| r.op == p.op && r.home != p.group))
        {
            self.build_gpu_views();
        }
        self.stats.decisions += 1;

        for p in &placements {
            let Some(r) = self.ready_view.iter().find(|r| r.op == p.op).copied() else {
                self.reject(Verdict::NotOffered.reason());
                continue;
            };
            if self.gmg.op(p.op).state != OpState::Ready {
                self.reject("op placed twice");
                continue;
            }
            let verdict = if p.group.index() >= self.scn.deployment.groups.len() {
                Err(Verdict::NoSuchGroup)
            } else {
                let c = self.costs_of(&r, p.group);
                self.check(&r, p.group, &c).map_or(Ok((p.group, c)), Err)
            };
            let (group, c) = verdict.unwrap_or_else(|v| {
                self.reject(v.reason());
                (r.home, self.costs_of(&r, r.home))
            });
            self.commit(&r, group, p.priority, c);
        }
        self.placements = placements;
        for i in 0..self.ready_view.len() {
            let r = self.ready_view[i];
            if self.gmg.op(r.op).state == OpState::Ready {
                self.reject("op left unplaced");
                let c = self.costs_of(&r, r.home);
                self.commit(&r, r.home, 0, c);
            }
        }
        if let Some(t0) = t0 {
            let ns = t0.elapsed().as_nanos() as u64;
            self.stats.decision_wall.record(ns);
            self.stats.decision_wall_total_ns += ns;
        }
        if sample {
            self.rec.decisions.push(crate::DecisionRecord {
                at_ns: self.now,
                ready_ops: self.ready_view.len() as u32,
                borrowed: (self.stats.borrowed - borrowed0) as u32,
                rejected: (self.rec.rejected_total - rejected0) as u32,
            });
        }
    }

    /// What the policy is shown of a ready op: [`Sim::follower_op`] with its largest
    /// input's group and size and its batch's make-up.
    fn ready_op(&self, op: OpId) -> ReadyOp {
        let mut r = self.follower_op(op);
        for p in self.gmg.inputs(op) {
            let pn = self.gmg.op(p);
            if pn.out_bytes >= r.input_bytes {
                r.input_bytes = pn.out_bytes;
                r.input_group = pn.group;
            }
        }
        let it = self.iter_of(op);
        let b = self.insts[it.inst as usize].engine.batch(it.batch);
        r.prefill_tokens = b.prefills.iter().map(|p| p.chunk).sum();
        r.decodes = b.decodes.len() as u32;
        r
    }

    /// A ready op that follows its producer: what `follow`, `check` and `commit` read
    /// of it. The figures only a policy reads (its inputs, its batch) are left out:
    /// followers are never offered to one, and finding them cost a scan of the op's
    /// inputs and of its batch's prefills for two ops in three.
    fn follower_op(&self, op: OpId) -> ReadyOp {
        let n = self.gmg.op(op);
        let it = self.iter_of(op);
        ReadyOp {
            op,
            tenant: n.tenant,
            kind: n.kind,
            layer: n.layer,
            predicted_ns: n.predicted_ns,
            home: self.insts[it.inst as usize].group,
            ready_ns: n.ready_ns,
            input_group: None,
            input_bytes: 0,
            out_bytes: n.out_bytes,
            instance: it.inst,
            prefill_tokens: 0,
            decodes: 0,
        }
    }

    /// Places the ops made ready by `producer`'s end that have no real choice of GPU
    /// ([`OpKind::follows_producer`]) where it ran, with its priority, unless an
    /// invariant refuses it there (then home: attention always goes home this way). A
    /// norm, an add or an activation reads one activation and multiplies nothing:
    /// moving it away from its input costs a copy longer than the kernel, and serving
    /// stacks fuse such kernels into their neighbours; a collective runs where its
    /// sharded matmul ran. Policies decide the ops with weights to place (GEMMs,
    /// embedding, LM head); not asking them about the rest cuts a replay's policy calls
    /// by about two thirds (README, Wasm figures).
    fn follow(&mut self, producer: OpId) {
        if self.followers.is_empty() {
            return;
        }
        let group = self.gmg.op(producer).group.expect("a finished op ran somewhere");
        let prio = self.stats.op_prio.get(producer.raw() as usize).copied().unwrap_or(0);
        let followers = std::mem::take(&mut self.followers);
        // The checks of an op away from home read the GPUs' state (`busy_until`,
        // `queued_ns`, `owner_need`), which is built for the policy's calls: as of the
        // last call it would depend on how often the policy is asked, and the fast path
        // asks it less (on mix-6t under `slice` the two paths parted at 32 s when a
        // follower of a borrowed chain was judged on a 6-ms-old owner guard).
        if followers.iter().any(|r| r.home != group) {
            self.build_gpu_views();
        }
        for r in &followers {
            let c = self.costs_of(r, group);
            let (group, c) = match self.check(r, group, &c) {
                None => (group, c),
                Some(_) => (r.home, self.costs_of(r, r.home)),
            };
            self.stats.followed += 1;
            self.commit(r, group, prio, c);
        }
        self.followers = followers;
    }

    /// What running `op` on `group` costs, computed once per placement and shared by
    /// the checks, the timeline and the queue.
    pub(crate) fn costs(&self, op: OpId, group: GroupId) -> Costs {
        let (xfer_ns, xfer_bytes) = self.transfer(op, group);
        Costs { xfer_ns, xfer_bytes, dur: self.duration(op, group) }
    }

    /// [`Sim::costs`] of a ready op, whose home prediction is at hand.
    pub(crate) fn costs_of(&self, r: &ReadyOp, group: GroupId) -> Costs {
        let (xfer_ns, xfer_bytes) = self.transfer(r.op, group);
        let dur = if group == r.home { r.predicted_ns } else { self.duration(r.op, group) };
        Costs { xfer_ns, xfer_bytes, dur }
    }

    /// Nanoseconds to bring the op's inputs to `group`, and the bytes copied.
    fn transfer(&self, op: OpId, group: GroupId) -> (u64, u64) {
        let to = self.scn.deployment.group(group).gpus[0];
        let (mut ns, mut bytes) = (0, 0);
        for p in self.gmg.inputs(op) {
            let pn = self.gmg.op(p);
            let from = pn.group.expect("inputs are placed");
            if from != group {
                let link = self.scn.cluster.link(self.scn.deployment.group(from).gpus[0], to);
                ns = ns.max(link.transfer_ns(pn.out_bytes));
                bytes += pn.out_bytes;
            }
        }
        (ns, bytes)
    }

    /// Why a placement on an existing group breaks an invariant, if it does.
    pub(crate) fn check(&self, r: &ReadyOp, group: GroupId, c: &Costs) -> Option<Verdict> {
        let dep = self.copies.dep(&self.scn.deployment);
        if group == r.home {
            return None;
        }
        if r.kind == OpKind::Attention {
            return Some(Verdict::AttentionAway);
        }
        let layers = self.scn.tenants[r.tenant.index()].model.num_hidden_layers as u32;
        if !dep.holds(r.tenant, group, r.layer, layers) {
            return Some(Verdict::WeightsMissing);
        }
        // Memory safety: a borrowed op lives in the host's guest reserve.
        let (xfer_ns, dur) = (c.xfer_ns, c.dur);
        let need = r.out_bytes + c.xfer_bytes;
        let gpus = &dep.group(group).gpus;
        if gpus.iter().any(|g| {
            self.stats.guest_bytes[g.0 as usize] + need > self.scn.guest_reserve.get(g.0 as usize).copied().unwrap_or(0)
        }) {
            return Some(Verdict::GuestMemory);
        }
        // SLA protection: the borrowed op must be done before the owner needs its GPU,
        // give or take a tenth of the owner's TPOT target.
        let start =
            gpus.iter().map(|g| self.busy_until[g.0 as usize] + self.queued_ns[g.0 as usize]).max().unwrap_or(self.now);
        let finish = start.max(self.now + xfer_ns) + dur;
        for g in gpus {
            if let Some(owner) = dep.owner_of(*g) {
                if owner == r.tenant {
                    continue;
                }
                let guard = self.scn.tenants[owner.index()].sla.tpot_target_ns() / 10;
                if dur > guard || finish > self.owner_need[g.0 as usize].saturating_add(guard) {
                    return Some(Verdict::OwnerGuard);
                }
            }
        }
        self.what_if_check(r, group, dur, xfer_ns, need)
    }

    /// Asks the committed timeline what the borrow does: it must fit in memory and
    /// must not push any committed op of the GPU's owners back past their guard.
    fn what_if_check(&self, r: &ReadyOp, group: GroupId, dur: u64, xfer_ns: u64, mem: u64) -> Option<Verdict> {
        // Predictions are brought up to date only when asked (the timeline only records
        // what changed): most placements never ask.
        let mut tl = self.timeline.as_ref()?.borrow_mut();
        tl.refresh();
        let cand = self.candidate(r.op, r.tenant, group, dur, OWNER_BOOST - 1, self.now + xfer_ns, mem, u64::MAX);
        let mut out = self.whatif_scratch.take();
        let verdict = match tl.what_if(std::slice::from_ref(&cand), &mut out) {
            Err(_) => Some(Verdict::TimelineRefused),
            Ok(()) if !out.candidates.first().is_some_and(|c| c.fits) => Some(Verdict::MemoryOverCapacity),
            Ok(()) => {
                let owners = &self.dev.queues[self.dev.queue_of(group, r.tenant)].owners;
                out.tenant_delays.iter().find_map(|&(t, delay)| {
                    let t = TenantId(t);
                    let guard = self.scn.tenants[t.index()].sla.tpot_target_ns() / 10;
                    (t != r.tenant && owners.contains(&t) && delay > guard).then_some(Verdict::DelaysOwner)
                })
            }
        };
        self.whatif_scratch.put(out);
        verdict
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn candidate(
        &self,
        op: OpId,
        tenant: TenantId,
        group: GroupId,
        dur: u64,
        prio: i32,
        ready: u64,
        mem: u64,
        key: u64,
    ) -> slicesched_whatif::Candidate {
        slicesched_whatif::Candidate {
            key: slicesched_whatif::OpKey(key),
            gpus: self.scn.deployment.group(group).gpus.iter().map(|g| g.0).collect(),
            duration_ns: dur,
            priority: prio,
            tenant: tenant.0,
            ready_ns: ready.max(self.gmg.op(op).ready_ns),
            deps: Default::default(),
            mem_bytes: mem,
        }
    }

    pub(crate) fn reject(&mut self, reason: &str) {
        self.rec.rejected_total += 1;
        match self.rejected.iter_mut().find(|(r, _)| r == reason) {
            Some((_, n)) => *n += 1,
            None => self.rejected.push((reason.to_string(), 1)),
        }
    }

    /// Predicted ns of `op` on `group`.
    fn duration(&self, op: OpId, group: GroupId) -> u64 {
        let node = self.gmg.op(op);
        let it = self.iter_of(op);
        if group == self.insts[it.inst as usize].group {
            return node.predicted_ns;
        }
        let spec = it.dag.op(node.index).spec;
        let ns = self.cost.op_ns(&self.group_ctx[group.index()], spec).max(1);
        self.exec.as_deref().map_or(ns, |x| ((ns as f64 * x.correction(spec)) as u64).max(1))
    }

    fn commit(&mut self, r: &ReadyOp, group: GroupId, priority: i32, c: Costs) {
        self.gmg.place(r.op, group);
        self.stats.placed += 1;
        let slot = r.op.raw() as usize;
        if self.stats.op_prio.len() <= slot {
            self.stats.op_prio.resize(slot + 1, 0);
        }
        self.stats.op_prio[slot] = priority;
        let owner = self.dev.queues[self.dev.queue_of(group, r.tenant)].owners.contains(&r.tenant);
        let prio = priority.clamp(-OWNER_BOOST + 1, OWNER_BOOST - 1) + if owner { OWNER_BOOST } else { 0 };
        let Costs { xfer_ns: ns, xfer_bytes: bytes, dur } = c;
        if group != r.home {
            self.stats.borrowed += 1;
            self.copy_op(r.tenant, group, true);
            let need = r.out_bytes + bytes;
            for g in &self.scn.deployment.group(group).gpus {
                self.stats.guest_bytes[g.0 as usize] += need;
            }
            let slot = r.op.raw() as usize;
            if self.stats.op_guest.len() <= slot {
                self.stats.op_guest.resize(slot + 1, 0);
            }
            // The input copies go at the op's end, the output when its consumers end.
            self.stats.op_guest[slot] = bytes;
        }
        if self.rec.recording() {
            self.rec.set_xfer(r.op.raw() as usize, ns);
        }
        if bytes > 0 {
            self.stats.transfers += 1;
            self.stats.transfer_bytes += bytes;
        }
        if self.timeline.is_some() {
            let key = self.next_key;
            self.next_key += 1;
            let slot = r.op.raw() as usize;
            if self.op_keys.len() <= slot {
                self.op_keys.resize(slot + 1, 0);
            }
            self.op_keys[slot] = key;
            let cand = self.candidate(r.op, r.tenant, group, dur, prio, self.now + ns, r.out_bytes + bytes, key);
            if let Some(tl) = self.timeline.as_mut().map(std::cell::RefCell::get_mut) {
                tl.advance(self.now);
                tl.insert(cand).expect("keys are unique and groups exist");
            }
        }
        if ns == 0 {
            self.enqueue(r.op, group, prio, dur);
        } else {
            self.push(self.now + ns, Ev::Enqueue(r.op, group, prio, dur));
        }
    }

    pub(crate) fn enqueue(&mut self, op: OpId, group: GroupId, prio: i32, dur: u64) {
        let tenant = self.gmg.op(op).tenant;
        let q = self.dev.queue_of(group, tenant);
        // The common case on a container's own GPUs: nothing to order, start now.
        if self.dev.can_start_now(q) {
            self.start_op(q, op, dur);
            return;
        }
        if self.opts.recall_guests && self.dev.queues[q].owners.contains(&tenant) {
            self.recall_guests(q, op);
        }
        let borrowed = group != self.insts[self.iter_of(op).inst as usize].group;
        self.dev.enqueue(q, op, prio, dur, borrowed);
        self.try_start(q);
    }

    /// An owner's op (`owner_op`) waits on queue `q`: a borrowed op waiting on the
    /// same GPUs goes back to its home when it would be done there sooner. The owner's
    /// ops go first at every op boundary, so a borrowed op queued there waits out the
    /// rest of the owner's iteration (a layer of experts then waits for its slowest
    /// one, every layer), though the check that let it borrow had predicted it done
    /// before the owner came back. At home it is the owner's op. Its copy to the
    /// lender is lost time; the lender's guest memory held for it is released.
    fn recall_guests(&mut self, q: usize, owner_op: OpId) {
        let mut waiting = std::mem::take(&mut self.stats.recall_buf);
        waiting.clear();
        self.dev.borrowed_waiting(q, &mut waiting);
        if waiting.is_empty() {
            self.stats.recall_buf = waiting;
            return;
        }
        // The owner's iteration ahead of them, op by op: what the lender still owes it.
        let info = self.gmg.iteration(self.gmg.op(owner_op).iter);
        let owed: u64 = info
            .ops
            .iter()
            .map(|&o| self.gmg.op(o))
            .filter(|n| n.state != OpState::Done && n.state != OpState::Running)
            .map(|n| n.predicted_ns)
            .sum();
        // The bound counts the borrowed ops themselves among the queued work: each is
        // added back in its turn below.
        let theirs: u64 = waiting.iter().map(|w| w.2).sum();
        let mut lender_free = self.dev.start_bound(q, self.now).saturating_sub(theirs).max(self.now) + owed;
        // The costs at home are kept for the commit: a waiting op's inputs are done, so
        // recalling the others changes none of them.
        let mut home_costs = std::mem::take(&mut self.stats.recall_costs);
        home_costs.clear();
        waiting.retain(|&(op, _, dur)| {
            let at_lender = lender_free + dur;
            lender_free = at_lender;
            let home = self.insts[self.iter_of(op).inst as usize].group;
            let c = self.costs(op, home);
            let hq = self.dev.queue_of(home, self.gmg.op(op).tenant);
            let at_home = self.dev.start_bound(hq, self.now).max(self.now + c.xfer_ns) + c.dur;
            let recall = at_home < at_lender;
            if recall {
                home_costs.push(c);
            }
            recall
        });
        self.dev.take(q, &waiting);
        for (&(op, _, _), &c) in waiting.iter().zip(&home_costs) {
            let n = self.gmg.op(op);
            let (tenant, group, out_bytes) = (n.tenant, n.group.expect("a queued op is placed"), n.out_bytes);
            let slot = op.raw() as usize;
            let copied = std::mem::take(&mut self.stats.op_guest[slot]);
            for g in &self.scn.deployment.group(group).gpus {
                self.stats.guest_bytes[g.0 as usize] -= out_bytes + copied;
            }
            self.copy_op(tenant, group, false);
            if let Some(tl) = self.timeline.as_mut().map(std::cell::RefCell::get_mut) {
                tl.withdraw(slicesched_whatif::OpKey(self.op_keys[slot])).expect("a queued op is in the timeline");
            }
            self.gmg.unplace(op);
            self.stats.borrowed -= 1;
            self.stats.recalled += 1;
            let r = self.ready_op(op);
            self.commit(&r, r.home, self.stats.op_prio[slot], c);
        }
        self.stats.recall_buf = waiting;
        self.stats.recall_costs = home_costs;
    }

    pub(crate) fn try_start(&mut self, around: usize) {
        while let Some((q, op, dur)) = self.dev.next_startable(around) {
            self.start_op(q, op, dur);
        }
    }

    /// The op's duration as its GPU runs it now: a context switch first if another
    /// tenant ran last and the policy's processes pay for it; under spatial sharing,
    /// slowed by its lane's share of the SMs and by concurrent lanes on the bandwidth.
    fn effective_duration(&self, q: usize, op: OpId, tenant: TenantId, dur: u64) -> u64 {
        let switch = self.policy.context_switch_ns();
        let mut d = dur;
        if switch > 0
            && self.dev.queues[q].gpus.iter().any(|&g| self.dev.gpus[g].last_tenant.is_some_and(|t| t != tenant))
        {
            d += switch;
        }
        let lanes = self.dev.queues[q].max_lanes;
        if lanes > 1 {
            let node = self.gmg.op(op);
            let it = self.iter_of(op);
            let spec = it.dag.op(node.index).spec;
            let sku = &self.group_ctx[self.dev.queues[q].group.index()].sku;
            let (tc, tm) = (spec.flops as f64 / sku.peak_flops, spec.bytes as f64 / sku.hbm_bw);
            let compute = if tc + tm > 0.0 { tc / (tc + tm) } else { 0.0 };
            let share = 1.0 / lanes as f64;
            // A kernel on a fraction s of the SMs computes s as fast; half the SMs
            // already saturate HBM; busy neighbours split the bandwidth.
            let others = self.dev.others_busy(q) as f64;
            let slow =
                compute / share + (1.0 - compute) * (1.0 / (2.0 * share).min(1.0)) * (1.0 + others / lanes as f64);
            d = (d as f64 * slow) as u64;
        }
        d
    }

    fn start_op(&mut self, q: usize, op: OpId, dur: u64) {
        let (tenant, out_bytes) = {
            let n = self.gmg.op(op);
            (n.tenant, n.out_bytes)
        };
        let mut dur = self.effective_duration(q, op, tenant, dur);
        if let Some(x) = self.exec.take() {
            let node = self.gmg.op(op);
            let it = self.iter_of(op);
            let group = node.group.expect("a starting op is placed");
            let model_ns = self.cost.op_ns(&self.group_ctx[group.index()], it.dag.op(node.index).spec).max(1);
            let e = crate::ExecOp {
                serial: it.serial,
                tenant: node.tenant,
                instance: it.inst,
                batch: self.insts[it.inst as usize].engine.batch(it.batch),
                reqs: &it.reqs,
                dag: &it.dag,
                index: node.index,
                group,
                priority: self.stats.op_prio.get(op.raw() as usize).copied().unwrap_or(0),
                predicted_ns: dur,
                model_ns,
            };
            dur = x.run_op(&e).max(1);
            self.exec = Some(x);
        }
        if self.opts.check_dependencies {
            let late = self.gmg.inputs(op).any(|p| {
                let n = self.gmg.op(p);
                n.state != OpState::Done || n.end_ns > self.now
            });
            self.dep_violations += late as u64;
        }
        let copies = self.stats.op_guest.get(op.raw() as usize).copied().unwrap_or(0);
        let out_bytes = out_bytes + copies;
        self.gmg.start(op, self.now);
        let end = self.now + dur;
        for i in 0..self.dev.queues[q].gpus.len() {
            let x = self.dev.queues[q].gpus[i];
            self.dev.gpus[x].ledger.alloc(MemoryKind::Activations, out_bytes, self.now);
        }
        self.dev.occupy(q, self.now, end, tenant);
        if let Some(tl) = self.timeline.as_mut().map(std::cell::RefCell::get_mut) {
            tl.started(slicesched_whatif::OpKey(self.op_keys[op.raw() as usize]), self.now).expect("committed op");
        }
        self.push(end, Ev::OpDone(op));
        self.op_events += 1;
    }

    /// Releases an ending borrowed op's input copies; says whether it was borrowed.
    pub(crate) fn release_guest(&mut self, op: OpId, group: GroupId) -> bool {
        let home = self.insts[self.iter_of(op).inst as usize].group;
        if group == home {
            return false;
        }
        let tenant = self.insts[self.iter_of(op).inst as usize].tenant;
        self.copy_op(tenant, group, false);
        let bytes = std::mem::take(&mut self.stats.op_guest[op.raw() as usize]);
        for g in &self.scn.deployment.group(group).gpus {
            self.stats.guest_bytes[g.0 as usize] -= bytes;
            self.dev.gpus[g.0 as usize].ledger.release(MemoryKind::Activations, bytes);
        }
        true
    }

    /// Frees a producer's output once no consumer needs it.
    pub(crate) fn free_output(&mut self, p: OpId, bytes: u64) {
        let pg = self.gmg.op(p).group.expect("placed");
        let home = self.insts[self.iter_of(p).inst as usize].group;
        for j in 0..self.scn.deployment.group(pg).gpus.len() {
            let x = self.scn.deployment.group(pg).gpus[j].0 as usize;
            self.dev.gpus[x].ledger.release(MemoryKind::Activations, bytes);
            if pg != home {
                self.stats.guest_bytes[x] -= bytes;
            }
        }
    }
}

/// Stands in for the policy while it is lent out for a call (never called).
struct Unset;

impl slicesched_policy::Policy for Unset {
    fn name(&self) -> &str {
        "unset"
    }
    fn place(&mut self, _: &View<'_>, _: &[ReadyOp], _: &mut Vec<slicesched_policy::Placement>) {}
}
