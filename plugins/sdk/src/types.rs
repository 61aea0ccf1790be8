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
