//! The replay loop driven from outside: requests arrive when a caller says so and the
//! clock advances to the instants the caller gives (the wall clock of a live server).
//! The same engines, GMG, policy calls, checks, memory ledger and executor seam as
//! [`crate::replay_with`]; only where arrivals and time come from differs.

use crate::replay::{ReplayOptions, ReplayResult, Sim};
use crate::totals::{RequestCounts, RunTotals};
use crate::{End, OpExecutor, RequestRecord, Scenario, Summary, TimeSeries};
use slicesched_cost::CostModel;
use slicesched_engine::Sla;
use slicesched_policy::Policy;
use std::cmp::Reverse;

/// One tenant's engines now, summed over its instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineState {
    pub waiting: u32,
    pub running: u32,
    pub kv_blocks_total: u32,
    pub kv_blocks_free: u32,
    pub preemptions: u64,
    pub batches_in_flight: u32,
}

/// A tenant's offered load, per second: the meter's moving average (~50 s) and its
/// forecast (the average, or the busiest 10-s window of the last minute where higher).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OfferedLoad {
    pub average: crate::load::Rate,
    pub forecast: crate::load::Rate,
}

/// A simulator whose requests and clock come from its caller.
///
/// It serves for as long as its caller lets it, so what it holds per request is
/// bounded: once a request ended and its caller is done with its record
/// ([`LiveSim::retire`]), the record and the engine's state for it go, and its figures
/// move into the run's totals (counts, and latency sketches within 0.1%), which the
/// summary reads together with the records still held. The requests held are those in
/// service and the ended ones behind the oldest still in service.
pub struct LiveSim<'a> {
    sim: Sim<'a>,
    /// Each tenant's SLA in force: new arrivals are judged against it (it may change
    /// while serving).
    slas: Vec<Sla>,
    retired: RunTotals,
}

impl<'a> LiveSim<'a> {
    /// `scn`'s own requests are ignored: every request comes through [`LiveSim::arrive`].
    pub fn new(
        scn: &'a Scenario,
        policy: &'a mut dyn Policy,
        cost: &'a CostModel,
        opts: ReplayOptions,
        exec: Option<&'a mut dyn OpExecutor>,
    ) -> Self {
        let mut sim = Sim::new(scn, policy, cost, opts, exec);
        sim.records = Default::default();
        for g in &mut sim.dev.gpus {
            g.gap_lengths = crate::metrics::GapLengths::bounded();
        }
        let slas = scn.tenants.iter().map(|t| t.sla).collect();
        Self { sim, slas, retired: RunTotals::new(scn.tenants.len(), true) }
    }

    /// The loop's clock (ns).
    pub fn now(&self) -> u64 {
        self.sim.now
    }

    /// When the next event is due, if any.
    pub fn next_event_ns(&self) -> Option<u64> {
        self.sim.events.peek().map(|e| e.0 .0)
    }

    /// Handles up to `max_events` of the events due at or before `t`, in time order;
    /// when none is left due, the clock moves to `t` (never backwards). Returns the
    /// events handled.
    pub fn advance(&mut self, t: u64, max_events: u64) -> u64 {
        let mut n = 0;
        while n < max_events && self.next_event_ns().is_some_and(|e| e <= t) {
            let Reverse((at, _, ev)) = self.sim.events.pop().expect("peeked");
            self.sim.now = self.sim.now.max(at);
            self.sim.dispatch(ev);
            n += 1;
        }
        if self.next_event_ns().is_none_or(|e| e > t) {
            self.sim.now = self.sim.now.max(t);
        }
        n
    }

    /// A request of `tenant` arrives now. Returns its id, or the record of why it was
    /// refused (it could never fit the tenant's KV cache).
    pub fn arrive(&mut self, tenant: u32, prompt_tokens: u32, output_tokens: u32) -> Result<u32, &RequestRecord> {
        let sim = &mut self.sim;
        let sla = &self.slas[tenant as usize];
        let idx = sim.records.len();
        sim.records.push(RequestRecord {
            id: idx as u32,
            tenant,
            arrival_ns: sim.now,
            prompt_tokens,
            output_tokens: output_tokens.max(1),
            first_token_ns: None,
            finish_ns: None,
            preemptions: 0,
            dropped: None,
            ttft_target_ns: sla.ttft_target_ns(prompt_tokens),
            tpot_target_ns: sla.tpot_target_ns(),
        });
        if sim.admit(idx, tenant, prompt_tokens, output_tokens) {
            Ok(idx as u32)
        } else {
            Err(&sim.records[idx])
        }
    }

    /// Ends a request early: at once when it is not executing, else as soon as its
    /// batch completes. Its KV blocks are freed then, in the engine and the executor.
    pub fn end(&mut self, req: u32, end: End) {
        self.sim.ends.push((req, end));
        self.sim.apply_ends();
    }

    /// The tenant's SLA changed: requests arriving from now on are judged against `sla`.
    pub fn set_sla(&mut self, tenant: u32, sla: Sla) {
        if let Some(s) = self.slas.get_mut(tenant as usize) {
            *s = sla;
        }
    }

    /// The figures so far, over the requests that ended (finished or dropped), retired
    /// or still held; latency quantiles are within 0.1% of the exact ones.
    pub fn summary(&self) -> Summary {
        self.sim.summarize_retired(self.sim.now.max(1), self.retired.clone())
    }

    /// Each tenant's requests so far, retired or held.
    pub fn counts(&self) -> Vec<RequestCounts> {
        let mut c: Vec<RequestCounts> = self.retired.tenants.iter().map(RequestCounts::of_ended).collect();
        for r in self.sim.records.iter() {
            c[r.tenant as usize].add(r);
        }
        c
    }

    /// Forgets the oldest requests that ended and whose records `keep` no longer asks
    /// for, up to the first one still needed: their records, their (instance,
    /// sequence) and the engines' state for them. Returns how many retired.
    pub fn retire(&mut self, mut keep: impl FnMut(u32) -> bool) -> usize {
        let Self { sim, retired, .. } = self;
        let n = sim.records.retire_while(|r| r.ended() && !keep(r.id), |_, r| retired.add(&r));
        sim.req_seq.retire_to(sim.records.base());
        for inst in &mut sim.insts {
            let base = inst.engine.retire_ended();
            inst.seq_to_req.retire_to(base as usize);
        }
        n
    }

    /// Requests whose state is held now: (records, engine sequences over all instances).
    pub fn held(&self) -> (usize, usize) {
        (self.sim.records.held(), self.sim.insts.iter().map(|i| i.engine.seqs_held()).sum())
    }

    /// The per-second series so far (its last bucket still filling), from bucket
    /// [`TimeSeries::first`].
    pub fn series(&self) -> &TimeSeries {
        &self.sim.series
    }

    /// Forgets the series' buckets before `bucket` (history has them).
    pub fn forget_series_before(&mut self, bucket: usize) {
        self.sim.series.forget_before(bucket);
    }

    pub fn record(&self, req: u32) -> Option<&RequestRecord> {
        self.sim.records.get(req as usize)
    }

    /// The records held (in service, or ended and not retired), oldest first.
    pub fn records(&self) -> impl Iterator<Item = &RequestRecord> {
        self.sim.records.iter()
    }

    /// The id the next arrival gets.
    pub fn next_id(&self) -> u32 {
        self.sim.records.len() as u32
    }

    /// The ops recorded since the last call ([`ReplayOptions::record_ops`]): handing
    /// them over keeps what the loop holds within the window's `max_ops`.
    pub fn take_ops(&mut self) -> Vec<crate::OpRecord> {
        std::mem::take(&mut self.sim.rec.ops)
    }

    /// Whether any request is waiting, running or still executing.
    pub fn busy(&self) -> bool {
        self.sim.insts.iter().any(|i| i.engine.has_work() || i.inflight > 0) || !self.sim.events.is_empty()
    }

    /// A tenant's offered load as its meter sees it now (the meter `--replan online`
    /// reads in a replay): requests and tokens per second, the moving average and the
    /// forecast. Both count closed 10-s windows only, so a service's first window reads 0.
    pub fn offered(&self, tenant: u32) -> OfferedLoad {
        let Some(m) = self.sim.meters.get(tenant as usize) else { return OfferedLoad::default() };
        let mut m = m.clone();
        m.advance(self.sim.now);
        OfferedLoad { average: m.average(), forecast: m.forecast() }
    }

    /// A tenant's queues and KV cache now.
    pub fn load(&self, tenant: u32) -> EngineState {
        let mut l = EngineState::default();
        for &i in self.sim.tenant_insts.get(tenant as usize).map_or(&[][..], |v| v.as_slice()) {
            let e = &self.sim.insts[i as usize].engine;
            let (w, r) = e.queue_lengths();
            l.waiting += w as u32;
            l.running += r as u32;
            l.kv_blocks_total += e.kv_blocks_total();
            l.kv_blocks_free += e.kv_blocks_free();
            l.preemptions += e.preemptions();
            l.batches_in_flight += e.batches_in_flight() as u32;
        }
        l
    }

    /// Records every request still unfinished as dropped with `why` (the stop does this
    /// before [`LiveSim::finish`] so its counts include them).
    pub fn drop_unfinished(&mut self, why: &'static str) {
        for r in self.sim.records.iter_mut() {
            if r.finish_ns.is_none() && r.dropped.is_none() {
                r.dropped = Some(why);
            }
        }
    }

    /// Ends the loop: requests still unfinished are recorded as dropped with `why`. The
    /// result's records are those still held; its summary covers every request.
    pub fn finish(mut self, why: &'static str) -> ReplayResult {
        self.drop_unfinished(why);
        self.sim.finish_with(Some(self.retired))
    }
}
