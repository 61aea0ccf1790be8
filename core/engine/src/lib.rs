//! Tenant engines: per-tenant continuous batching like vLLM.
//!
//! An [`Engine`] owns one tenant's waiting and running queues and its paged KV cache
//! (fixed-size blocks sized from the memory left after weights). Each call to
//! [`Engine::schedule`] forms the next iteration's batch under a token budget (decodes
//! first, then chunked prefill of running and waiting requests, FCFS), preempting the
//! newest running request by recomputation when KV blocks run out. [`Engine::complete`]
//! applies the iteration's results and reports first tokens and finished requests.
//!
//! Architecture Invariant: the engine knows no clock and no GPU; times are passed in,
//! and what an iteration costs is someone else's business.

mod engine;
mod ids;
mod sla;

pub use engine::{Admission, BatchId, Engine, EngineConfig, MovedSeq, SeqEvent, SeqId};
pub use ids::IdDeque;
pub use sla::Sla;
