//! The sandbox: one Engine, compiled components cached by content hash, and a Store
//! per loaded plugin with fuel per call and a memory cap. The linker holds only the
//! `host` interface of the plugin's version (`log`, and from 0.2.0 `what-if`): no
//! WASI, no clock, no randomness, no file system.

use crate::bindings::{v1, v2, v3};
use crate::error::Cause;
use crate::wire::Bound;
use sha2::{Digest, Sha256};
use slicesched_plugin_sdk as sdk;
use slicesched_policy::convert::{answer_probes, ProbeBuffers};
use slicesched_policy::{ReadyOp, WhatIf, WhatIfHandle};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, ResourceLimiter, Store, Trap};

/// Interface versions this host loads (one `wit/since_vX.Y.Z` folder each).
pub const SUPPORTED: &[&str] = &["0.1.0", "0.2.0", "0.3.0"];
/// The export a policy component must have, before its `@version`.
pub const POLICY_EXPORT: &str = "slicesched:policy/policy";
const HOST_IMPORT: &str = "slicesched:policy/host";
/// Log lines kept per plugin: a chatty plugin cannot grow the host's memory.
const LOG_LINES: usize = 64;
/// Probes one `place` call may ask the core's what-if about, in all: bounds the host's
/// work for a plugin as fuel bounds the plugin's own (a 64-op batch against 64 groups).
pub const PROBES_PER_CALL: u32 = 4096;

/// The one Engine every plugin shares (fuel on: interruption is deterministic).
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut c = Config::new();
        c.consume_fuel(true);
        Engine::new(&c).expect("a fuel-metered engine is a valid configuration")
    })
}

/// A component pre-instantiated against the linker of its interface version.
#[derive(Clone)]
pub enum Pre {
    V1(v1::PluginPre<HostState>),
    V2(v2::PluginPre<HostState>),
    V3(v3::PluginPre<HostState>),
}

/// A compiled policy component, pre-instantiated against the host's linker.
#[derive(Clone)]
pub struct Compiled {
    pub pre: Pre,
    pub sha256: [u8; 32],
    pub interface_version: String,
}

/// Compiles `bytes` once per content: later loads of the same bytes reuse the result.
pub fn compile(bytes: &[u8]) -> Result<Compiled, Cause> {
    static CACHE: OnceLock<Mutex<HashMap<[u8; 32], Compiled>>> = OnceLock::new();
    let sha256: [u8; 32] = Sha256::digest(bytes).into();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&sha256) {
        return Ok(c.clone());
    }
    let engine = engine();
    let component = Component::new(engine, bytes).map_err(|e| Cause::Compile(format!("{e:#}")))?;
    let interface_version = check_shape(engine, &component)?;
    let not_a_policy = |e: wasmtime::Error| Cause::NotAPolicy(format!("{e:#}"));
    let mut linker: Linker<HostState> = Linker::new(engine);
    let pre = if interface_version == "0.1.0" {
        v1::Plugin::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s).map_err(not_a_policy)?;
        let pre = linker.instantiate_pre(&component).map_err(not_a_policy)?;
        Pre::V1(v1::PluginPre::new(pre).map_err(not_a_policy)?)
    } else if interface_version == "0.2.0" {
        v2::Plugin::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s).map_err(not_a_policy)?;
        let pre = linker.instantiate_pre(&component).map_err(not_a_policy)?;
        Pre::V2(v2::PluginPre::new(pre).map_err(not_a_policy)?)
    } else {
        v3::Plugin::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s).map_err(not_a_policy)?;
        let pre = linker.instantiate_pre(&component).map_err(not_a_policy)?;
        Pre::V3(v3::PluginPre::new(pre).map_err(not_a_policy)?)
    };
    let compiled = Compiled { pre, sha256, interface_version };
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(sha256, compiled.clone());
    Ok(compiled)
}

/// The interface version a component exports, refusing one that imports anything
/// beyond the host interface or exports no policy of a supported version.
fn check_shape(engine: &Engine, component: &Component) -> Result<String, Cause> {
    let ty = component.component_type();
    let found: Vec<&str> = ty.exports(engine).map(|(n, _)| n).collect();
    let Some(version) = found.iter().find_map(|n| n.strip_prefix(POLICY_EXPORT).and_then(|v| v.strip_prefix('@')))
    else {
        return Err(Cause::NotAPolicy(format!("it exports no `{POLICY_EXPORT}` interface (exports: {found:?})")));
    };
    if !SUPPORTED.contains(&version) {
        return Err(Cause::UnsupportedVersion { found: version.into(), supported: SUPPORTED.join(", ") });
    }
    // The host interface of the same version, and nothing else.
    for (name, _) in ty.imports(engine) {
        if name.strip_prefix(HOST_IMPORT).and_then(|v| v.strip_prefix('@')) != Some(version) {
            return Err(Cause::NotAPolicy(format!("it imports `{name}`, which the sandbox does not provide")));
        }
    }
    Ok(version.to_string())
}

/// What a plugin's Store holds: its log, its memory limiter, and during a `place` call
/// the core's what-if lent for it.
pub struct HostState {
    /// (is an error, line).
    pub log: Vec<(bool, String)>,
    pub limits: MemoryCap,
    lent: Option<Lent>,
    probes_left: u32,
    /// Probes asked and refused over budget since the last `take_probe_counts`.
    probes_asked: u64,
    probes_over: u64,
    probe_bufs: ProbeBuffers,
    probes: Vec<sdk::Probe>,
    answer: sdk::WhatIfAnswer,
}

/// The core's what-if and the batch being decided, for the length of one `place` call.
///
/// A Store's data must be `'static`, the core lends them for one call: the references
/// are kept as pointers, set by [`HostState::lend`] right before the call and cleared
/// right after it and at the start of every other call ([`Sandbox::arm`]), so the
/// import dereferences them only while the caller's borrows are alive. The call runs
/// synchronously on the caller's thread.
struct Lent {
    what_if: *const (dyn WhatIf + 'static),
    ready: *const [ReadyOp],
}

// SAFETY: a `Lent` exists only during a synchronous call on the thread that lent it
// (see above); moving the Store to another thread between calls carries `None`.
unsafe impl Send for Lent {}

impl HostState {
    fn push_log(&mut self, error: bool, message: String) {
        if self.log.len() == LOG_LINES {
            self.log.remove(0);
        }
        // Bounded too: one line cannot be a memory bomb for the host (cut on a character
        // boundary: `String::truncate` inside a multi-byte character would panic).
        self.log.push((error, crate::error::bounded(message, 1024)));
    }

    /// Lends the core's what-if about `ready` for the `place` call about to be made.
    pub fn lend(&mut self, what_if: WhatIfHandle<'_>, ready: &[ReadyOp]) {
        self.lent = what_if.0.map(|w| {
            let w: *const (dyn WhatIf + '_) = w;
            // SAFETY: only the lifetime is erased; `Lent` says why it is not outlived.
            let w: *const (dyn WhatIf + 'static) = unsafe { std::mem::transmute(w) };
            Lent { what_if: w, ready: ready as *const [ReadyOp] }
        });
    }

    pub fn unlend(&mut self) {
        self.lent = None;
    }

    /// (asked, refused over budget) since the last time, and resets both.
    pub fn take_probe_counts(&mut self) -> (u64, u64) {
        (std::mem::take(&mut self.probes_asked), std::mem::take(&mut self.probes_over))
    }

    /// The `what-if` import in the SDK's terms: at most the call's remaining budget is
    /// asked, the rest comes back `OverBudget`.
    fn what_if(&mut self, probes: impl ExactSizeIterator<Item = sdk::Probe>) -> &sdk::WhatIfAnswer {
        let n = probes.len();
        let asked = n.min(self.probes_left as usize);
        self.probes_left -= asked as u32;
        self.probes_asked += asked as u64;
        self.probes_over += (n - asked) as u64;
        self.probes.clear();
        self.probes.extend(probes.take(asked));
        match &self.lent {
            // SAFETY: see `Lent`: set only for the duration of the `place` call now running.
            Some(l) => unsafe {
                answer_probes(
                    WhatIfHandle(Some(&*l.what_if)),
                    &*l.ready,
                    &self.probes,
                    &mut self.probe_bufs,
                    &mut self.answer,
                )
            },
            None => sdk::WhatIf::ask(&mut sdk::NoWhatIf, &self.probes, &mut self.answer),
        }
        let over = sdk::Outcome {
            verdict: sdk::Verdict::OverBudget,
            start_ns: 0,
            finish_ns: 0,
            transfer_ns: 0,
            transfer_bytes: 0,
            peak_bytes: 0,
        };
        self.answer.outcomes.resize(n, over);
        &self.answer
    }
}

impl v1::slicesched::policy::host::Host for HostState {
    fn log(&mut self, level: v1::slicesched::policy::host::Level, message: String) {
        self.push_log(level == v1::slicesched::policy::host::Level::Error, message);
    }
}

impl v2::slicesched::policy::host::Host for HostState {
    fn log(&mut self, level: v2::slicesched::policy::host::Level, message: String) {
        self.push_log(level == v2::slicesched::policy::host::Level::Error, message);
    }

    fn what_if(
        &mut self,
        probes: Vec<v2::slicesched::policy::host::Probe>,
    ) -> v2::slicesched::policy::host::WhatIfAnswer {
        let probes = probes.iter().map(|p| sdk::Probe { op: p.op, group: p.group, priority: p.priority });
        crate::wire::v2::what_if_answer(self.what_if(probes))
    }
}

impl v3::slicesched::policy::host::Host for HostState {
    fn log(&mut self, level: v3::slicesched::policy::host::Level, message: String) {
        self.push_log(level == v3::slicesched::policy::host::Level::Error, message);
    }

    fn what_if(
        &mut self,
        probes: Vec<v3::slicesched::policy::host::Probe>,
    ) -> v3::slicesched::policy::host::WhatIfAnswer {
        let probes = probes.iter().map(|p| sdk::Probe { op: p.op, group: p.group, priority: p.priority });
        crate::wire::v3::what_if_answer(self.what_if(probes))
    }
}

/// Caps a plugin's linear memory, and remembers that it tried to pass the cap (such a
/// failure is not a `Trap`, so the flag is how the host tells it apart).
pub struct MemoryCap {
    pub cap_bytes: usize,
    pub hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.cap_bytes {
            self.hit = true;
            return Err(wasmtime::format_err!("memory cap of {} bytes", self.cap_bytes));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// A live instance of a plugin: its Store and bindings.
pub struct Sandbox {
    pub store: Store<HostState>,
    pub plugin: Bound,
    fuel: u64,
}

impl Sandbox {
    /// A fresh Store and instance (a new Store starts with no fuel: set it first).
    pub fn new(c: &Compiled, fuel: u64, cap_bytes: usize) -> Result<Self, Cause> {
        let state = HostState {
            log: Vec::new(),
            limits: MemoryCap { cap_bytes, hit: false },
            lent: None,
            probes_left: PROBES_PER_CALL,
            probes_asked: 0,
            probes_over: 0,
            probe_bufs: ProbeBuffers::default(),
            probes: Vec::new(),
            answer: sdk::WhatIfAnswer::default(),
        };
        let mut store = Store::new(engine(), state);
        store.limiter(|s| &mut s.limits);
        store.set_fuel(fuel).expect("fuel is enabled on the engine");
        let plugin = match &c.pre {
            Pre::V1(pre) => pre.instantiate(&mut store).map(|p| Bound::V1(p, Default::default())),
            Pre::V2(pre) => pre.instantiate(&mut store).map(|p| Bound::V2(p, Default::default())),
            Pre::V3(pre) => pre.instantiate(&mut store).map(|p| Bound::V3(p, Default::default())),
        };
        let plugin = plugin.map_err(|e| classify("instantiate", e, &mut store, fuel))?;
        Ok(Self { store, plugin, fuel })
    }

    /// Refills the fuel and the probe budget for one call, clears the memory flag and
    /// anything still lent.
    pub fn arm(&mut self) {
        self.store.set_fuel(self.fuel).expect("fuel is enabled on the engine");
        let state = self.store.data_mut();
        state.limits.hit = false;
        state.probes_left = PROBES_PER_CALL;
        state.lent = None;
    }

    /// Fuel the last call used.
    pub fn fuel_used(&self) -> u64 {
        self.fuel - self.store.get_fuel().unwrap_or(0)
    }

    /// Turns a failed call into its cause.
    pub fn classify(&mut self, hook: &'static str, e: wasmtime::Error) -> Cause {
        classify(hook, e, &mut self.store, self.fuel)
    }
}

fn classify(hook: &'static str, e: wasmtime::Error, store: &mut Store<HostState>, fuel: u64) -> Cause {
    let state = store.data();
    if state.limits.hit {
        return Cause::MemoryCap { hook, cap_bytes: state.limits.cap_bytes };
    }
    if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
        return Cause::FuelExhausted { hook, fuel };
    }
    let log = state.log.iter().rev().find(|(error, _)| *error).map(|(_, m)| m.clone());
    Cause::Trap { hook, trap: format!("{e:#}"), log }
}

/// Hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
