//! Which presets a mix draws, which homes hold them, what a home serves, and SLAs.
//!
//! Whether a home fits is asked of the scenario loader: a one-tenant scenario on `tp`
//! GPUs of the SKU, sized by the same code every replay uses (weights, activation
//! reserve, KV pool). The replay's cost model prices a home (`Home`), which sets how
//! much load a tenant gets.

use super::GenError;
use slicesched_hw::GpuSku;
use slicesched_model::ModelConfig;
use slicesched_sim::{Scenario, ScenarioSpec};
use std::collections::BTreeMap;
use std::path::Path;

/// A preset the generator may draw, with what the presets do not record.
#[derive(Debug)]
pub struct Candidate {
    pub preset: &'static str,
    /// Short form for tenant names.
    pub short: &'static str,
    /// Billions of parameters (for the draw and the SLA).
    pub params_b: f64,
    /// Relative frequency in a mix: 7-8B models are the common case, 70B the rare one.
    pub weight: f64,
}

const fn c(preset: &'static str, short: &'static str, params_b: f64, weight: f64) -> Candidate {
    Candidate { preset, short, params_b, weight }
}

impl Candidate {
    /// The preset's context window, tokens: a load whose p99 request is longer is never
    /// given to it (its rarer longer requests are dropped at arrival, as a server would).
    pub fn context(&self) -> u64 {
        ModelConfig::preset(self.preset).ok().and_then(|m| m.context_window).unwrap_or(u64::MAX)
    }
}

/// The presets a mix draws from (the tiny CPU-test models are not among them).
pub const CANDIDATES: &[Candidate] = &[
    c("llama-2-7b", "l2-7b", 6.7, 1.0),
    c("llama-2-13b", "l2-13b", 13.0, 1.0),
    c("llama-2-70b", "l2-70b", 69.0, 0.3),
    c("llama-3-8b", "l3-8b", 8.0, 2.0),
    c("llama-3-70b", "l3-70b", 70.6, 0.4),
    c("mistral-7b", "mistral-7b", 7.2, 1.5),
    c("mistral-small-24b", "mistral-24b", 23.6, 1.0),
    c("qwen2.5-7b", "qwen-7b", 7.6, 1.5),
    c("qwen2.5-14b", "qwen-14b", 14.7, 1.0),
    c("qwen2.5-32b", "qwen-32b", 32.8, 0.6),
    c("codellama-34b", "codellama-34b", 33.7, 0.4),
];

/// Answers, per (preset, TP), the KV tokens a home gets alone on its GPUs.
pub struct Fitter {
    sku: GpuSku,
    cache: BTreeMap<(&'static str, u32), Option<u64>>,
}

impl Fitter {
    pub fn new(sku: GpuSku) -> Self {
        Fitter { sku, cache: BTreeMap::new() }
    }

    pub fn sku(&self) -> &GpuSku {
        &self.sku
    }

    /// Answers `kv_tokens` from `answer` instead of the loader (tests of what the
    /// generator does when homes do not fit).
    #[cfg(test)]
    pub fn with_answers(sku: GpuSku, answer: impl Fn(&Candidate, u32) -> Option<u64>) -> Self {
        let mut f = Fitter::new(sku);
        for c in CANDIDATES {
            for tp in [1, 2, 4, 8, 16, 32, 64] {
                f.cache.insert((c.preset, tp), answer(c, tp));
            }
        }
        f
    }

    /// KV tokens of a home of `c` on `tp` GPUs, or None when the weights and the
    /// activation reserve leave no room or the model does not split `tp` ways.
    pub fn kv_tokens(&mut self, c: &Candidate, tp: u32) -> Result<Option<u64>, GenError> {
        if let Some(v) = self.cache.get(&(c.preset, tp)) {
            return Ok(*v);
        }
        let v = self.ask_loader(c, tp)?;
        self.cache.insert((c.preset, tp), v);
        Ok(v)
    }

    /// The smallest TP degree (a power of two, at most `free`) whose home keeps at
    /// least `useful` KV tokens, with the tokens it keeps.
    pub fn smallest_home(&mut self, c: &Candidate, free: u32, useful: u64) -> Result<Option<(u32, u64)>, GenError> {
        let mut tp = 1;
        while tp <= free {
            if let Some(kv) = self.kv_tokens(c, tp)? {
                if kv >= useful {
                    return Ok(Some((tp, kv)));
                }
            }
            tp *= 2;
        }
        Ok(None)
    }

    fn ask_loader(&self, c: &Candidate, tp: u32) -> Result<Option<u64>, GenError> {
        let err = |msg: String| GenError::Fit { model: c.preset.into(), tp, sku: self.sku.name.clone(), msg };
        let model = ModelConfig::preset(c.preset).map_err(|e| err(e.to_string()))?;
        if model.check_tp(tp).is_err() {
            return Ok(None);
        }
        let table = "{ kind = \"poisson\", rate = 0.001 }";
        match one_tenant(&self.sku.name, c.preset, tp, table, Some(1.0), 0, Path::new(".")) {
            Ok(s) => {
                let t = &s.tenants[0];
                Ok(Some(t.kv_blocks as u64 * t.engine.block_size as u64))
            }
            // KV sizing (the `tenants` field) refuses a home its weights and activations fill.
            Err(slicesched_sim::ScenarioError::Field { field, .. }) if field == "tenants" => Ok(None),
            Err(e) => Err(err(e.to_string())),
        }
    }
}

/// Loads a scenario of one tenant of `model` on `tp` GPUs of `sku` with the trace
/// table `trace` (relative paths from `base`), through the loader every replay uses.
pub fn one_tenant(
    sku: &str,
    model: &str,
    tp: u32,
    trace: &str,
    duration_s: Option<f64>,
    seed: u64,
    base: &Path,
) -> Result<Scenario, slicesched_sim::ScenarioError> {
    let gpus: Vec<String> = (0..tp).map(|g| g.to_string()).collect();
    let duration = duration_s.map_or(String::new(), |d| format!("duration_s = {d}\n"));
    let text = format!(
        "name = \"probe\"\nseed = {seed}\n{duration}[cluster]\nname = \"probe\"\n[[cluster.nodes]]\n\
         gpu = \"{sku}\"\ngpus = {tp}\n[[tenants]]\nname = \"t\"\nmodel = \"{model}\"\ngpus = [{}]\n\
         sla = {{ ttft_ms = 1000, tpot_ms = 100 }}\ntrace = {trace}\n",
        gpus.join(", ")
    );
    let label = Path::new("<generator probe>");
    let spec: ScenarioSpec = toml::from_str(&text)
        .map_err(|e| slicesched_sim::ScenarioError::Parse { path: label.display().to_string(), msg: e.to_string() })?;
    Scenario::from_spec(spec, label, base)
}

/// A home's serving costs, from the replay's own cost model: a prefill chunk's time at
/// no prior context and at a long one (attention grows with the context), a decode
/// step's at a short and a long context.
pub struct Home {
    /// Seconds per prompt token (dense work) and per squared prompt token (attention).
    s_per_token: f64,
    s_per_token2: f64,
    /// A one-request decode step, and its extra seconds per token of context.
    step_s: f64,
    s_per_ctx_token: f64,
    weight_bytes: f64,
}

/// Engine CPU time between iterations, s (the cost model's ~1.4 ms).
const CPU_GAP_S: f64 = 0.0014;
const CHUNK: u32 = 4096;
const LONG: u32 = 65_536;

impl Home {
    pub fn new(c: &Candidate, tp: u32, sku: &GpuSku) -> Self {
        use slicesched_model::{DecodeItem, IterationBatch, PrefillItem};
        let m = ModelConfig::preset(c.preset).expect("candidates are presets (tested)");
        let cost = slicesched_cost::CostModel::default_a100();
        let ctx = slicesched_cost::DeviceCtx::single_node(sku.clone());
        let secs = |batch: IterationBatch| -> f64 {
            let dag = m.iteration_dag(&batch, tp);
            dag.ops().map(|o| cost.op_ns(&ctx, o.spec)).sum::<u64>() as f64 / 1e9
        };
        let chunk = |prior_kv| IterationBatch {
            prefills: vec![PrefillItem { chunk: CHUNK, prior_kv, samples: false }],
            decodes: vec![],
        };
        let decode = |kv_len| IterationBatch { prefills: vec![], decodes: vec![DecodeItem { kv_len }] };
        let (c0, c_long) = (secs(chunk(0)), secs(chunk(LONG)));
        let (d0, d_long) = (secs(decode(1024)), secs(decode(LONG + 1024)));
        Home {
            s_per_token: c0 / CHUNK as f64,
            // A chunk at prior context k costs extra ∝ chunk · k; over a prompt of p
            // tokens that sums to about p²/2.
            s_per_token2: ((c_long - c0).max(0.0) / (CHUNK as f64 * LONG as f64)) / 2.0,
            step_s: d0 + CPU_GAP_S,
            s_per_ctx_token: (d_long - d0).max(0.0) / LONG as f64,
            weight_bytes: m.weight_bytes_per_gpu(tp) as f64,
        }
    }

    /// Weight bytes per GPU (what a decode step reads; sets the TPOT floor).
    pub fn weight_bytes(&self) -> f64 {
        self.weight_bytes
    }

    /// Busy seconds per request that grow with the request rate linearly (prefill,
    /// reading the KV cache in decode), from the moments of prompt `p` and output `o`:
    /// E[p], E[p^2], E[o (p + o/2)].
    pub fn linear_s(&self, mean_p: f64, mean_p2: f64, mean_o_ctx: f64) -> f64 {
        self.s_per_token * mean_p + self.s_per_token2 * mean_p2 + self.s_per_ctx_token * mean_o_ctx
    }

    /// One decode step of a small batch, s (the weights stream once per step).
    pub fn step_s(&self) -> f64 {
        self.step_s
    }
}

/// A tenant's SLA (a scenario's `sla` table).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sla {
    pub ttft_ms: f64,
    pub ttft_ms_per_1k: f64,
    pub tpot_ms: f64,
}

/// Interactive targets for a 7-8B model on its own GPU (the shipped scenarios' light
/// tenants), loosened for larger models by the square root of their weight bytes per
/// GPU over a 7-8B's (a step reads them all), and by a drawn tier: some tenants are
/// stricter products than others.
pub fn sla(rng: &mut super::Rng, home: &Home, kind: super::LoadKind) -> Sla {
    let size = (home.weight_bytes() / 16e9).sqrt().max(1.0);
    let tier = [0.8, 1.0, 1.0, 1.25][rng.below(4)];
    // A long-prompt product promises less per prompt token than a chat one: its
    // prefills are mostly attention, whose time grows with the square of the prompt.
    let per_1k = if kind == super::LoadKind::LongPrompt { 250.0 } else { 200.0 };
    let r5 = |x: f64| (x / 5.0).round() * 5.0;
    Sla { ttft_ms: r5(400.0 * size * tier), ttft_ms_per_1k: r5(per_1k * size * tier), tpot_ms: r5(50.0 * size * tier) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_presets_with_their_sizes() {
        for c in CANDIDATES {
            let m = ModelConfig::preset(c.preset).unwrap();
            let b = m.parameters() as f64 / 1e9;
            assert!((b / c.params_b - 1.0).abs() < 0.1, "{}: {b:.1}B, listed {}", c.preset, c.params_b);
        }
    }

    #[test]
    fn homes_grow_with_the_model() {
        let h100 = slicesched_hw::sku("H100-80GB").unwrap();
        let mut f = Fitter::new(h100);
        let find = |p: &str| CANDIDATES.iter().find(|c| c.preset == p).unwrap();
        assert_eq!(f.smallest_home(find("llama-3-8b"), 8, 32_768).unwrap().unwrap().0, 1);
        // 138 GB of weights: never one H100; two leave ~48k KV tokens, four for more.
        let l70 = find("llama-2-70b");
        assert_eq!(f.kv_tokens(l70, 1).unwrap(), None);
        assert_eq!(f.smallest_home(l70, 8, 32_768).unwrap().unwrap().0, 2);
        assert_eq!(f.smallest_home(l70, 8, 100_000).unwrap().unwrap().0, 4);
        assert_eq!(f.smallest_home(l70, 2, 100_000).unwrap(), None);
        // More GPUs, more KV per token held.
        let one = f.kv_tokens(find("llama-2-13b"), 1).unwrap().unwrap();
        let two = f.kv_tokens(find("llama-2-13b"), 2).unwrap().unwrap();
        assert!(two > 2 * one, "{one} {two}");
    }
}
