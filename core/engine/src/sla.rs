//! Tenant service-level objectives.

use serde::{Deserialize, Serialize};

/// A tenant's SLA. A request violates it when its TTFT or its mean TPOT exceeds target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sla {
    /// Fixed part of the time-to-first-token target, ms.
    pub ttft_ms: f64,
    /// Extra TTFT allowed per 1,000 prompt tokens, ms (long prompts cannot be as fast).
    #[serde(default)]
    pub ttft_ms_per_1k: f64,
    /// Mean time-per-output-token target, ms.
    pub tpot_ms: f64,
}

impl Sla {
    pub fn ttft_target_ns(&self, prompt_tokens: u32) -> u64 {
        ((self.ttft_ms + self.ttft_ms_per_1k * prompt_tokens as f64 / 1000.0) * 1e6) as u64
    }
    pub fn tpot_target_ns(&self) -> u64 {
        (self.tpot_ms * 1e6) as u64
    }
    /// Why the targets are unusable, if they are.
    pub fn check(&self) -> Result<(), String> {
        let ok = |v: f64| v.is_finite() && v > 0.0 && v <= 3.6e6;
        if !ok(self.ttft_ms) {
            return Err(format!("ttft_ms must be in (0, 3.6e6], got {}", self.ttft_ms));
        }
        if !ok(self.tpot_ms) {
            return Err(format!("tpot_ms must be in (0, 3.6e6], got {}", self.tpot_ms));
        }
        if !(self.ttft_ms_per_1k.is_finite() && (0.0..=3.6e6).contains(&self.ttft_ms_per_1k)) {
            return Err(format!("ttft_ms_per_1k must be in [0, 3.6e6], got {}", self.ttft_ms_per_1k));
        }
        Ok(())
    }
}
