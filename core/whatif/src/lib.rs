//! A committed timeline of operators on GPUs and incremental what-if queries over it.
//!
//! The scheduler commits operators to GPUs before they run; this crate predicts when
//! each will start and finish and answers "what if these candidates were placed too?"
//! from the committed state plus a delta, touching only the ops whose times change.
//!
//! # Semantics
//!
//! * GPUs are `0..n`. A committed op occupies all of its `gpus` at once (a gang, e.g. a
//!   tensor-parallel group) for `duration_ns`.
//! * Each GPU runs one op at a time, non-preemptively, in a fixed **queue order**: ops
//!   already started come first, by actual start (then commit order); not-started ops
//!   follow, higher queue priority first, ties in commit order.
//! * **Queue priority.** An op's queue priority is its `priority` capped at the queue
//!   priority of every dependency that is in the timeline and not yet started when the op
//!   is committed. Without the cap a dependent could queue ahead of its own dependency on
//!   a shared GPU and the two would wait for each other forever; with it the queue order
//!   is one global order that every wait respects.
//! * A not-started op starts at the latest of: `ready_ns`; the current time (`advance`);
//!   for each dependency in the timeline, its finish plus the transfer time (dependencies
//!   not in the timeline are treated as done); for each of its GPUs, the finish of the op
//!   before it in that GPU's order and the finish of the last op that finished there.
//!   It finishes at start + duration. Started ops keep their actual start.
//! * An op holds `mem_bytes` on each of its GPUs over `[start, end)`, where `end` is the
//!   latest finish among itself and its dependents in the timeline. Usage on a GPU at an
//!   instant is its baseline (weights, KV pool) plus the bytes of every op holding there.
//! * Reality feedback (`started`, `finished`) replaces predictions with actual times and
//!   reschedules; a finished op is dropped once none of its dependents is unfinished
//!   (after that, ops depending on it treat it as done).
//!
//! # What-if
//!
//! [`Timeline::what_if`] inserts candidates in order (later ones may depend on earlier
//! ones) without changing the timeline, and reports for each its start, finish, peak
//! memory on each of its GPUs over `[start, finish)` (the instant `start` if the duration
//! is 0), whether that fits the capacity, and the transfers it implies (each dependency in
//! the timeline or among earlier candidates with a non-zero transfer time); and overall,
//! per tenant, the largest delay of that tenant's committed finishes. Shifts propagate
//! through GPU successors and dependents in queue order and stop where a gap absorbs them.
//! [`Timeline::full_resimulate`] computes the same answer from scratch; tests hold the
//! two equal.

mod hash;
mod reference;
mod timeline;
mod whatif;

pub use timeline::Timeline;
pub use whatif::{CandidateOutcome, WhatIf};

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// The caller's name for an op; unique among the ops in a timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OpKey(pub u64);

/// An op to commit, or to ask about: the same description serves both.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    pub key: OpKey,
    /// Occupied all at once; distinct, each below the timeline's GPU count.
    pub gpus: SmallVec<[u32; 4]>,
    pub duration_ns: u64,
    pub priority: i32,
    pub tenant: u32,
    /// Earliest start.
    pub ready_ns: u64,
    /// (dependency, transfer ns after its finish).
    pub deps: SmallVec<[(OpKey, u64); 2]>,
    /// Activation bytes held on each of `gpus`.
    pub mem_bytes: u64,
}

/// Why the timeline refused a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimelineError {
    #[error("{what} has {got} entries for {n_gpus} GPUs")]
    Lengths { what: &'static str, got: usize, n_gpus: usize },
    #[error("op {0:?} names no GPU")]
    NoGpu(OpKey),
    #[error("op {key:?} names GPU {gpu}, but the timeline has {n_gpus}")]
    UnknownGpu { key: OpKey, gpu: u32, n_gpus: usize },
    #[error("op {key:?} names GPU {gpu} twice")]
    RepeatedGpu { key: OpKey, gpu: u32 },
    #[error("op {0:?} is already in the timeline or earlier among the candidates")]
    DuplicateKey(OpKey),
    #[error("op {0:?} is not in the timeline")]
    UnknownKey(OpKey),
    #[error("op {0:?} has already started")]
    AlreadyStarted(OpKey),
    #[error("op {0:?} has already finished")]
    AlreadyFinished(OpKey),
}
