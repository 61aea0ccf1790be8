//! Scenario files: cluster, tenants, traces, seed.

use serde::{Deserialize, Serialize};
use slicesched_engine::{EngineConfig, Sla};
use slicesched_gmg::{Deployment, DeploymentError};
use slicesched_hw::{Cluster, ClusterSpec, GpuId};
use slicesched_model::{IterationBatch, ModelConfig, PrefillItem};
use slicesched_trace::{Request, TraceSpec};
use std::path::{Path, PathBuf};

/// A scenario as written in TOML.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub seed: u64,
    /// Seconds of trace to replay (each tenant's window); without it, file traces are
    /// replayed once, whole, and synthetic ones need their own `window_s`.
    pub duration_s: Option<f64>,
    /// After the last arrival, how long requests may still finish before the replay
    /// stops and reports the rest as dropped.
    #[serde(default = "default_drain")]
    pub drain_s: f64,
    pub cluster: ClusterRef,
    #[serde(default)]
    pub engine: EngineConfig,
    #[serde(default)]
    pub memory: MemorySpec,
    /// Where replicas go for policies that use them.
    #[serde(default)]
    pub planner: crate::planner::PlannerSpec,
    pub tenants: Vec<TenantSpec>,
}

/// Largest `memory.reserve_gb` (far above any GPU's memory, far below overflow).
pub const MAX_RESERVE_GB: f64 = 1e6;
/// Largest KV-token request (times bytes per token it must stay a `u64`).
pub const MAX_KV_TOKENS: u64 = 1 << 32;

fn default_drain() -> f64 {
    600.0
}

/// A cluster given inline or as a path to its TOML file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ClusterRef {
    Path(String),
    Inline(ClusterSpec),
}

/// How much device memory serving may use.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySpec {
    /// Fraction of device memory the engines may use (vLLM's gpu_memory_utilization).
    pub gpu_memory_utilization: f64,
    /// Never touched by serving: CUDA context, fragmentation, NCCL buffers.
    pub reserve_gb: f64,
}

impl Default for MemorySpec {
    fn default() -> Self {
        Self { gpu_memory_utilization: 0.90, reserve_gb: 0.0 }
    }
}

/// One tenant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    pub name: String,
    /// A preset name or a path to a `config.json` / `model_config.yml`.
    pub model: String,
    /// Home GPUs: the tenant's container. Its ops run here under `dedicated`.
    pub gpus: Vec<u32>,
    pub sla: Sla,
    pub trace: TraceSpec,
    /// Overrides of the scenario's engine settings.
    #[serde(default)]
    pub engine: Option<EngineConfig>,
    /// KV-cache tokens its home is guaranteed whatever other tenants' replicas want: an
    /// explicit request, like a Kubernetes resource request, for a tenant that knows
    /// better than its trace (a load it expects). Without it the planner reserves what
    /// the tenant's load holds at its peak (`load.rs`, Little's law).
    #[serde(default)]
    pub keep_kv_tokens: Option<u64>,
    /// A mixture-of-experts model's experts split whole across its home GPUs, tokens
    /// moving to them by all-to-all (vLLM's `--enable-expert-parallel`), rather than
    /// every expert split across them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expert_parallel: bool,
    /// Longest request served, prompt and output together (vLLM's `--max-model-len`):
    /// at most the model's context window, which it defaults to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    // The io error is in the message, not `source()`: shown once where a caller prints the chain.
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{path}: {msg}")]
    Parse { path: String, msg: String },
    #[error("{path}: {field}: {msg}")]
    Field { path: String, field: String, msg: String },
}

/// A tenant resolved against the cluster.
#[derive(Debug, Clone)]
pub struct TenantSetup {
    pub name: String,
    pub model: ModelConfig,
    pub gpus: Vec<GpuId>,
    pub sla: Sla,
    pub engine: EngineConfig,
    /// KV-cache blocks its engine gets.
    pub kv_blocks: u32,
    /// Peak activation bytes per GPU of one iteration at the full token budget.
    pub activation_reserve: u64,
    /// KV-cache tokens its home keeps whatever replicas want: its explicit request, else
    /// what the planner derived from its load (0 before planning).
    pub keep_kv_tokens: u64,
    /// The tenant's explicit KV request (`keep_kv_tokens` in its `[[tenants]]`).
    pub kv_request: Option<u64>,
    /// Longest request it serves (its `max_model_len`, else the model's context
    /// window); a longer one is dropped at arrival. `None`: no limit stated.
    pub max_model_len: Option<u64>,
}

impl TenantSetup {
    /// Why a request of these lengths is refused at arrival, if it is: longer than the
    /// tenant's [`Self::max_model_len`] (a server answers it 400; no placement serves it).
    pub fn length_refusal(&self, prompt_tokens: u32, output_tokens: u32) -> Option<&'static str> {
        let len = self.max_model_len?;
        if prompt_tokens as u64 > len {
            Some("prompt over the model's context window (max_model_len)")
        } else if prompt_tokens as u64 + output_tokens.max(1) as u64 > len {
            Some("prompt + output over the model's context window (max_model_len)")
        } else {
            None
        }
    }

    /// KV bytes per GPU its home keeps ([`Self::keep_kv_tokens`]).
    pub fn keep_bytes(&self) -> u64 {
        self.keep_kv_tokens * self.model.kv_bytes_per_token(self.gpus.len() as u32)
    }
}

/// A loaded, validated scenario with its requests materialised.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub spec: ScenarioSpec,
    pub path: PathBuf,
    pub cluster: Cluster,
    pub tenants: Vec<TenantSetup>,
    pub deployment: Deployment,
    /// (tenant index, request), sorted by arrival then tenant.
    pub requests: Vec<(u32, Request)>,
    /// Rows skipped while reading traces, as "tenant: reason" with counts.
    pub skipped: Vec<(String, u64)>,
    pub memory: MemorySpec,
    /// Per GPU, activation bytes kept for ops borrowed from other tenants.
    pub guest_reserve: Vec<u64>,
}

/// The seed of draw `k` of a scenario whose file says `seed` (draw 0 is the file's own):
/// `replay --seed`, `sweep --seeds K` and the API's sweeps of several draws name their
/// draws by it. A tenant's load is drawn from the scenario's seed plus its index, so
/// draws are a large odd stride apart: no draw's tenant shares another draw's tenant's
/// seed. Taken modulo 2^63 so that every draw can be written as a scenario's `seed`
/// (TOML integers are signed 64-bit).
pub fn draw_seed(seed: u64, k: u32) -> u64 {
    seed.wrapping_add(u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15)) & (i64::MAX as u64)
}

impl Scenario {
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        Self::from_file_for(path, None)
    }

    /// [`Scenario::from_file`] with its `duration_s` replaced by `duration_s` where one is
    /// given (`replay --duration-s`, `sweep --duration-s`): the traces, and so the loads the
    /// planner meters, are those of that stretch.
    pub fn from_file_for(path: &Path, duration_s: Option<f64>) -> Result<Self, ScenarioError> {
        Self::from_file_drawn(path, duration_s, None)
    }

    /// [`Scenario::from_file_for`] with its `seed` replaced by `seed` where one is given
    /// (`replay --seed`, `sweep --seeds`): another draw of the same mix. Synthetic loads
    /// are drawn again; traces read from files keep their requests, and `split`s their
    /// own seeds.
    pub fn from_file_drawn(path: &Path, duration_s: Option<f64>, seed: Option<u64>) -> Result<Self, ScenarioError> {
        let mut spec = Self::read_spec(path)?;
        spec.duration_s = duration_s.or(spec.duration_s);
        spec.seed = seed.unwrap_or(spec.seed);
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_spec(spec, path, base)
    }

    /// The scenario file's spec as written, nothing resolved (its seed, say, without
    /// drawing its requests).
    pub fn read_spec(path: &Path) -> Result<ScenarioSpec, ScenarioError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| ScenarioError::Io { path: p.clone(), err })?;
        toml::from_str(&text).map_err(|e| ScenarioError::Parse { path: p, msg: e.to_string() })
    }

    /// Resolves models, cluster, deployment and traces. `path` labels errors.
    pub fn from_spec(spec: ScenarioSpec, path: &Path, base: &Path) -> Result<Self, ScenarioError> {
        let p = path.display().to_string();
        let field = |f: String, msg: String| ScenarioError::Field { path: p.clone(), field: f, msg };
        let cluster = match &spec.cluster {
            ClusterRef::Path(c) => Cluster::from_file(&base.join(c)),
            ClusterRef::Inline(c) => Cluster::from_spec(c, &format!("{p}: cluster")),
        }
        .map_err(|e| field("cluster".into(), e.to_string()))?;
        if spec.tenants.is_empty() {
            return Err(field("tenants".into(), "a scenario needs at least one tenant".into()));
        }
        if !(spec.drain_s.is_finite() && spec.drain_s >= 0.0) {
            return Err(field("drain_s".into(), "must be a non-negative number".into()));
        }
        if let Some(d) = spec.duration_s {
            if !(d.is_finite() && d > 0.0) {
                return Err(field("duration_s".into(), "must be positive".into()));
            }
        }
        let mem = spec.memory;
        if !(mem.gpu_memory_utilization > 0.0 && mem.gpu_memory_utilization <= 1.0) {
            return Err(field("memory.gpu_memory_utilization".into(), "must be in (0, 1]".into()));
        }
        // Checked before it becomes bytes: `2e10 GB` as u64 bytes saturates, and added to
        // the utilisation margin it would wrap to nearly nothing.
        if !(mem.reserve_gb.is_finite() && (0.0..=MAX_RESERVE_GB).contains(&mem.reserve_gb)) {
            return Err(field(
                "memory.reserve_gb".into(),
                format!("must be in [0, {MAX_RESERVE_GB}], got {}", mem.reserve_gb),
            ));
        }

        let mut deployment = Deployment::default();
        let mut tenants = Vec::with_capacity(spec.tenants.len());
        for (i, t) in spec.tenants.iter().enumerate() {
            let tf = |name: &str| format!("tenants[{i}] ({}).{name}", t.name);
            if t.name.is_empty() || spec.tenants[..i].iter().any(|o| o.name == t.name) {
                return Err(field(format!("tenants[{i}].name"), format!("`{}` is empty or not unique", t.name)));
            }
            let mut model = ModelConfig::resolve(&t.model, base).map_err(|e| field(tf("model"), e.to_string()))?;
            if t.expert_parallel {
                let moe = model.moe.as_mut().ok_or_else(|| {
                    field(tf("expert_parallel"), format!("`{}` is not a mixture-of-experts model", t.model))
                })?;
                moe.expert_parallel = true;
            }
            let gpus: Vec<GpuId> = t.gpus.iter().map(|&g| GpuId(g)).collect();
            Deployment::check_gpus(&cluster, &t.name, &gpus).map_err(|e| field(tf("gpus"), e.to_string()))?;
            model.check_tp(gpus.len() as u32).map_err(|e| field(tf("gpus"), e))?;
            t.sla.check().map_err(|e| field(tf("sla"), e))?;
            if let Some(k) = t.keep_kv_tokens.filter(|&k| k > MAX_KV_TOKENS) {
                return Err(field(tf("keep_kv_tokens"), format!("must be at most {MAX_KV_TOKENS}, got {k}")));
            }
            let max_model_len = match (t.max_model_len, model.context_window) {
                (Some(0), _) => return Err(field(tf("max_model_len"), "must be positive".into())),
                (Some(l), Some(w)) if l > w => {
                    return Err(field(
                        tf("max_model_len"),
                        format!("{l} is over the model's context window (max_position_embeddings {w})"),
                    ))
                }
                (l, w) => l.or(w),
            };
            let engine = t.engine.unwrap_or(spec.engine);
            if engine.max_batched_tokens == 0 || engine.max_num_seqs == 0 || engine.block_size == 0 {
                return Err(field(
                    tf("engine"),
                    "max_batched_tokens, max_num_seqs and block_size must be positive".into(),
                ));
            }
            let group = deployment.group_for(&gpus);
            let tp = gpus.len() as u32;
            deployment.homes.push(slicesched_gmg::TenantHome {
                tenant: slicesched_gmg::TenantId(i as u32),
                group,
                layers: (0, model.num_hidden_layers as u32),
                weight_bytes_per_gpu: model.weight_bytes_per_gpu(tp),
                is_home: true,
                serves: true,
                kv_blocks: 0,
            });
            let activation_reserve = activation_reserve(&model, tp, &engine);
            tenants.push(TenantSetup {
                name: t.name.clone(),
                model,
                gpus,
                sla: t.sla,
                engine,
                kv_blocks: 0,
                activation_reserve,
                keep_kv_tokens: t.keep_kv_tokens.unwrap_or(0),
                kv_request: t.keep_kv_tokens,
                max_model_len,
            });
        }
        spec.planner.check().map_err(|e| field("planner".into(), e))?;
        let guest_reserve = vec![0; cluster.len()];
        size_kv_caches(&cluster, &mut deployment, &tenants, mem, &guest_reserve, false)
            .map_err(|e| field("tenants".into(), e.to_string()))?;
        for (i, t) in tenants.iter_mut().enumerate() {
            t.kv_blocks = deployment.home(slicesched_gmg::TenantId(i as u32)).map_or(0, |h| h.kv_blocks);
        }

        let mut requests = Vec::new();
        let mut skipped = Vec::new();
        for (i, t) in spec.tenants.iter().enumerate() {
            let loaded = t
                .trace
                .load(base, spec.seed.wrapping_add(i as u64), spec.duration_s.unwrap_or(f64::INFINITY))
                .map_err(|e| field(format!("tenants[{i}] ({}).trace", t.name), e.to_string()))?;
            // Rows left out by a split, a window or a model filter were chosen, not bad.
            use slicesched_trace::reason;
            for (why, n) in &loaded.skipped.counts {
                if ![reason::SPLIT, reason::OUTSIDE_WINDOW, reason::MODEL_FILTER].contains(&why.as_str()) {
                    skipped.push((format!("{}: {why}", t.name), *n));
                }
            }
            requests.extend(loaded.requests.into_iter().map(|r| (i as u32, r)));
        }
        requests.sort_by_key(|(t, r)| (r.arrival_ns, *t));
        Ok(Self {
            spec,
            path: path.to_path_buf(),
            cluster,
            tenants,
            deployment,
            requests,
            skipped,
            memory: mem,
            guest_reserve,
        })
    }

    /// The same scenario with every tenant's arrival rate multiplied by `scale`:
    /// inter-arrival times shrink by `scale`, the requests themselves are unchanged.
    /// Goodput sweeps search over this.
    /// The share of the requests refused at arrival for their length (longer than
    /// their model's context window), whatever the policy and the rate scale.
    pub fn refused_share(&self) -> f64 {
        let refused = self
            .requests
            .iter()
            .filter(|(t, r)| self.tenants[*t as usize].length_refusal(r.prompt_tokens, r.output_tokens).is_some())
            .count();
        refused as f64 / self.requests.len().max(1) as f64
    }

    pub fn with_rate_scale(&self, scale: f64) -> Scenario {
        assert!(scale.is_finite() && scale > 0.0, "rate scale must be positive");
        let mut s = self.clone();
        for (_, r) in &mut s.requests {
            r.arrival_ns = (r.arrival_ns as f64 / scale).round() as u64;
        }
        s
    }

    /// Bytes per GPU that serving never uses.
    pub fn unusable_bytes(&self, capacity: u64) -> u64 {
        unusable(capacity, self.memory)
    }

    /// Bytes of KV cache on `gpu` in this deployment.
    pub fn kv_bytes_on(&self, gpu: GpuId) -> u64 {
        self.deployment
            .homes
            .iter()
            .filter(|h| h.serves && self.deployment.group(h.group).gpus.contains(&gpu))
            .map(|h| {
                let t = &self.tenants[h.tenant.index()];
                h.kv_blocks as u64 * t.engine.block_size as u64 * t.model.kv_bytes_per_token(t.gpus.len() as u32)
            })
            .sum()
    }
}

fn unusable(capacity: u64, mem: MemorySpec) -> u64 {
    let util = (capacity as f64 * (1.0 - mem.gpu_memory_utilization)) as u64;
    util.saturating_add((mem.reserve_gb * 1e9) as u64)
}

/// Activation bytes per GPU an instance keeps for its iterations: a full-budget
/// prefill iteration and, beside it, a decode step of every sequence the engine may hold
/// (the split of micro-batches the engine is built for: decodes never wait behind a
/// chunk). An extra micro-batch that would take its instance past this waits for one to
/// end (`Sim::start_iterations`).
pub(crate) fn activation_reserve(model: &ModelConfig, tp: u32, engine: &slicesched_engine::EngineConfig) -> u64 {
    let prefill = IterationBatch {
        prefills: vec![PrefillItem { chunk: engine.max_batched_tokens, prior_kv: 0, samples: true }],
        decodes: vec![],
    };
    let n = engine.max_num_seqs.min(engine.max_batched_tokens) as usize;
    let decodes = IterationBatch { prefills: vec![], decodes: vec![slicesched_model::DecodeItem { kv_len: 1 }; n] };
    peak_activation_bytes(model, tp, &prefill) + peak_activation_bytes(model, tp, &decodes)
}

/// Peak live activation bytes per GPU of one iteration of `batch` executed op by op in
/// DAG order (outputs live from their op until their last consumer).
pub(crate) fn peak_activation_bytes(model: &ModelConfig, tp: u32, batch: &IterationBatch) -> u64 {
    let dag = model.iteration_dag(batch, tp);
    let mut consumers = vec![0u32; dag.len() as usize];
    for (p, _, _) in dag.edges() {
        consumers[p as usize] += 1;
    }
    let (mut live, mut peak) = (0u64, 0u64);
    for i in 0..dag.len() {
        let out = dag.op(i).spec.out_bytes;
        live += out;
        peak = peak.max(live);
        for p in dag.preds(i) {
            consumers[p as usize] -= 1;
            if consumers[p as usize] == 0 {
                live -= dag.op(p).spec.out_bytes;
            }
        }
    }
    peak
}

/// Splits each GPU's memory left after weights, activation reserves and the guest
/// reserve among the engine instances (homes and serving replicas) on it, and sizes
/// every instance's KV cache from its tightest GPU. With `home_keep` (once replicas
/// exist), each home first keeps its tenant's `keep_kv_tokens` (its request, or what the
/// planner derived from its load); without, the split is even.
pub(crate) fn size_kv_caches(
    cluster: &Cluster,
    dep: &mut Deployment,
    tenants: &[TenantSetup],
    mem: MemorySpec,
    guest_reserve: &[u64],
    home_keep: bool,
) -> Result<(), DeploymentError> {
    let n = cluster.len();
    let serving = |h: &slicesched_gmg::TenantHome| h.serves;
    let home_keep_bytes = |t: &TenantSetup| if home_keep { t.keep_bytes() } else { 0 };
    let mut residents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, h) in dep.homes.iter().enumerate() {
        if serving(h) {
            for g in &dep.group(h.group).gpus {
                residents[g.0 as usize].push(i);
            }
        }
    }
    let mut share = vec![0u64; n];
    let mut keep_on = vec![0u64; n];
    // What the homes on each GPU ask between them.
    let mut asks_on = vec![0u64; n];
    for g in 0..n {
        let cap = cluster.gpus[g].sku.memory;
        let usable = cap - unusable(cap, mem).min(cap);
        let weights = dep.weight_bytes_on(GpuId(g as u32));
        let acts: u64 = residents[g].iter().map(|&i| tenants[dep.homes[i].tenant.index()].activation_reserve).sum();
        let need = weights + acts + guest_reserve.get(g).copied().unwrap_or(0);
        if need >= usable && !residents[g].is_empty() {
            let names = residents[g]
                .iter()
                .map(|&i| tenants[dep.homes[i].tenant.index()].name.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(DeploymentError::DoesNotFit {
                gpu: g as u32,
                need_gb: need as f64 / 1e9,
                cap_gb: usable as f64 / 1e9,
                tenants: names,
            });
        }
        // A tenant's home keeps its `keep_kv_tokens` of KV before replicas hosted on
        // its GPUs share what is left with it: an equal byte split would give a
        // KV-heavy model (a 13B with 4x the bytes per token of an 8B with GQA) a
        // fraction of the tokens and make it preempt under load.
        let free = usable.saturating_sub(need);
        asks_on[g] = residents[g]
            .iter()
            .filter(|&&i| dep.homes[i].is_home)
            .map(|&i| home_keep_bytes(&tenants[dep.homes[i].tenant.index()]))
            .sum();
        // Serving replicas hosted here keep at least a quarter between them.
        let kept =
            asks_on[g].min(if residents[g].iter().any(|&i| !dep.homes[i].is_home) { free / 4 * 3 } else { free });
        share[g] = (free - kept) / residents[g].len().max(1) as u64;
        keep_on[g] = kept;
    }
    for i in 0..dep.homes.len() {
        if !serving(&dep.homes[i]) {
            continue;
        }
        let t = &tenants[dep.homes[i].tenant.index()];
        let per_block = t.model.kv_bytes_per_token(t.gpus.len() as u32) * t.engine.block_size as u64;
        let gpus = &dep.group(dep.homes[i].group).gpus;
        let home = &dep.homes[i];
        let free = gpus
            .iter()
            .map(|g| {
                let g = g.0 as usize;
                // Homes co-located on a GPU split what was kept in proportion to their asks.
                let kept = if home.is_home && keep_on[g] > 0 {
                    (keep_on[g] as u128 * home_keep_bytes(t) as u128 / asks_on[g].max(1) as u128) as u64
                } else {
                    0
                };
                share[g] + kept
            })
            .min()
            .unwrap_or(0);
        let blocks = (free / per_block).min(u32::MAX as u64) as u32;
        if blocks == 0 {
            return Err(DeploymentError::DoesNotFit {
                gpu: gpus[0].0,
                need_gb: per_block as f64 / 1e9,
                cap_gb: free as f64 / 1e9,
                tenants: format!("{} (no room for a single KV block)", t.name),
            });
        }
        dep.homes[i].kv_blocks = blocks;
    }
    Ok(())
}
