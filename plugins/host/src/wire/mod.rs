//! Each interface version's side of a call: the view and the batch in that version's
//! WIT types (buffers refilled in place), the call, and the answer in the SDK's terms.
//! What the versions share is written once ([`shared_conversions`]).

pub mod v1;
pub mod v2;
pub mod v3;

use crate::bindings::{v1 as b1, v2 as b2, v3 as b3};
use crate::sandbox::HostState;
use slicesched_plugin_sdk as sdk;
use slicesched_policy::{InstanceView, ReadyOp, View};
use wasmtime::Store;

/// A live plugin instance with the buffers of its interface version.
pub enum Bound {
    V1(b1::Plugin, v1::Wire),
    V2(b2::Plugin, v2::Wire),
    V3(b3::Plugin, v3::Wire),
}

/// A hook's result: Err, the call failed (trap, fuel, memory); Ok(Err), the plugin
/// answered an error.
pub type Answer<T> = wasmtime::Result<Result<T, String>>;

impl Bound {
    pub fn describe(&self, store: &mut Store<HostState>) -> wasmtime::Result<sdk::Info> {
        match self {
            Bound::V1(p, _) => p.slicesched_policy_policy().call_describe(store).map(v1::info),
            Bound::V2(p, _) => p.slicesched_policy_policy().call_describe(store).map(v2::info),
            Bound::V3(p, _) => p.slicesched_policy_policy().call_describe(store).map(v3::info),
        }
    }

    /// Sends the run-constant part: `deployment` holds it in the SDK's terms, `view`
    /// the tenants.
    pub fn configure(&mut self, store: &mut Store<HostState>, view: &View<'_>, deployment: &sdk::View) -> Answer<()> {
        match self {
            Bound::V1(p, _) => p.slicesched_policy_policy().call_configure(store, &v1::deployment(deployment)),
            Bound::V2(p, _) => p.slicesched_policy_policy().call_configure(store, &v2::deployment(view, deployment)),
            Bound::V3(p, _) => p.slicesched_policy_policy().call_configure(store, &v3::deployment(view, deployment)),
        }
    }

    /// Asks for placements of `ready`, lending the core's what-if for the call (0.2.0).
    pub fn place(
        &mut self,
        store: &mut Store<HostState>,
        view: &View<'_>,
        ready: &[ReadyOp],
        out: &mut Vec<sdk::Placement>,
    ) -> Answer<()> {
        match self {
            Bound::V1(p, w) => {
                w.load(view, false, ready);
                let a = p.slicesched_policy_policy().call_place(&mut *store, &w.view, &w.ready);
                a.map(|a| a.map(|list| out.extend(list.iter().map(v1::placement))))
            }
            Bound::V2(p, w) => {
                w.load(view, false, ready);
                store.data_mut().lend(view.what_if, ready);
                let a = p.slicesched_policy_policy().call_place(&mut *store, &w.view, &w.ready);
                store.data_mut().unlend();
                a.map(|a| a.map(|list| out.extend(list.iter().map(v2::placement))))
            }
            Bound::V3(p, w) => {
                w.load(view, false, ready);
                store.data_mut().lend(view.what_if, ready);
                let a = p.slicesched_policy_policy().call_place(&mut *store, &w.view, &w.ready);
                store.data_mut().unlend();
                a.map(|a| a.map(|list| out.extend(list.iter().map(v3::placement))))
            }
        }
    }

    pub fn admit(&mut self, store: &mut Store<HostState>, view: &View<'_>, inst: &InstanceView) -> Answer<bool> {
        let inst = slicesched_policy::convert::instance(inst);
        match self {
            Bound::V1(p, w) => {
                w.load(view, true, &[]);
                p.slicesched_policy_policy().call_admit(store, &w.view, v1::instance(&inst))
            }
            Bound::V2(p, w) => {
                w.load(view, true, &[]);
                p.slicesched_policy_policy().call_admit(store, &w.view, v2::instance(&inst))
            }
            Bound::V3(p, w) => {
                w.load(view, true, &[]);
                p.slicesched_policy_policy().call_admit(store, &w.view, v3::instance(&inst))
            }
        }
    }

    pub fn route(&mut self, store: &mut Store<HostState>, view: &View<'_>, instances: &[InstanceView]) -> Answer<u32> {
        let sdk_inst = instances.iter().map(slicesched_policy::convert::instance);
        match self {
            Bound::V1(p, w) => {
                w.load(view, true, &[]);
                w.instances.clear();
                w.instances.extend(sdk_inst.map(|i| v1::instance(&i)));
                p.slicesched_policy_policy().call_route(store, &w.view, &w.instances)
            }
            Bound::V2(p, w) => {
                w.load(view, true, &[]);
                w.instances.clear();
                w.instances.extend(sdk_inst.map(|i| v2::instance(&i)));
                p.slicesched_policy_policy().call_route(store, &w.view, &w.instances)
            }
            Bound::V3(p, w) => {
                w.load(view, true, &[]);
                w.instances.clear();
                w.instances.extend(sdk_inst.map(|i| v3::instance(&i)));
                p.slicesched_policy_policy().call_route(store, &w.view, &w.instances)
            }
        }
    }
}

/// The conversions whose WIT types are the same in every version, for the version
/// module `wit` names (`instance` gained fields in 0.3.0: each version has its own).
macro_rules! shared_conversions {
    () => {
        pub fn placement(p: &wit::Placement) -> sdk::Placement {
            sdk::Placement { op: p.op, group: p.group, priority: p.priority }
        }

        fn homes(v: &sdk::View) -> Vec<wit::Home> {
            v.homes
                .iter()
                .map(|h| wit::Home {
                    tenant: h.tenant,
                    group: h.group,
                    first_layer: h.first_layer,
                    end_layer: h.end_layer,
                    is_home: h.is_home,
                    serves: h.serves,
                })
                .collect()
        }

        fn links(v: &sdk::View) -> Vec<wit::Link> {
            v.links
                .iter()
                .map(|l| wit::Link { same_device: l.same_device, latency_ns: l.latency_ns, bandwidth: l.bandwidth })
                .collect()
        }

        pub fn ready_op(r: &slicesched_policy::ReadyOp) -> wit::ReadyOp {
            use slicesched_model::OpKind as K;
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
                // The interface's kinds are frozen: new kinds go as their cost class
                // (`OpKind::cost_class`).
                K::Router => W::QkvProj,
                K::ExpertUp => W::GateUpProj,
                K::ExpertDown => W::DownProj,
                K::AllToAll => W::AllGather,
            };
            wit::ReadyOp {
                tenant: r.tenant.0,
                kind,
                layer: r.layer,
                predicted_ns: r.predicted_ns,
                home: r.home.0,
                ready_ns: r.ready_ns,
                input_group: r.input_group.map(|g| g.0),
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
    };
}
pub(crate) use shared_conversions;
