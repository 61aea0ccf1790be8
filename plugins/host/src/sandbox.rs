//! The sandbox: one Engine, compiled components cached by content hash, and a Store
//! per loaded plugin with fuel per call and a memory cap. The linker holds only the
//! `host` interface: no WASI, no clock, no randomness, no file system.

use crate::bindings::slicesched::policy::host::{Host, Level};
use crate::bindings::{Plugin, PluginPre};
use crate::error::Cause;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, ResourceLimiter, Store, Trap};

/// Interface versions this host loads (one `wit/since_vX.Y.Z` folder each).
pub const SUPPORTED: &[&str] = &["0.1.0"];
/// The export a policy component must have, before its `@version`.
pub const POLICY_EXPORT: &str = "slicesched:policy/policy";
const HOST_IMPORT: &str = "slicesched:policy/host";
/// Log lines kept per plugin: a chatty plugin cannot grow the host's memory.
const LOG_LINES: usize = 64;

/// The one Engine every plugin shares (fuel on: interruption is deterministic).
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut c = Config::new();
        c.consume_fuel(true);
        Engine::new(&c).expect("a fuel-metered engine is a valid configuration")
    })
}

/// A compiled policy component, pre-instantiated against the host's linker.
#[derive(Clone)]
pub struct Compiled {
    pub pre: PluginPre<HostState>,
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
    let mut linker: Linker<HostState> = Linker::new(engine);
    Plugin::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s)
        .map_err(|e| Cause::NotAPolicy(format!("{e:#}")))?;
    let pre = linker.instantiate_pre(&component).map_err(|e| Cause::NotAPolicy(format!("{e:#}")))?;
    let pre = PluginPre::new(pre).map_err(|e| Cause::NotAPolicy(format!("{e:#}")))?;
    let compiled = Compiled { pre, sha256, interface_version };
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(sha256, compiled.clone());
    Ok(compiled)
}

/// The interface version a component exports, refusing one that imports anything
/// beyond the host interface or exports no policy of a supported version.
fn check_shape(engine: &Engine, component: &Component) -> Result<String, Cause> {
    let ty = component.component_type();
    for (name, _) in ty.imports(engine) {
        let known =
            name.strip_prefix(HOST_IMPORT).and_then(|v| v.strip_prefix('@')).is_some_and(|v| SUPPORTED.contains(&v));
        if !known {
            return Err(Cause::NotAPolicy(format!("it imports `{name}`, which the sandbox does not provide")));
        }
    }
    let found: Vec<&str> = ty.exports(engine).map(|(n, _)| n).collect();
    let Some(version) = found.iter().find_map(|n| n.strip_prefix(POLICY_EXPORT).and_then(|v| v.strip_prefix('@')))
    else {
        return Err(Cause::NotAPolicy(format!("it exports no `{POLICY_EXPORT}` interface (exports: {found:?})")));
    };
    if !SUPPORTED.contains(&version) {
        return Err(Cause::UnsupportedVersion { found: version.into(), supported: SUPPORTED.join(", ") });
    }
    Ok(version.to_string())
}

/// What a plugin's Store holds: its log and its memory limiter.
pub struct HostState {
    pub log: Vec<(Level, String)>,
    pub limits: MemoryCap,
}

impl Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        if self.log.len() == LOG_LINES {
            self.log.remove(0);
        }
        // Bounded too: one line cannot be a memory bomb for the host.
        let mut message = message;
        message.truncate(1024);
        self.log.push((level, message));
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
    pub plugin: Plugin,
    fuel: u64,
}

impl Sandbox {
    /// A fresh Store and instance (a new Store starts with no fuel: set it first).
    pub fn new(c: &Compiled, fuel: u64, cap_bytes: usize) -> Result<Self, Cause> {
        let state = HostState { log: Vec::new(), limits: MemoryCap { cap_bytes, hit: false } };
        let mut store = Store::new(c.pre.engine(), state);
        store.limiter(|s| &mut s.limits);
        store.set_fuel(fuel).expect("fuel is enabled on the engine");
        let plugin = c.pre.instantiate(&mut store).map_err(|e| classify("instantiate", e, &mut store, fuel))?;
        Ok(Self { store, plugin, fuel })
    }

    /// Refills the fuel for one call and clears the memory flag.
    pub fn arm(&mut self) {
        self.store.set_fuel(self.fuel).expect("fuel is enabled on the engine");
        self.store.data_mut().limits.hit = false;
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
    let log = state.log.iter().rev().find(|(l, _)| *l == Level::Error).map(|(_, m)| m.clone());
    Cause::Trap { hook, trap: format!("{e:#}"), log }
}

/// Hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
