//! Scenarios and the deterministic discrete-event simulator.
//!
//! A [`Scenario`] (TOML) names the cluster, the tenants (model, SLA, home GPUs, trace)
//! and the seed. [`replay`] runs it: tenant engines turn requests into iterations, each
//! iteration becomes an operator DAG in the GMG, the [`Policy`](slicesched_policy::Policy)
//! places ready ops, the core validates the placements and the GPUs run them on an
//! integer-nanosecond virtual clock, one event per op (or one per iteration where the
//! policy has no choice: `fast`, with results identical to the per-op path).
//!
//! Architecture Invariant: no wall clock, no IO and no randomness inside the loop: the
//! same scenario and seed give the same result bit for bit. Wall-clock figures are
//! measured by callers and reported under `timing`.

mod budget;
mod busy;
mod copies;
mod devices;
mod exec;
mod fast;
mod kvpool;
mod live;
pub mod load;
mod metrics;
mod migrate;
mod pace;
mod place;
mod plan_whatif;
mod planner;
mod probe;
mod record;
mod replay;
mod scenario;
mod sketch;
mod summary;
mod totals;

pub use busy::max_bytes as busy_max_bytes;
pub use busy::{bucket_ns_for, BusyBuckets, BusyRow};
pub use copies::Replan;
pub use exec::{End, ExecOp, OpExecutor};
pub use live::{EngineState, LiveSim, OfferedLoad};
pub use metrics::{
    gap_bucket_edge_ns, GapHistogram, GpuStats, RequestRecord, Scheduling, Summary, TenantStats, TimeSeries, Timing,
    GAP_BUCKETS, SERIES_BUCKET_NS,
};
pub use migrate::KvMigration;
pub use plan_whatif::{choose_plan, whatif_window, PlanCandidate, PlanChoice, PlanPick, WhatIfError, WHATIF_WINDOW_S};
pub use planner::{
    plan, plan_for_loads, plan_ordered, plan_with, tenant_loads, tenant_loads_with, PhaseOrder, PlannerSpec,
    ReplicaMode, TenantLoad, OVERFLOW_TTFTS, OWNER_BUSY, RHO_FIT,
};
pub use record::{DecisionRecord, OpRecord, OpWindow};
pub use replay::{replay, replay_with, Progress, ReplayOptions, ReplayResult};
pub use scenario::{draw_seed, Scenario, ScenarioError, ScenarioSpec, TenantSetup, TenantSpec};
pub use summary::{dropped_by_reason, RequestStats};
pub use totals::RequestCounts;
