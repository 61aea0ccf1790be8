//! The data a policy sees and answers: one Rust type per record of the WIT interface.

/// Which weight copies the policy wants the planner to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaMode {
    /// Homes only (container-level baselines).
    None,
    /// Weight-only copies, whole or by layer range, for operator-level borrowing.
    Weights,
    /// Whole-model copies with their own KV cache, for request-level routing.
    Serving,
    /// Serving copies where they fit, weight-only layer ranges where they do not.
    Both,
}

/// What a policy is and which core services it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub name: String,
    pub version: String,
    pub replicas: ReplicaMode,
    /// Cost of switching a GPU between tenants' processes, ns.
    pub context_switch_ns: u64,
    /// MPS-style static SM shares for co-located tenants.
    pub spatial_sharing: bool,
    /// Whether `place` reads the view's GPU and tenant figures.
    pub reads_view: bool,
}

impl Info {
    /// A policy that uses no replicas, pays no context switch, does not share SMs and
    /// reads the view.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            replicas: ReplicaMode::None,
            context_switch_ns: 0,
            spatial_sharing: false,
            reads_view: true,
        }
    }
}

/// The kind of an operator, as the model's DAG names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Embedding,
    InputNorm,
    QkvProj,
    Rope,
    /// Reads the KV cache: runs on its instance's group.
    Attention,
    OProj,
    AllReduce,
    ResidualAdd,
    PostAttnNorm,
    GateUpProj,
    Activation,
    DownProj,
    FinalNorm,
    LmHead,
    AllGather,
    Transfer,
}

/// A ready operator offered to the policy; answers name it by its index in the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyOp {
    pub tenant: u32,
    pub kind: OpKind,
    /// Layer of a layer op; None for embedding and LM head.
    pub layer: Option<u32>,
    /// Predicted run time on its home group, ns.
    pub predicted_ns: u64,
    /// Group of the instance whose KV cache the op uses.
    pub home: u32,
    pub ready_ns: u64,
    /// Group where its largest input was produced, and that input's bytes.
    pub input_group: Option<u32>,
    pub input_bytes: u64,
    pub out_bytes: u64,
    /// Engine instance of its iteration.
    pub instance: u32,
    pub prefill_tokens: u32,
    pub decodes: u32,
}

/// A decision for one ready op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Index of the op in the `ready` slice.
    pub op: u32,
    /// Group index.
    pub group: u32,
    pub priority: i32,
}

/// One GPU's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpu {
    /// When it is free of started work, ns (≤ now when idle).
    pub busy_until_ns: u64,
    /// Predicted ns of work placed and waiting for it.
    pub queued_ns: u64,
    /// Earliest time its owner needs it; u64::MAX when nothing is in sight.
    pub owner_need_ns: u64,
}

/// One tenant's state; its id is its index in `View::tenants`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenant {
    pub home: u32,
    pub layers: u32,
    /// ns before the oldest waiting request misses its TTFT target (i64::MAX: none waits).
    pub slack_ns: i64,
    pub tpot_target_ns: u64,
}

/// An engine instance: a tenant's home, or a serving replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    pub index: u32,
    pub tenant: u32,
    pub group: u32,
    pub is_home: bool,
    pub waiting: u32,
    pub running: u32,
    /// Iterations executing.
    pub inflight: u32,
    pub kv_free_blocks: u32,
    pub kv_total_blocks: u32,
    /// Prompt tokens its waiting and running requests have still to prefill: its engine
    /// gives chunks to the oldest first, so a new request's prefill starts after these.
    pub prefill_tokens: u64,
    /// Tokens one iteration of its engine takes at most (prefill chunks and decodes).
    pub batch_tokens: u32,
}

/// A tenant's weights on a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Home {
    pub tenant: u32,
    pub group: u32,
    /// Layers `[first_layer, end_layer)` are resident.
    pub first_layer: u32,
    pub end_layer: u32,
    pub is_home: bool,
    pub serves: bool,
}

/// A link between two groups' first GPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub same_device: bool,
    pub latency_ns: u64,
    /// Bytes per second.
    pub bandwidth: f64,
}

impl Link {
    /// Nanoseconds to move `bytes` over this link (the core's formula, bit for bit).
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        if self.same_device || bytes == 0 {
            return 0;
        }
        self.latency_ns + (bytes as f64 / self.bandwidth * 1e9) as u64
    }
}

/// What a policy sees of the cluster when it decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    pub now_ns: u64,
    /// Per GPU, by GPU index.
    pub gpus: Vec<Gpu>,
    pub tenants: Vec<Tenant>,
    /// Engine instances: as of now in `admit` and `route`, as of the last of those in
    /// `place` (the host does not send them per op decision).
    pub instances: Vec<Instance>,
    pub homes: Vec<Home>,
    /// Each group's GPU indices; a group's index is its id.
    pub groups: Vec<Vec<u32>>,
    /// Links between groups, row-major `groups × groups`.
    pub links: Vec<Link>,
}

/// A placement to ask the core's what-if about (see [`WhatIf`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Index of the op in the `ready` slice being decided.
    pub op: u32,
    pub group: u32,
    pub priority: i32,
}

/// What the core would do with a probe's placement: its checks, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// It would run there.
    Accepted,
    /// No such op in the batch being decided (or no batch is being decided).
    NotOffered,
    NoSuchGroup,
    /// Attention must stay with its KV cache.
    AttentionAway,
    /// The group lacks the weights of the op's layer.
    WeightsMissing,
    /// The group's reserve for borrowed ops' activations would overflow.
    GuestMemory,
    /// It could not finish before the group's owner needs it back.
    OwnerGuard,
    /// Predicted memory over a GPU's capacity while it runs.
    MemoryOverCapacity,
    /// It would push the owner's committed ops back past the guard.
    DelaysOwner,
    /// The timeline could not take the op (an internal inconsistency; never seen).
    TimelineRefused,
    /// The call's probe budget is spent; nothing was computed.
    OverBudget,
}

impl Verdict {
    /// The reason a refused placement is counted under in the core's reports.
    pub fn reason(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::NotOffered => "op not offered",
            Verdict::NoSuchGroup => "no such GPU group",
            Verdict::AttentionAway => "attention away from its KV cache",
            Verdict::WeightsMissing => "weights not resident on the group",
            Verdict::GuestMemory => "guest memory reserve exhausted",
            Verdict::OwnerGuard => "would delay the GPU's owner past its guard",
            Verdict::MemoryOverCapacity => "what-if: predicted peak memory over capacity",
            Verdict::DelaysOwner => "what-if: delays the GPU's owner past its guard",
            Verdict::TimelineRefused => "what-if refused the candidate",
            Verdict::OverBudget => "what-if budget spent",
        }
    }
}

/// The prediction for one probe: its own times on its group, even when the verdict
/// sends it home (zeros where nothing was computed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub verdict: Verdict,
    pub start_ns: u64,
    pub finish_ns: u64,
    /// The slowest transfer of its inputs to the group, and their bytes.
    pub transfer_ns: u64,
    pub transfer_bytes: u64,
    /// Highest predicted memory use among the group's GPUs while it runs.
    pub peak_bytes: u64,
}

/// A tenant that probe `probe` would delay: its committed ops finish up to `delay_ns`
/// later, so its SLA slack shrinks by that much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delay {
    pub probe: u32,
    pub tenant: u32,
    pub delay_ns: u64,
}

/// The answer to a batch of probes; reuse one across calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WhatIfAnswer {
    /// One per probe, in order.
    pub outcomes: Vec<Outcome>,
    /// Per probe, every tenant it delays, in probe order.
    pub delays: Vec<Delay>,
}

/// The core's committed timeline, asked while a policy decides
/// ([`crate::Policy::place_with_what_if`]). Each probe is answered on its own, from
/// the committed state plus that one op: probes are alternatives, not a plan.
pub trait WhatIf {
    /// Clears `answer`, then fills it: one outcome per probe and the delays.
    fn ask(&mut self, probes: &[Probe], answer: &mut WhatIfAnswer);
}

/// A what-if that knows nothing: every probe comes back [`Verdict::NotOffered`]. For
/// calling a policy outside a scheduler (unit tests).
pub struct NoWhatIf;

impl WhatIf for NoWhatIf {
    fn ask(&mut self, probes: &[Probe], answer: &mut WhatIfAnswer) {
        answer.outcomes.clear();
        answer.delays.clear();
        answer.outcomes.extend(probes.iter().map(|_| Outcome {
            verdict: Verdict::NotOffered,
            start_ns: 0,
            finish_ns: 0,
            transfer_ns: 0,
            transfer_bytes: 0,
            peak_bytes: 0,
        }));
    }
}
