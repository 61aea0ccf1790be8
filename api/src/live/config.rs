//! What a live cluster serves: devices, tenants (each a registered tenant, its model,
//! weights, home devices and engine settings) and the policy. The `[live]` section of
//! the service configuration and the body of `POST /api/v1/live` are this type.

use crate::error::ApiError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A live cluster's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LiveConfig {
    /// The devices: `cpu:N` gives N CPU devices, `cuda:N` the GPUs of ordinals 0..N (where
    /// a CUDA driver and its libraries are present; otherwise refused naming what is missing).
    #[schema(example = "cpu:2")]
    pub devices: String,
    /// The policy, named as a run names one (a shipped name or an active plugin).
    #[serde(default = "default_policy")]
    pub policy: String,
    /// The served tenants (at least one).
    pub tenants: Vec<LiveTenant>,
    /// Requests accepted but not yet taken by the serving loop, at most (over it: 429).
    #[serde(default = "default_queue")]
    pub queue_capacity: u32,
    /// Fraction of each device's (nominal 80 GB) memory serving may use: weights,
    /// activations and the KV cache, which gets the rest.
    #[serde(default = "default_util")]
    pub gpu_memory_utilization: f64,
    /// Seconds a stop waits for in-flight requests to finish before failing the rest.
    #[serde(default = "default_drain")]
    pub drain_s: f64,
    /// Start this cluster when the service starts (configuration file only).
    #[serde(default)]
    pub autostart: bool,
    /// Operators recorded while serving, for the run's timeline.
    #[serde(default)]
    pub op_sample: OpSample,
}

/// Which operators a live run records, each with its predicted and measured time: those
/// starting in the first `length_s` of every `every_s` seconds from the start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpSample {
    pub every_s: f64,
    pub length_s: f64,
}

impl OpSample {
    /// The simulator's recording window for this sample.
    pub fn window(&self) -> slicesched_sim::OpWindow {
        slicesched_sim::OpWindow {
            from_ns: 0,
            to_ns: ((self.length_s * 1e9) as u64).max(1),
            every_ns: ((self.every_s * 1e9) as u64).max(1),
            max_ops: super::history::MAX_OPS_PER_FLUSH,
        }
    }
}

impl Default for OpSample {
    fn default() -> Self {
        OpSample { every_s: 10.0, length_s: 1.0 }
    }
}

/// One served tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LiveTenant {
    /// A registered tenant's name: its keys reach this model, and its current SLA is the
    /// one its requests are checked against.
    pub name: String,
    /// A model preset (`tiny-2l`, `tiny-4l`, `tiny-3l-1k`, ...) used with seeded
    /// weights; ignored when `weights` is given.
    #[serde(default)]
    pub model: Option<String>,
    /// A Hugging Face folder (`config.json` and safetensors) inside the data folders.
    #[serde(default)]
    pub weights: Option<String>,
    /// Seed of the random weights of a preset.
    #[serde(default)]
    pub seed: u64,
    /// The model id clients name (default: the preset name, or the folder's name).
    #[serde(default)]
    pub served_model_name: Option<String>,
    /// Home devices (tensor-parallel group), indices into `devices`.
    pub gpus: Vec<u32>,
    /// Context window, tokens (default and ceiling: the model's
    /// `max_position_embeddings`).
    #[serde(default)]
    pub max_model_len: Option<u32>,
    /// Requests of this tenant accepted and not finished, at most (over it: 429).
    #[serde(default = "default_pending")]
    pub max_pending: u32,
    #[serde(default)]
    pub engine: LiveEngine,
}

/// Engine settings (vLLM's names); unset ones keep the engine's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LiveEngine {
    pub max_num_seqs: Option<u32>,
    pub max_num_batched_tokens: Option<u32>,
    pub enable_chunked_prefill: Option<bool>,
}

fn default_policy() -> String {
    "dedicated".into()
}
fn default_queue() -> u32 {
    256
}
fn default_util() -> f64 {
    0.002
}
fn default_drain() -> f64 {
    10.0
}
fn default_pending() -> u32 {
    64
}

/// The executor backend a live cluster's devices belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

/// Most devices and tenants a live cluster may have (each device is a worker thread).
pub const MAX_DEVICES: u32 = 16;
pub const MAX_TENANTS: usize = 16;

impl LiveConfig {
    /// Which backend `devices` names and how many devices.
    pub fn device_kind(&self) -> Result<(DeviceKind, u32), ApiError> {
        let bad = |d: &str| ApiError::invalid("devices", d.to_string());
        let (kind, n) = if let Some(n) = self.devices.strip_prefix("cpu:") {
            (DeviceKind::Cpu, n)
        } else if let Some(n) = self.devices.strip_prefix("cuda:") {
            (DeviceKind::Cuda, n)
        } else {
            return Err(bad("expected `cpu:N` or `cuda:N`"));
        };
        let n: u32 = n.parse().map_err(|_| bad("expected `cpu:N` or `cuda:N` with N a number"))?;
        if n == 0 || n > MAX_DEVICES {
            return Err(bad(&format!("N must be in 1..={MAX_DEVICES}, got {n}")));
        }
        Ok((kind, n))
    }

    /// The number of devices `devices` names.
    pub fn device_count(&self) -> Result<u32, ApiError> {
        self.device_kind().map(|d| d.1)
    }

    /// Checks what can be checked without the database or the models.
    pub fn check(&self) -> Result<u32, ApiError> {
        let (kind, n) = self.device_kind()?;
        if kind == DeviceKind::Cuda {
            // Refused here, in one line naming the missing piece, rather than when the
            // cluster's thread starts the backend.
            slicesched_exec::cuda::require_libraries()
                .map_err(|e| ApiError::invalid("devices", format!("{}: {e}", self.devices)))?;
        }
        if self.tenants.is_empty() || self.tenants.len() > MAX_TENANTS {
            return Err(ApiError::invalid("tenants", format!("between 1 and {MAX_TENANTS} tenants")));
        }
        if !(self.gpu_memory_utilization > 0.0 && self.gpu_memory_utilization <= 0.05) {
            return Err(ApiError::invalid("gpu_memory_utilization", "must be in (0, 0.05] (of a nominal 80 GB)"));
        }
        if !(self.drain_s.is_finite() && (0.0..=600.0).contains(&self.drain_s)) {
            return Err(ApiError::invalid("drain_s", "must be in [0, 600]"));
        }
        let s = self.op_sample;
        if !(s.length_s.is_finite() && s.length_s > 0.0 && s.length_s <= 60.0) {
            return Err(ApiError::invalid("op_sample.length_s", "must be in (0, 60]"));
        }
        if !(s.every_s.is_finite() && s.every_s >= s.length_s && s.every_s <= 3600.0) {
            return Err(ApiError::invalid("op_sample.every_s", "must be in [length_s, 3600]"));
        }
        if self.queue_capacity == 0 || self.queue_capacity > 100_000 {
            return Err(ApiError::invalid("queue_capacity", "must be in 1..=100000"));
        }
        for (i, t) in self.tenants.iter().enumerate() {
            let f = |s: &str| format!("tenants[{i}].{s}");
            if self.tenants[..i].iter().any(|o| o.name == t.name) {
                return Err(ApiError::invalid(f("name"), format!("`{}` is served twice", t.name)));
            }
            if t.model.is_none() && t.weights.is_none() {
                return Err(ApiError::invalid(f("model"), "a preset `model` or a `weights` folder is needed"));
            }
            if t.gpus.is_empty() || t.gpus.iter().any(|&g| g >= n) {
                return Err(ApiError::invalid(f("gpus"), format!("one or more device indices below {n}")));
            }
            if t.max_pending == 0 || t.max_pending > 100_000 {
                return Err(ApiError::invalid(f("max_pending"), "must be in 1..=100000"));
            }
            if t.max_model_len == Some(0) {
                return Err(ApiError::invalid(f("max_model_len"), "must be positive"));
            }
            let e = t.engine;
            if e.max_num_seqs.is_some_and(|v| v == 0 || v > 4096) {
                return Err(ApiError::invalid(f("engine.max_num_seqs"), "must be in 1..=4096"));
            }
            if e.max_num_batched_tokens.is_some_and(|v| !(16..=65_536).contains(&v)) {
                return Err(ApiError::invalid(f("engine.max_num_batched_tokens"), "must be in 16..=65536"));
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(devices: &str) -> LiveConfig {
        serde_json::from_value(serde_json::json!({
            "devices": devices,
            "tenants": [{"name": "a", "model": "tiny-2l", "gpus": [0]}]
        }))
        .unwrap()
    }

    #[test]
    fn devices_are_cpu_n_or_cuda_n_and_errors_name_the_field() {
        assert_eq!(cfg("cpu:2").check().unwrap(), 2);
        assert_eq!(cfg("cuda:2").device_kind().unwrap(), (DeviceKind::Cuda, 2));
        for bad in ["cpu:0", "cpu:x", "gpu:1", "cuda:0", "cuda:", "cpu:99"] {
            let e = cfg(bad).check().unwrap_err();
            assert!(matches!(e, ApiError::Invalid { ref field, .. } if field == "devices"), "{bad}: {e}");
        }
        // Without a driver (CI, this machine) `cuda:N` is refused naming what is missing.
        if let Err(missing) = slicesched_exec::cuda::require_libraries() {
            let e = cfg("cuda:1").check().unwrap_err();
            assert!(matches!(e, ApiError::Invalid { ref field, .. } if field == "devices"), "{e}");
            assert!(e.to_string().contains(&missing.to_string()), "{e}");
        }
        let mut c = cfg("cpu:1");
        c.tenants[0].gpus = vec![1];
        assert!(c.check().unwrap_err().to_string().starts_with("tenants[0].gpus"));
    }
}
