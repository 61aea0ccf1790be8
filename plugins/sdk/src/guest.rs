//! The Wasm side of the SDK: WIT bindings, and the conversions between the WIT values
//! and the SDK's types that [`crate::export_policy!`] calls.

// Lets the bindings name the runtime through this crate, so plugin crates need no
// direct wit-bindgen dependency.
pub use wit_bindgen;

wit_bindgen::generate!({
    path: "../wit/since_v0.3.0",
    world: "plugin",
    pub_export_macro: true,
    default_bindings_module: "slicesched_plugin_sdk::guest",
    runtime_path: "slicesched_plugin_sdk::guest::wit_bindgen::rt",
});

/// The exported interface's types.
pub use exports::slicesched::policy::policy as wit;
use slicesched::policy::host::{self as host, log, Level};

use crate::{
    Delay, Gpu, Home, Info, Instance, Link, OpKind, Outcome, Placement, Policy, Probe, ReadyOp, ReplicaMode, Tenant,
    Verdict, View, WhatIf, WhatIfAnswer,
};

/// Writes a line to the host's log.
pub fn log_info(message: &str) {
    log(Level::Info, message);
}

/// One policy and the buffers its calls reuse (allocations inside the guest cost
/// fuel and memory growth).
pub struct State<P> {
    policy: P,
    view: View,
    ready: Vec<ReadyOp>,
    out: Vec<Placement>,
    instances: Vec<Instance>,
    what_if: HostWhatIf,
}

impl<P: Policy> State<P> {
    pub fn new(policy: P) -> Self {
        // A panic's message would be lost in the trap: send it to the host first.
        std::panic::set_hook(Box::new(|p| log(Level::Error, &p.to_string())));
        Self {
            policy,
            view: View::default(),
            ready: Vec::new(),
            out: Vec::new(),
            instances: Vec::new(),
            what_if: HostWhatIf(Vec::new()),
        }
    }

    pub fn describe(&mut self) -> wit::Info {
        let Info { name, version, replicas, context_switch_ns, spatial_sharing, reads_view } = self.policy.info();
        let replicas = match replicas {
            ReplicaMode::None => wit::ReplicaMode::None,
            ReplicaMode::Weights => wit::ReplicaMode::Weights,
            ReplicaMode::Serving => wit::ReplicaMode::Serving,
            ReplicaMode::Both => wit::ReplicaMode::Both,
        };
        wit::Info { name, version, replicas, context_switch_ns, spatial_sharing, reads_view }
    }

    pub fn configure(&mut self, d: wit::Deployment) -> Result<(), String> {
        let view = &mut self.view;
        view.homes.clear();
        view.homes.extend(d.homes.into_iter().map(|h| Home {
            tenant: h.tenant,
            group: h.group,
            first_layer: h.first_layer,
            end_layer: h.end_layer,
            is_home: h.is_home,
            serves: h.serves,
        }));
        view.groups = d.groups;
        view.links.clear();
        view.links.extend(d.links.into_iter().map(|l| Link {
            same_device: l.same_device,
            latency_ns: l.latency_ns,
            bandwidth: l.bandwidth,
        }));
        // Slack arrives with each call; nobody waits until then.
        view.tenants.clear();
        view.tenants.extend(d.tenants.into_iter().map(|t| Tenant {
            home: t.home,
            layers: t.layers,
            slack_ns: i64::MAX,
            tpot_target_ns: t.tpot_target_ns,
        }));
        self.policy.configure(&self.view)
    }

    pub fn place(&mut self, view: wit::View, ready: Vec<wit::ReadyOp>) -> Result<Vec<wit::Placement>, String> {
        // The host sends no instances with `place`: the policy sees the last ones.
        self.load(view, false);
        self.ready.clear();
        self.ready.extend(ready.into_iter().map(ready_op));
        self.out.clear();
        self.policy.place_with_what_if(&self.view, &self.ready, &mut self.what_if, &mut self.out)?;
        Ok(self.out.iter().map(|p| wit::Placement { op: p.op, group: p.group, priority: p.priority }).collect())
    }

    pub fn admit(&mut self, view: wit::View, inst: wit::Instance) -> Result<bool, String> {
        self.load(view, true);
        self.policy.admit(&self.view, &instance(inst))
    }

    pub fn route(&mut self, view: wit::View, instances: Vec<wit::Instance>) -> Result<u32, String> {
        self.load(view, true);
        self.instances.clear();
        self.instances.extend(instances.into_iter().map(instance));
        self.policy.route(&self.view, &self.instances)
    }

    fn load(&mut self, v: wit::View, instances: bool) {
        let view = &mut self.view;
        view.now_ns = v.now_ns;
        view.gpus.clear();
        view.gpus.extend(v.gpu_figures.chunks_exact(3).map(|g| Gpu {
            busy_until_ns: g[0],
            queued_ns: g[1],
            owner_need_ns: g[2],
        }));
        for (t, &slack) in view.tenants.iter_mut().zip(&v.slack_ns) {
            t.slack_ns = slack;
        }
        if instances {
            view.instances.clear();
            view.instances.extend(v.instances.into_iter().map(instance));
        }
    }
}

fn instance(i: wit::Instance) -> Instance {
    Instance {
        index: i.index,
        tenant: i.tenant,
        group: i.group,
        is_home: i.is_home,
        waiting: i.waiting,
        running: i.running,
        inflight: i.inflight,
        kv_free_blocks: i.kv_free_blocks,
        kv_total_blocks: i.kv_total_blocks,
        prefill_tokens: i.prefill_tokens,
        batch_tokens: i.batch_tokens,
    }
}

fn ready_op(r: wit::ReadyOp) -> ReadyOp {
    use wit::OpKind as W;
    let kind = match r.kind {
        W::Embedding => OpKind::Embedding,
        W::InputNorm => OpKind::InputNorm,
        W::QkvProj => OpKind::QkvProj,
        W::Rope => OpKind::Rope,
        W::Attention => OpKind::Attention,
        W::OProj => OpKind::OProj,
        W::AllReduce => OpKind::AllReduce,
        W::ResidualAdd => OpKind::ResidualAdd,
        W::PostAttnNorm => OpKind::PostAttnNorm,
        W::GateUpProj => OpKind::GateUpProj,
        W::Activation => OpKind::Activation,
        W::DownProj => OpKind::DownProj,
        W::FinalNorm => OpKind::FinalNorm,
        W::LmHead => OpKind::LmHead,
        W::AllGather => OpKind::AllGather,
        W::Transfer => OpKind::Transfer,
    };
    ReadyOp {
        tenant: r.tenant,
        kind,
        layer: r.layer,
        predicted_ns: r.predicted_ns,
        home: r.home,
        ready_ns: r.ready_ns,
        input_group: r.input_group,
        input_bytes: r.input_bytes,
        out_bytes: r.out_bytes,
        instance: r.instance,
        prefill_tokens: r.prefill_tokens,
        decodes: r.decodes,
    }
}

/// The host's `what-if` import, behind the SDK's [`WhatIf`] (the probe list is reused).
struct HostWhatIf(Vec<host::Probe>);

impl WhatIf for HostWhatIf {
    fn ask(&mut self, probes: &[Probe], answer: &mut WhatIfAnswer) {
        self.0.clear();
        self.0.extend(probes.iter().map(|p| host::Probe { op: p.op, group: p.group, priority: p.priority }));
        let a = host::what_if(&self.0);
        answer.outcomes.clear();
        answer.outcomes.extend(a.outcomes.iter().map(|o| Outcome {
            verdict: verdict(o.verdict),
            start_ns: o.start_ns,
            finish_ns: o.finish_ns,
            transfer_ns: o.transfer_ns,
            transfer_bytes: o.transfer_bytes,
            peak_bytes: o.peak_bytes,
        }));
        answer.delays.clear();
        answer.delays.extend(a.delays.iter().map(|d| Delay { probe: d.probe, tenant: d.tenant, delay_ns: d.delay_ns }));
    }
}

fn verdict(v: host::Verdict) -> Verdict {
    use host::Verdict as W;
    match v {
        W::Accepted => Verdict::Accepted,
        W::NotOffered => Verdict::NotOffered,
        W::NoSuchGroup => Verdict::NoSuchGroup,
        W::AttentionAway => Verdict::AttentionAway,
        W::WeightsMissing => Verdict::WeightsMissing,
        W::GuestMemory => Verdict::GuestMemory,
        W::OwnerGuard => Verdict::OwnerGuard,
        W::MemoryOverCapacity => Verdict::MemoryOverCapacity,
        W::DelaysOwner => Verdict::DelaysOwner,
        W::TimelineRefused => Verdict::TimelineRefused,
        W::OverBudget => Verdict::OverBudget,
    }
}
