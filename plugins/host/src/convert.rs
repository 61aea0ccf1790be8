//! The SDK's view in the WIT bindings' types, refilled in place per call.

use crate::bindings::wit;
use slicesched_plugin_sdk as sdk;

/// Refills `out` with what changes between decisions, straight from the core's view
/// (vectors keep their capacity). `instances`: send the engine instances too (`admit`,
/// `route`); for `place` the list goes empty, lowering it per op decision was a fifth
/// of a replay's time (RATIONALE.md).
pub fn fill(v: &slicesched_policy::View<'_>, out: &mut wit::View, instances: bool) {
    out.now_ns = v.now_ns;
    out.gpus.clear();
    out.gpus.extend(
        v.gpu_busy_until.iter().zip(v.gpu_queued_ns).zip(v.gpu_owner_need_ns).map(|((&b, &q), &o)| wit::Gpu {
            busy_until_ns: b,
            queued_ns: q,
            owner_need_ns: o,
        }),
    );
    out.tenants.clear();
    out.tenants.extend(v.tenants.iter().map(|t| wit::Tenant {
        home: t.home.0,
        layers: t.layers,
        slack_ns: t.slack_ns,
        tpot_target_ns: t.tpot_target_ns,
    }));
    out.instances.clear();
    if instances {
        out.instances.extend(v.instances.iter().map(|i| instance(&slicesched_policy::convert::instance(i))));
    }
}

/// The run-constant part of `v`, for `configure`.
pub fn deployment(v: &sdk::View) -> wit::Deployment {
    wit::Deployment {
        homes: v
            .homes
            .iter()
            .map(|h| wit::Home {
                tenant: h.tenant,
                group: h.group,
                first_layer: h.first_layer,
                end_layer: h.end_layer,
                is_home: h.is_home,
                serves: h.serves,
            })
            .collect(),
        groups: v.groups.clone(),
        links: v
            .links
            .iter()
            .map(|l| wit::Link { same_device: l.same_device, latency_ns: l.latency_ns, bandwidth: l.bandwidth })
            .collect(),
    }
}

pub fn empty_view() -> wit::View {
    wit::View { now_ns: 0, gpus: Vec::new(), tenants: Vec::new(), instances: Vec::new() }
}

pub fn instance(i: &sdk::Instance) -> wit::Instance {
    wit::Instance {
        index: i.index,
        tenant: i.tenant,
        group: i.group,
        is_home: i.is_home,
        waiting: i.waiting,
        running: i.running,
        inflight: i.inflight,
        kv_free_blocks: i.kv_free_blocks,
        kv_total_blocks: i.kv_total_blocks,
    }
}

pub fn ready_op(r: &sdk::ReadyOp) -> wit::ReadyOp {
    use sdk::OpKind as K;
    use wit::OpKind as W;
    let kind = match r.kind {
        K::Embedding => W::Embedding,
        K::InputNorm => W::InputNorm,
        K::QkvProj => W::QkvProj,
        K::Rope => W::Rope,
        K::Attention => W::Attention,
        K::OProj => W::OProj,
        K::AllReduce => W::AllReduce,
        K::ResidualAdd => W::ResidualAdd,
        K::PostAttnNorm => W::PostAttnNorm,
        K::GateUpProj => W::GateUpProj,
        K::Activation => W::Activation,
        K::DownProj => W::DownProj,
        K::FinalNorm => W::FinalNorm,
        K::LmHead => W::LmHead,
        K::AllGather => W::AllGather,
        K::Transfer => W::Transfer,
    };
    wit::ReadyOp {
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

pub fn info(i: wit::Info) -> sdk::Info {
    let replicas = match i.replicas {
        wit::ReplicaMode::None => sdk::ReplicaMode::None,
        wit::ReplicaMode::Weights => sdk::ReplicaMode::Weights,
        wit::ReplicaMode::Serving => sdk::ReplicaMode::Serving,
        wit::ReplicaMode::Both => sdk::ReplicaMode::Both,
    };
    sdk::Info {
        name: i.name,
        version: i.version,
        replicas,
        context_switch_ns: i.context_switch_ns,
        spatial_sharing: i.spatial_sharing,
        reads_view: i.reads_view,
    }
}
