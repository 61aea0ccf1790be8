//! `WasmPolicy`: a plugin behind the core's `Policy` trait, with every answer checked
//! and every failure turned into the safe built-in's decision.

use crate::error::{Cause, PluginError};
use crate::sandbox::{compile, Compiled, Sandbox};
use crate::PluginOptions;
use slicesched_gmg::GroupId;
use slicesched_model::OpKind;
use slicesched_plugin_sdk as sdk;
use slicesched_policy::convert::{fill_static, replica_mode};
use slicesched_policy::{InstanceView, Placement, Policy, ReadyOp, ReplicaMode, View};

/// Failures kept for inspection (the count goes on past it).
const KEPT_ERRORS: usize = 32;

/// What a plugin has done so far.
#[derive(Debug, Clone, Default)]
pub struct PluginStats {
    /// Hook calls made into the plugin.
    pub calls: u64,
    /// Failed calls (each decided by the fallback instead).
    pub failures: u32,
    /// Decisions taken by the fallback: failed calls, and every call once quarantined.
    pub fallback_decisions: u64,
    /// Instances created after a trap.
    pub reinstantiations: u32,
    pub quarantined: bool,
    /// The first failures, in order.
    pub errors: Vec<PluginError>,
    /// Fuel the most expensive call used.
    pub max_fuel: u64,
    /// Fuel all successful calls used (Wasm instructions, roughly).
    pub fuel_used: u64,
    /// Probes the plugin asked the core's what-if about (interface 0.2.0), and those
    /// refused unanswered because a call's budget was spent.
    pub probes: u64,
    pub probes_over_budget: u64,
}

/// A policy plugin loaded in the sandbox.
pub struct WasmPolicy {
    compiled: Compiled,
    opts: PluginOptions,
    sandbox: Option<Sandbox>,
    info: sdk::Info,
    stats: PluginStats,
    // Buffers refilled per call (`sdk_view` holds only the run-constant part, for
    // `configure`; each version's wire buffers live with the instance).
    sdk_view: sdk::View,
    answer: Vec<sdk::Placement>,
    seen: Vec<bool>,
    /// Epoch of the deployment the live instance was configured with (None: not yet).
    configured: Option<u64>,
}

impl WasmPolicy {
    /// Compiles (or reuses) the component, instantiates it and asks it to describe itself.
    pub fn new(bytes: &[u8], opts: &PluginOptions) -> Result<Self, PluginError> {
        let anon = |cause| PluginError::new(&crate::short_hash(bytes), "?", cause);
        let compiled = compile(bytes).map_err(anon)?;
        let mut sandbox = Sandbox::new(&compiled, opts.fuel_per_call, opts.memory_cap_bytes).map_err(anon)?;
        sandbox.arm();
        let info = match sandbox.plugin.describe(&mut sandbox.store) {
            Ok(i) => i,
            Err(e) => return Err(anon(sandbox.classify("describe", e))),
        };
        if info.name.is_empty() || info.name.len() > 64 || info.name.chars().any(char::is_control) {
            return Err(anon(Cause::Malformed { hook: "describe", detail: format!("unusable name {:?}", info.name) }));
        }
        Ok(Self {
            compiled,
            opts: opts.clone(),
            sandbox: Some(sandbox),
            info,
            stats: PluginStats::default(),
            sdk_view: sdk::View::default(),
            answer: Vec::new(),
            seen: Vec::new(),
            configured: None,
        })
    }

    pub fn info(&self) -> &sdk::Info {
        &self.info
    }

    /// SHA-256 of the component's bytes, lowercase hex.
    pub fn sha256_hex(&self) -> String {
        crate::sandbox::hex(&self.compiled.sha256)
    }

    pub fn interface_version(&self) -> &str {
        &self.compiled.interface_version
    }

    pub fn stats(&self) -> &PluginStats {
        &self.stats
    }

    /// Counts a failure, re-instantiates after a trap, quarantines after enough.
    fn fail(&mut self, cause: Cause) {
        let trapped = matches!(cause, Cause::Trap { .. } | Cause::FuelExhausted { .. } | Cause::MemoryCap { .. });
        self.stats.failures += 1;
        self.stats.fallback_decisions += 1;
        if self.stats.errors.len() < KEPT_ERRORS {
            self.stats.errors.push(PluginError::new(&self.info.name, &self.info.version, cause));
        }
        if self.stats.failures >= self.opts.quarantine_after {
            self.quarantine();
            return;
        }
        if trapped {
            // A trapped instance refuses further calls: start a fresh one (which
            // needs the deployment again).
            self.sandbox = None;
            self.configured = None;
            match Sandbox::new(&self.compiled, self.opts.fuel_per_call, self.opts.memory_cap_bytes) {
                Ok(s) => {
                    self.sandbox = Some(s);
                    self.stats.reinstantiations += 1;
                }
                Err(cause) => {
                    self.stats.errors.push(PluginError::new(&self.info.name, &self.info.version, cause));
                    self.quarantine();
                }
            }
        }
    }

    fn quarantine(&mut self) {
        if !self.stats.quarantined {
            self.stats.quarantined = true;
            let failures = self.stats.failures;
            self.stats.errors.push(PluginError::new(
                &self.info.name,
                &self.info.version,
                Cause::Quarantined { failures },
            ));
        }
        self.sandbox = None;
    }

    fn note_fuel(&mut self) {
        if let Some(s) = &self.sandbox {
            let used = s.fuel_used();
            self.stats.max_fuel = self.stats.max_fuel.max(used);
            self.stats.fuel_used += used;
        }
    }

    /// Configures the instance when the deployment is new to it. Err: the plugin
    /// failed (and is counted as such).
    fn configure(&mut self, view: &View<'_>) -> Result<(), ()> {
        if view.epoch != 0 && self.configured == Some(view.epoch) {
            return Ok(());
        }
        fill_static(view, &mut self.sdk_view);
        let Some(s) = armed(&mut self.sandbox, &mut self.stats) else { return Err(()) };
        match s.plugin.configure(&mut s.store, view, &self.sdk_view) {
            Ok(Ok(())) => {
                self.configured = Some(view.epoch);
                Ok(())
            }
            Ok(Err(message)) => {
                self.fail(Cause::Refused { hook: "configure", message });
                Err(())
            }
            Err(e) => {
                let cause = self.sandbox.as_mut().expect("called").classify("configure", e);
                self.fail(cause);
                Err(())
            }
        }
    }

    /// Checks an answer against the batch and the deployment.
    fn validate(&mut self, view: &View<'_>, ready: &[ReadyOp], answer: &[sdk::Placement]) -> Result<(), Cause> {
        let hook = "place";
        if answer.len() > ready.len() {
            let detail = format!("{} placements for {} ops", answer.len(), ready.len());
            return Err(Cause::Malformed { hook, detail });
        }
        self.seen.clear();
        self.seen.resize(ready.len(), false);
        let dep = view.deployment;
        for p in answer {
            let Some(r) = ready.get(p.op as usize) else {
                let detail = format!("op index {} out of range (batch of {})", p.op, ready.len());
                return Err(Cause::Malformed { hook, detail });
            };
            if std::mem::replace(&mut self.seen[p.op as usize], true) {
                return Err(Cause::Malformed { hook, detail: format!("op {} placed twice", p.op) });
            }
            let invalid = |reason| Cause::InvalidPlacement { op: p.op, tenant: r.tenant.0, group: p.group, reason };
            if p.group as usize >= dep.groups.len() {
                return Err(invalid("no such GPU group"));
            }
            let group = GroupId(p.group);
            if group == r.home {
                continue;
            }
            if r.kind == OpKind::Attention {
                return Err(invalid("attention away from its KV cache"));
            }
            let layers = dep.home(r.tenant).map_or(0, |h| h.layers.1);
            if !dep.holds(r.tenant, group, r.layer, layers) {
                return Err(invalid("weights not resident on the group"));
            }
        }
        Ok(())
    }
}

/// The sandbox to call, armed with fresh fuel; None once quarantined. (A function of
/// the two fields, so the call can borrow the other buffers.)
fn armed<'a>(sandbox: &'a mut Option<Sandbox>, stats: &mut PluginStats) -> Option<&'a mut Sandbox> {
    let s = sandbox.as_mut()?;
    s.arm();
    stats.calls += 1;
    Some(s)
}

/// The safe built-in's decision (`dedicated`): every op on its home group.
fn fallback(ready: &[ReadyOp], out: &mut Vec<Placement>) {
    out.extend(ready.iter().map(|r| Placement { op: r.op, group: r.home, priority: 0 }));
}

impl Policy for WasmPolicy {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn place(&mut self, view: &View<'_>, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        if self.sandbox.is_none() {
            self.stats.fallback_decisions += 1;
            return fallback(ready, out);
        }
        if self.configure(view).is_err() {
            return fallback(ready, out);
        }
        let s = armed(&mut self.sandbox, &mut self.stats).expect("checked above");
        let mut answer = std::mem::take(&mut self.answer);
        answer.clear();
        let result = s.plugin.place(&mut s.store, view, ready, &mut answer);
        let (asked, over) = s.store.data_mut().take_probe_counts();
        self.stats.probes += asked;
        self.stats.probes_over_budget += over;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(message)) => return self.fail_place(Cause::Refused { hook: "place", message }, ready, out),
            Err(e) => {
                let cause = self.sandbox.as_mut().expect("called").classify("place", e);
                return self.fail_place(cause, ready, out);
            }
        };
        self.note_fuel();
        match self.validate(view, ready, &answer) {
            Ok(()) => out.extend(answer.iter().map(|p| Placement {
                op: ready[p.op as usize].op,
                group: GroupId(p.group),
                priority: p.priority,
            })),
            Err(cause) => self.fail_place(cause, ready, out),
        }
        self.answer = answer;
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

    fn admit(&mut self, view: &View<'_>, inst: &InstanceView) -> bool {
        let safe = inst.inflight == 0;
        if self.sandbox.is_none() {
            self.stats.fallback_decisions += 1;
            return safe;
        }
        if self.configure(view).is_err() {
            return safe;
        }
        let s = armed(&mut self.sandbox, &mut self.stats).expect("checked above");
        match s.plugin.admit(&mut s.store, view, inst) {
            Ok(Ok(yes)) => {
                self.note_fuel();
                yes
            }
            Ok(Err(message)) => {
                self.fail(Cause::Refused { hook: "admit", message });
                safe
            }
            Err(e) => {
                let cause = self.sandbox.as_mut().expect("called").classify("admit", e);
                self.fail(cause);
                safe
            }
        }
    }

    fn route(&mut self, view: &View<'_>, instances: &[InstanceView]) -> usize {
        if self.sandbox.is_none() {
            self.stats.fallback_decisions += 1;
            return 0;
        }
        if self.configure(view).is_err() {
            return 0;
        }
        let s = armed(&mut self.sandbox, &mut self.stats).expect("checked above");
        match s.plugin.route(&mut s.store, view, instances) {
            Ok(Ok(k)) if (k as usize) < instances.len() => {
                self.note_fuel();
                k as usize
            }
            Ok(Ok(k)) => {
                let detail = format!("instance {k} out of range ({} instances)", instances.len());
                self.fail(Cause::Malformed { hook: "route", detail });
                0
            }
            Ok(Err(message)) => {
                self.fail(Cause::Refused { hook: "route", message });
                0
            }
            Err(e) => {
                let cause = self.sandbox.as_mut().expect("called").classify("route", e);
                self.fail(cause);
                0
            }
        }
    }
}

impl WasmPolicy {
    fn fail_place(&mut self, cause: Cause, ready: &[ReadyOp], out: &mut Vec<Placement>) {
        self.fail(cause);
        fallback(ready, out);
    }
}
