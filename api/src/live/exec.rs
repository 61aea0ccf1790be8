//! The executor under the live loop: like `slicesched run`'s driver (each scenario GPU a
//! backend device, each engine instance a loaded tenant with its weight copies, every
//! op the simulator starts run for real and timed), but with the requests' real tokens:
//! each sequence keeps its KV cache in the runner across iterations, every sampled token
//! goes to its client as it is produced, and stop sequences end requests early.

use super::sample::{sample, SamplingParams, StopText};
use rand_chacha::ChaCha8Rng;
use slicesched_exec::model::{ByteTokenizer, ExecModel, HostWeights};
use slicesched_exec::runner::{ExecBatch, OpPlace, Runner, SeqWork, Stepper};
use slicesched_exec::{Backend, ExecError};
use slicesched_gmg::GroupId;
use slicesched_sim::{End, ExecOp, OpExecutor, Scenario};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// What a request's client hears, in order: one `Token` per generated token, then
/// `Done` or `Failed` (or `Rejected` instead of everything when it is not admitted).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Admitted { prompt_tokens: u32 },
    Rejected { status: u16, message: String },
    Token { id: i32, text: String },
    Done(Finished),
    Failed(String),
}

/// How a request ended, with its counts and wall-clock latencies.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub reason: &'static str,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub ttft_s: f64,
    pub e2e_s: f64,
}

/// A request the executor serves (by the simulator's request id).
pub struct Served {
    pub tenant: u32,
    pub prompt: Vec<i32>,
    pub generated: Vec<i32>,
    /// Tokens of the sequence in the runner's KV cache.
    kv_len: usize,
    params: SamplingParams,
    rng: ChaCha8Rng,
    text: StopText,
    pub out: UnboundedSender<Event>,
    runner_tenant: Option<usize>,
    pub done: bool,
    pub submitted: Instant,
    first: Option<Instant>,
}

impl Served {
    pub fn new(tenant: u32, prompt: Vec<i32>, params: SamplingParams, out: UnboundedSender<Event>) -> Self {
        use rand::SeedableRng;
        let rng = match params.seed {
            Some(s) => ChaCha8Rng::seed_from_u64(s),
            None => ChaCha8Rng::from_rng(&mut rand::rng()),
        };
        let text = StopText::new(params.stop.clone());
        Self {
            tenant,
            prompt,
            generated: Vec::new(),
            kv_len: 0,
            params,
            rng,
            text,
            out,
            runner_tenant: None,
            done: false,
            submitted: Instant::now(),
            first: None,
        }
    }

    /// Ends it for its client (once).
    pub fn finish(&mut self, reason: &'static str) {
        if self.done {
            return;
        }
        self.done = true;
        let now = Instant::now();
        let _ = self.out.send(Event::Done(Finished {
            reason,
            prompt_tokens: self.prompt.len() as u32,
            completion_tokens: self.generated.len() as u32,
            ttft_s: self.first.map_or(0.0, |f| (f - self.submitted).as_secs_f64()),
            e2e_s: (now - self.submitted).as_secs_f64(),
        }));
    }

    pub fn fail(&mut self, why: &str) {
        if !self.done {
            self.done = true;
            let _ = self.out.send(Event::Failed(why.to_string()));
        }
    }
}

/// The requests in service, shared by the loop (which adds and cancels them) and the
/// executor (which runs them); one thread owns both.
pub type Requests = Rc<RefCell<HashMap<u32, Served>>>;

struct Iter<'b> {
    st: Stepper<'b>,
    /// (request, tokens fed) in batch order.
    fed: Vec<(u32, usize)>,
}

/// What the executor did so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecCounts {
    pub ops: u64,
    pub kernel_ns: u64,
    pub tokens: u64,
    pub errors: u64,
}

pub struct LiveExec<'b> {
    runner: Runner<'b>,
    inst_tenant: Vec<usize>,
    groups: Vec<HashMap<GroupId, usize>>,
    home: Vec<GroupId>,
    iters: HashMap<u64, Iter<'b>>,
    failed: HashSet<u64>,
    reqs: Requests,
    ended: Vec<(u32, End)>,
    pub counts: ExecCounts,
    pub last_error: Option<String>,
}

impl<'b> LiveExec<'b> {
    /// Loads every engine instance of the planned scenario: `models[t]` are tenant t's
    /// model and weights. Each KV cache gets a block per sequence beyond the engine's,
    /// for the token a recomputation after a preemption adds.
    pub fn new(
        backend: &'b dyn Backend,
        scn: &Scenario,
        models: &[(ExecModel, HostWeights)],
        reqs: Requests,
    ) -> Result<Self, ExecError> {
        let mut d = LiveExec {
            runner: Runner::new(backend),
            inst_tenant: Vec::new(),
            groups: Vec::new(),
            home: Vec::new(),
            iters: HashMap::new(),
            failed: HashSet::new(),
            reqs,
            ended: Vec::new(),
            counts: ExecCounts::default(),
            last_error: None,
        };
        let blocks = |h: &slicesched_gmg::TenantHome| {
            h.kv_blocks as usize + scn.tenants[h.tenant.index()].engine.max_num_seqs as usize
        };
        let loaded = slicesched_exec::drive::load_instances(&mut d.runner, scn, models, blocks)?;
        (d.inst_tenant, d.groups, d.home) = (loaded.inst_tenant, loaded.groups, loaded.home);
        Ok(d)
    }

    /// The sequences of the op's iteration with their real tokens. Positions are the
    /// runner's own: a recomputation after a preemption feeds every token but the
    /// newest, so its sampled token is a new one, as the engine counts it.
    fn batch(&self, op: &ExecOp<'_>, t: usize) -> Result<(ExecBatch, Vec<(u32, usize)>), ExecError> {
        let mut reqs = self.reqs.borrow_mut();
        let mut seqs = Vec::with_capacity(op.reqs.len());
        let mut fed = Vec::with_capacity(op.reqs.len());
        let n_prefill = op.batch.prefills.len();
        for (k, &req) in op.reqs.iter().enumerate() {
            let p = reqs.get_mut(&req).ok_or_else(|| ExecError::Placement(format!("request {req} is not served")))?;
            p.runner_tenant = Some(t);
            let all: Vec<i32> = p.prompt.iter().chain(&p.generated).copied().collect();
            let w = if k < n_prefill {
                let item = op.batch.prefills[k];
                let start = p.kv_len.min(all.len() - 1);
                let end = if item.samples { all.len() } else { (start + item.chunk as usize).min(all.len()) };
                SeqWork {
                    seq: req as u64,
                    tokens: all[start..end.max(start + 1)].to_vec(),
                    start_pos: start,
                    prefill: true,
                    samples: item.samples,
                }
            } else {
                SeqWork {
                    seq: req as u64,
                    tokens: vec![*all.last().expect("a prompt has a token")],
                    start_pos: all.len() - 1,
                    prefill: false,
                    samples: true,
                }
            };
            fed.push((req, w.start_pos + w.tokens.len()));
            seqs.push(w);
        }
        Ok((ExecBatch { seqs }, fed))
    }

    fn try_run(&mut self, op: &ExecOp<'_>) -> Result<u64, ExecError> {
        let inst = op.instance as usize;
        let t = *self.inst_tenant.get(inst).ok_or_else(|| ExecError::Placement(format!("no instance {inst}")))?;
        let group = *self.groups[inst].get(&op.group).ok_or_else(|| {
            ExecError::Placement(format!(
                "op {} placed on group {} that holds none of its weights",
                op.index, op.group.0
            ))
        })?;
        if !self.iters.contains_key(&op.serial) {
            let (batch, fed) = self.batch(op, t)?;
            let st = self.runner.begin(t, &batch)?;
            self.iters.insert(op.serial, Iter { st, fed });
        }
        let mut it = self.iters.remove(&op.serial).expect("inserted");
        // Owners' ops go on the urgent stream, guests' on the background one.
        let priority = if op.group == self.home[inst] { -1 } else { 1 };
        let r = self.runner.step(&mut it.st, op.index, OpPlace { group, priority });
        self.iters.insert(op.serial, it);
        let o = r?;
        self.counts.kernel_ns += o.kernel_ns;
        Ok(o.end_ns.saturating_sub(o.start_ns).max(1))
    }

    /// Fails the requests of a broken iteration (the others go on).
    fn fail_iteration(&mut self, serial: u64, reqs: &[u32], e: &ExecError) {
        self.counts.errors += 1;
        self.last_error = Some(e.to_string());
        self.failed.insert(serial);
        let mut map = self.reqs.borrow_mut();
        for &r in reqs {
            if let Some(p) = map.get_mut(&r) {
                p.fail(&format!("the executor failed: {e}"));
            }
            self.ended.push((r, End::Dropped("the executor failed")));
        }
    }

    /// Applies one sampled token; says how the request ends, if it does.
    fn emit(p: &mut Served, token: i32) -> Option<End> {
        p.generated.push(token);
        p.first.get_or_insert_with(Instant::now);
        let (mut text, stopped) = p.text.push(&ByteTokenizer::decode(&[token]));
        let full = p.generated.len() as u32 >= p.params.max_tokens;
        if full && !stopped {
            text += &p.text.flush();
        }
        if p.out.send(Event::Token { id: token, text }).is_err() {
            p.done = true;
            return Some(End::Dropped("cancelled: the client went away"));
        }
        if stopped {
            p.finish("stop");
            return Some(End::Stopped);
        }
        if full {
            // The engine finishes it at the same count.
            p.finish("length");
        }
        None
    }
}

impl OpExecutor for LiveExec<'_> {
    fn run_op(&mut self, op: &ExecOp<'_>) -> u64 {
        if self.failed.contains(&op.serial) {
            return op.predicted_ns;
        }
        self.counts.ops += 1;
        match self.try_run(op) {
            Ok(ns) => ns,
            Err(e) => {
                self.fail_iteration(op.serial, op.reqs, &e);
                op.predicted_ns
            }
        }
    }

    fn iteration_done(&mut self, serial: u64) {
        let Some(it) = self.iters.remove(&serial) else {
            self.failed.remove(&serial);
            return;
        };
        if self.failed.remove(&serial) {
            self.runner.end(it.st, false);
            return;
        }
        let want_logits = {
            let map = self.reqs.borrow();
            it.fed.iter().any(|(r, _)| map.get(r).is_some_and(|p| p.params.temperature > 0.0))
        };
        let out = self.runner.sampled(&it.st, want_logits);
        self.runner.end(it.st, false);
        let (tokens, logits) = match out {
            Ok(o) => o,
            Err(e) => {
                let reqs: Vec<u32> = it.fed.iter().map(|f| f.0).collect();
                self.fail_iteration(serial, &reqs, &e);
                self.failed.remove(&serial);
                return;
            }
        };
        let mut map = self.reqs.borrow_mut();
        for &(r, kv) in &it.fed {
            if let Some(p) = map.get_mut(&r) {
                p.kv_len = kv;
            }
        }
        for (i, (seq, greedy)) in tokens.into_iter().enumerate() {
            let Some(p) = map.get_mut(&(seq as u32)) else { continue };
            if p.done {
                continue;
            }
            let token = match logits.as_ref().and_then(|l| l.get(i)) {
                Some(row) if p.params.temperature > 0.0 => {
                    sample(row, p.params.temperature, p.params.top_p, &mut p.rng)
                }
                _ => greedy,
            };
            self.counts.tokens += 1;
            if let Some(end) = Self::emit(p, token) {
                self.ended.push((seq as u32, end));
            }
        }
    }

    fn kv_released(&mut self, req: u32) {
        let mut map = self.reqs.borrow_mut();
        let Some(p) = map.get_mut(&req) else { return };
        if let Some(t) = p.runner_tenant {
            self.runner.release(t, req as u64);
        }
        p.kv_len = 0;
        if p.done {
            map.remove(&req);
        }
    }

    fn take_ended(&mut self, out: &mut Vec<(u32, End)>) {
        out.append(&mut self.ended);
    }
}

impl LiveExec<'_> {
    /// Free KV blocks of each runner tenant (home instances first, in tenant order).
    pub fn free_kv_blocks(&self) -> Vec<usize> {
        self.runner.tenants.iter().map(|t| t.free_kv_blocks()).collect()
    }
    /// Runner tenant of each engine instance.
    pub fn instance_tenants(&self) -> &[usize] {
        &self.inst_tenant
    }
}
