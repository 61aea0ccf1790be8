//! Shipped policies run natively: the plugin crates' own source, called through the
//! SDK's types, so the native and the Wasm build of a policy are one program.

use crate::convert::{answer_probes, fill_view, instance, ready_op, replica_mode, ProbeBuffers};
use crate::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View, WhatIfHandle};
use slicesched_gmg::GroupId;
use slicesched_plugin_sdk as sdk;

/// A plugin crate's policy behind the core's [`Policy`] trait.
pub struct Native<P> {
    policy: P,
    info: sdk::Info,
    // Buffers refilled per call: a decision allocates nothing once they have grown.
    view: sdk::View,
    ready: Vec<sdk::ReadyOp>,
    out: Vec<sdk::Placement>,
    instances: Vec<sdk::Instance>,
    /// Epoch of the run-constant part held in `view`.
    epoch: u64,
    probes: ProbeBuffers,
}

impl<P: sdk::Policy> Native<P> {
    pub fn new(policy: P) -> Self {
        let info = policy.info();
        Self {
            policy,
            info,
            view: sdk::View::default(),
            ready: Vec::new(),
            out: Vec::new(),
            instances: Vec::new(),
            epoch: 0,
            probes: ProbeBuffers::default(),
        }
    }
}

impl<P: sdk::Policy> Native<P> {
    /// Refills the view, configuring the policy when the deployment is new to it.
    /// False: `configure` refused, so this call takes the safe answer (as the Wasm
    /// host does) and the next one configures again.
    fn load(&mut self, view: &View<'_>, instances: bool) -> bool {
        if fill_view(view, &mut self.view, &mut self.epoch, instances) && self.policy.configure(&self.view).is_err() {
            self.epoch = 0;
            return false;
        }
        true
    }
}

impl<P: sdk::Policy + Send> Policy for Native<P> {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        if !self.load(view, false) {
            return;
        }
        self.ready.clear();
        self.ready.extend(ready.iter().map(ready_op));
        self.out.clear();
        // A native policy is trusted code; an error or an op index out of range still
        // only leaves ops to the core, which runs them home and counts why.
        let mut what_if = CoreWhatIf { handle: view.what_if, ready, bufs: &mut self.probes };
        if self.policy.place_with_what_if(&self.view, &self.ready, &mut what_if, &mut self.out).is_ok() {
            out.extend(self.out.iter().filter_map(|p| {
                let r = ready.get(p.op as usize)?;
                Some(Placement { op: r.op, group: GroupId(p.group), priority: p.priority })
            }));
        }
    }

    fn reads_view(&self) -> bool {
        self.info.reads_view
    }

    fn context_switch_ns(&self) -> u64 {
        self.info.context_switch_ns
    }

    fn spatial_sharing(&self) -> bool {
        self.info.spatial_sharing
    }

    fn replicas(&self) -> ReplicaMode {
        replica_mode(self.info.replicas)
    }

    fn home_only(&self) -> bool {
        self.policy.home_only()
    }

    fn home_when_free(&self) -> bool {
        self.policy.home_when_free()
    }

    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        if !self.load(view, true) {
            return inst.inflight == 0;
        }
        self.policy.admit(&self.view, &instance(inst)).unwrap_or(inst.inflight == 0)
    }

    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        if !self.load(view, true) {
            return 0;
        }
        self.instances.clear();
        self.instances.extend(instances.iter().map(instance));
        self.policy.route(&self.view, &self.instances).map_or(0, |k| k as usize)
    }
}

/// The core's what-if in the SDK's terms, for the batch being placed.
struct CoreWhatIf<'a> {
    handle: WhatIfHandle<'a>,
    ready: &'a [ReadyOp],
    bufs: &'a mut ProbeBuffers,
}

impl sdk::WhatIf for CoreWhatIf<'_> {
    fn ask(&mut self, probes: &[sdk::Probe], answer: &mut sdk::WhatIfAnswer) {
        answer_probes(self.handle, self.ready, probes, self.bufs, answer);
    }
}
