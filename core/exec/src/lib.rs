//! The operator executor: it materialises the scheduler's committed placements on
//! devices, runs each op of an iteration in dependency order, moves activations between
//! devices and reports actual start and end times. It decides nothing.
//!
//! - [`backend`]: the CUDA-shaped seam (devices, prioritised streams, events, arenas
//!   charged to a memory ledger, launches after their input events, copies).
//! - [`cpu`]: the CPU backend (worker threads as streams, real kernels, wall clock).
//! - [`kernels`]: the kernel set of one iteration as launch descriptions.
//! - [`model`]: numerics of a model (RoPE, norms), its weights (seeded or a safetensors
//!   checkpoint) and the byte-level tokenizer.
//! - [`runner`]: loads a tenant's weights and KV cache onto devices and runs an
//!   iteration's operator DAG under a placement.
//! - [`cuda`] (features `cuda-12` / `cuda-13`): the CUDA backend (cudarc, loaded at run
//!   time: without a driver it is a typed [`ExecError::NoCuda`], never a panic).
//! - [`bench`]: the executor's benchmarks (`slicesched bench exec`).
//! - [`reference`]: a naive f64 forward pass the kernels are tested against.
//!
//! Architecture Invariant: this crate is the one place that knows device memory and
//! `unsafe` device calls; everything above it sees ids, views and events.

#[cfg(all(feature = "cuda-12", feature = "cuda-13"))]
compile_error!("features `cuda-12` and `cuda-13` are mutually exclusive: build the CUDA 13 variant with `--no-default-features --features cuda-13`");

pub mod backend;
pub mod bench;
pub mod checkpoint;
pub mod cpu;
#[cfg(any(feature = "cuda-12", feature = "cuda-13"))]
pub mod cuda;
pub mod drive;
pub mod kernels;
pub mod model;
pub mod profile;
pub mod reference;
pub mod runner;

pub use backend::{
    Arena, Backend, BufId, DeviceId, DeviceInfo, Dtype, Event, HostData, ReduceRank, StreamId, Timing, View,
};
pub use cpu::{parse_device, CpuBackend, CpuDeviceSpec};

/// Everything the executor can refuse or fail at.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExecError {
    #[error("unknown device `{0}`")]
    UnknownDevice(String),
    #[error("unknown buffer {0}")]
    UnknownBuffer(u64),
    #[error("{device}: out of memory allocating {requested} bytes of {arena:?} ({free} bytes free)")]
    OutOfMemory { device: String, arena: Arena, requested: u64, free: u64 },
    #[error("launch refused: {0}")]
    Launch(String),
    #[error("kernel failed: {0}")]
    Kernel(String),
    #[error("event {0} did not complete in time")]
    Timeout(u64),
    #[error("checkpoint {path}: {msg}")]
    Checkpoint { path: String, msg: String },
    #[error("placement refused: {0}")]
    Placement(String),
    #[error("model: {0}")]
    Model(String),
    /// The CUDA backend cannot start here: no driver, no GPU, or a library (libcuda,
    /// cuBLAS, NVRTC) missing or too old. `missing` names what, for one line to a user.
    #[error("CUDA unavailable: {missing}")]
    NoCuda { missing: String },
    /// A CUDA call failed (driver, cuBLAS or NVRTC), with what was being done.
    #[error("CUDA: {0}")]
    Cuda(String),
}
