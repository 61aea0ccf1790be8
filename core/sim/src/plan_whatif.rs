//! Choosing a plan by replaying it: the simulator's what-if put to the planner's own
//! open question.
//!
//! For an operator-level policy the planner can hand out copies in more than one order
//! ([`PhaseOrder`]), and no rule over the loads picks the right one everywhere: on one
//! mix the overflowing tenants' weight-only ranges are what saves them, on another they
//! take the one lender where a bursty tenant's serving copy fit (README, "A family of
//! mixes"). Each distinct candidate plan is replayed under the policy itself, on the
//! stretch of the planned-for load where the cluster is busiest ([`whatif_window`]),
//! and the one with the fewest requests violating their SLA is kept (the first
//! candidate on a tie). Deterministic like the replay itself.

use crate::load::window_rates;
use crate::planner::{plan_for_loads, plan_ordered, service_cost, tenant_loads_with, PhaseOrder, ReplicaMode, RHO_FIT};
use crate::replay::{replay, ReplayOptions};
use crate::scenario::{Scenario, ScenarioError};
use serde::{Deserialize, Serialize};
use slicesched_cost::{CostModel, CpuOverhead};
use slicesched_policy::Policy;

/// Length of load each candidate plan is replayed on (or the whole trace, if shorter):
/// long enough to hold a burst building and draining (the planner meters load in 10-s
/// windows and forecasts over the last minute), short enough that choosing costs a
/// fraction of a 30-minute replay.
pub const WHATIF_WINDOW_S: f64 = 120.0;

/// Which plan an operator-level policy runs on (`--plan`): the what-if's choice, or
/// one order fixed (to compare the candidates, or to skip the what-if's cost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanPick {
    #[default]
    WhatIf,
    Fixed(PhaseOrder),
}

impl PlanPick {
    /// The only plan there was before the what-if: what records written before it
    /// (`sweep.json`, an API run's parameters) ran on.
    pub const BEFORE_WHATIF: PlanPick = PlanPick::Fixed(PhaseOrder::TierFirst);

    /// The name `--plan` takes.
    pub fn name(self) -> &'static str {
        match self {
            PlanPick::WhatIf => "whatif",
            PlanPick::Fixed(o) => o.name(),
        }
    }
}

impl std::str::FromStr for PlanPick {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "whatif" {
            return Ok(PlanPick::WhatIf);
        }
        PhaseOrder::ALL.iter().find(|o| o.name() == s).map(|&o| PlanPick::Fixed(o)).ok_or_else(|| {
            let known: Vec<&str> = PhaseOrder::ALL.iter().map(|o| o.name()).collect();
            format!("unknown plan `{s}` (known: whatif, {})", known.join(", "))
        })
    }
}

/// One candidate plan's what-if.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlanCandidate {
    pub order: PhaseOrder,
    /// Share of the window's requests violating their SLA; with `stopped_early`, a lower
    /// bound (the replay stopped once it was past the best candidate's).
    pub violation_rate: f64,
    pub stopped_early: bool,
}

/// Which plan the what-if kept, and why (`summary.json`'s `plan`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlanChoice {
    pub chosen: PhaseOrder,
    /// The stretch of the load the candidates were replayed on, from the trace's start.
    pub window_start_s: f64,
    pub window_s: f64,
    pub window_requests: u64,
    /// Every distinct candidate (an order giving the same plan as an earlier one is
    /// not replayed again), in the order tried.
    pub candidates: Vec<PlanCandidate>,
}

#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    #[error(transparent)]
    Plan(#[from] ScenarioError),
    #[error("making a policy instance for the plan what-if: {0}")]
    Policy(String),
}

/// The stretch `[start, end)` (ns from the trace's start) of `len_ns` where the tenants'
/// offered load, beyond what their homes serve well ([`RHO_FIT`]) and in GPUs' worth,
/// sums highest over 10-s windows: where the plans differ most (a cluster well within
/// its homes runs every plan alike). The first such stretch on a tie; the whole trace
/// when it is shorter.
pub fn whatif_window(scn: &Scenario, cost: &CostModel, len_ns: u64) -> (u64, u64) {
    let span = scn.requests.last().map_or(0, |(_, r)| r.arrival_ns + 1);
    if span <= len_ns {
        return (0, span.max(len_ns));
    }
    let mut excess: Vec<f64> = Vec::new();
    for (i, t) in scn.tenants.iter().enumerate() {
        let arrivals = scn
            .requests
            .iter()
            .filter(|(k, _)| *k as usize == i)
            .map(|(_, r)| (r.arrival_ns, r.prompt_tokens, r.output_tokens));
        let c = service_cost(scn, i, cost, &CpuOverhead::default_a100());
        let gpus = t.gpus.len() as f64;
        for (w, rate) in window_rates(&t.sla, arrivals).iter().enumerate() {
            if excess.len() <= w {
                excess.resize(w + 1, 0.0);
            }
            excess[w] += (c.rho(rate) - RHO_FIT).max(0.0) * gpus;
        }
    }
    let win = crate::load::WINDOW_NS;
    let k = ((len_ns / win) as usize).max(1);
    let (mut best, mut best_at, mut sum) = (f64::NEG_INFINITY, 0usize, 0f64);
    for w in 0..excess.len() {
        sum += excess[w];
        if w >= k {
            sum -= excess[w - k];
        }
        let first = (w + 1).saturating_sub(k);
        if w + 1 >= k.min(excess.len()) && sum > best {
            (best, best_at) = (sum, first);
        }
    }
    let start = best_at as u64 * win;
    (start, start + len_ns)
}

/// `scn`'s requests arriving in `[start, end)`, shifted to start at 0.
fn windowed(scn: &Scenario, (start, end): (u64, u64)) -> Vec<(u32, slicesched_trace::Request)> {
    let arriving = scn.requests.iter().filter(|(_, r)| (start..end).contains(&r.arrival_ns));
    arriving.map(|(t, r)| (*t, slicesched_trace::Request { arrival_ns: r.arrival_ns - start, ..r.clone() })).collect()
}

/// The plan `mode` asks for, chosen among the planner's candidates by replaying each
/// under a fresh instance of the policy (`make_policy`) on [`whatif_window`]'s stretch
/// of the load, with `opts`' engine settings (CPU overhead, KV migration, replanning,
/// fast path); `opts.plan` may fix the order instead. Callers time it
/// (`Timing::plan_whatif_s`): no wall clock in here, so the choice is the same on every
/// machine. Only an operator-level plan (`ReplicaMode::Both`) over two or more
/// tenants has candidates to choose from; otherwise the plan and no choice.
pub fn choose_plan(
    scn: &Scenario,
    mode: ReplicaMode,
    cost: &CostModel,
    opts: &ReplayOptions,
    make_policy: &mut dyn FnMut() -> Result<Box<dyn Policy>, String>,
) -> Result<(Scenario, Option<PlanChoice>), WhatIfError> {
    if let PlanPick::Fixed(order) = opts.plan {
        return Ok((plan_ordered(scn, mode, cost, order)?, None));
    }
    // The candidates differ in order alone: the trace is metered once for all of them.
    let loads = tenant_loads_with(scn, cost);
    let first = plan_for_loads(scn, mode, &loads, PhaseOrder::TierFirst)?;
    if mode != ReplicaMode::Both || scn.tenants.len() < 2 {
        return Ok((first, None));
    }
    let mut plans = vec![(PhaseOrder::TierFirst, first)];
    for order in &PhaseOrder::ALL[1..] {
        let p = plan_for_loads(scn, mode, &loads, *order)?;
        let same = |q: &Scenario| q.deployment == p.deployment && q.guest_reserve == p.guest_reserve;
        if !plans.iter().any(|(_, q)| same(q)) {
            plans.push((*order, p));
        }
    }
    if plans.len() == 1 {
        return Ok((plans.pop().expect("one plan").1, None));
    }
    let len_ns = (WHATIF_WINDOW_S * 1e9) as u64;
    let window = whatif_window(scn, cost, len_ns);
    // Each candidate replays the window's requests in place of the trace's (the plans
    // carry every request; swapped in and back rather than cloning each plan).
    let mut trial_requests = windowed(scn, window);
    let window_requests = trial_requests.len() as u64;
    let mut candidates = Vec::with_capacity(plans.len());
    let mut best: Option<(usize, f64)> = None;
    for (i, (order, plan)) in plans.iter_mut().enumerate() {
        let mut policy = make_policy().map_err(WhatIfError::Policy)?;
        let o = ReplayOptions {
            progress_every: u64::MAX,
            check_dependencies: false,
            time_decisions: false,
            record_ops: None,
            sample_decisions_every: 0,
            record_busy: false,
            stop_after_ns: None,
            // A candidate past the best so far cannot win: no need to finish it.
            stop_above_violation: best.map(|(_, v)| v),
            ..opts.clone()
        };
        std::mem::swap(&mut plan.requests, &mut trial_requests);
        let r = replay(plan, policy.as_mut(), cost, o, &mut |_| {});
        std::mem::swap(&mut plan.requests, &mut trial_requests);
        let v = r.violation_at_stop.unwrap_or(r.summary.violation_rate);
        candidates.push(PlanCandidate {
            order: *order,
            violation_rate: v,
            stopped_early: r.violation_at_stop.is_some(),
        });
        if best.is_none_or(|(_, b)| v < b) {
            best = Some((i, v));
        }
    }
    let (chosen, _) = best.expect("two or more candidates");
    let choice = PlanChoice {
        chosen: plans[chosen].0,
        window_start_s: window.0 as f64 / 1e9,
        window_s: (window.1 - window.0) as f64 / 1e9,
        window_requests,
        candidates,
    };
    Ok((plans.swap_remove(chosen).1, Some(choice)))
}
