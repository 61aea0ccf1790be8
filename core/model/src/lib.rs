//! LLM decoder models and the operator DAG of one serving iteration.
//!
//! A [`ModelConfig`] describes a decoder (Hugging Face `config.json`, Vidur's
//! `model_config.yml`, or a preset). For one iteration's [`IterationBatch`] it yields an
//! [`IterationDag`]: every operator of the forward pass with exact FLOPs, HBM bytes,
//! weight bytes and output activation bytes, tensor-parallel sharding and collectives
//! included.
//!
//! Architecture Invariant: this crate knows no hardware and no time. Costs in seconds
//! live in `slicesched-cost`; this crate only counts work.

mod arch;
mod config;
mod dag;
mod hf;
pub mod kv;
mod moe;
mod ops;

pub use arch::{Act, Biases, Moe, Norm, MAX_EXPERT_UNITS};
pub use config::{preset_config_json, preset_names, Dtype, ModelConfig, ModelError, Preset, PRESETS};
pub use dag::{DecodeItem, IterationBatch, IterationDag, OpRef, PrefillItem, Segment};
pub use hf::{COST_NEUTRAL_KEYS, MODEL_TYPES, UNDERSTOOD_KEYS};
pub use ops::{AttnShape, OpKind, OpShape, OpSpec};
