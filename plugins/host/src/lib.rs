//! The plugin host: runs policy plugins — Wasm components of the interface
//! `slicesched:policy` (`plugins/wit/`) — inside a sandbox, behind the core's
//! [`Policy`] trait. The only crate of the workspace that knows wasmtime.
//!
//! - One [`wasmtime::Engine`]; each component compiled once per content (SHA-256) and
//!   pre-instantiated; a Store per loaded plugin.
//! - No WASI: the linker provides only the `host` interface (`log`; from 0.2.0 also
//!   `what-if`, which answers from the core's timeline during `place`). No clock,
//!   randomness or files.
//! - Fuel per call (deterministic: the same replay stops a runaway plugin at the same
//!   instruction), and a cap on linear memory.
//! - Every answer is checked ([`WasmPolicy`]); a trap, fuel exhaustion, the memory cap,
//!   an error answer, a malformed or invalid answer fails that call with a
//!   [`PluginError`] naming plugin, version and cause, and the decision is taken by the
//!   safe built-in (`dedicated`: every op on its home group). A trapped instance is
//!   replaced; after [`PluginOptions::quarantine_after`] failures the plugin is no
//!   longer called.
//!
//! ```no_run
//! let bytes = std::fs::read("target/plugins/slice.wasm").unwrap();
//! let info = slicesched_plugin_host::inspect(&bytes).unwrap();
//! println!("{} {} (interface {})", info.name, info.version, info.interface_version);
//! let policy = slicesched_plugin_host::load(&bytes, &Default::default()).unwrap();
//! ```

mod bindings;
mod error;
mod policy;
mod sandbox;
pub mod toolchain;
mod wire;

pub use error::{Cause, PluginError};
pub use policy::{PluginStats, WasmPolicy};
pub use sandbox::{PROBES_PER_CALL, SUPPORTED};
use slicesched_policy::Policy;

/// Limits a plugin runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginOptions {
    /// Fuel (≈ Wasm instructions) one hook call may use.
    pub fuel_per_call: u64,
    /// Most bytes of linear memory the plugin may have.
    pub memory_cap_bytes: usize,
    /// Failed calls after which the plugin is quarantined (no longer called).
    pub quarantine_after: u32,
}

impl Default for PluginOptions {
    fn default() -> Self {
        // The shipped `slice` uses well under a million units on the largest shipped
        // scenario's batches (plugins/RATIONALE.md): 50 M leaves room and still stops a
        // runaway plugin within tens of milliseconds.
        Self { fuel_per_call: 50_000_000, memory_cap_bytes: 64 << 20, quarantine_after: 3 }
    }
}

/// What `inspect` learns of a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    /// The `slicesched:policy` version it implements.
    pub interface_version: String,
    pub size_bytes: u64,
    /// SHA-256 of the bytes, lowercase hex.
    pub sha256_hex: String,
}

/// Validates that `bytes` are a policy component of a supported interface version: it
/// compiles, instantiates in the sandbox, and answers `describe`.
pub fn inspect(bytes: &[u8]) -> Result<PluginInfo, PluginError> {
    let p = WasmPolicy::new(bytes, &PluginOptions::default())?;
    Ok(PluginInfo {
        name: p.info().name.clone(),
        version: p.info().version.clone(),
        interface_version: p.interface_version().to_string(),
        size_bytes: bytes.len() as u64,
        sha256_hex: p.sha256_hex(),
    })
}

/// Loads a plugin as a policy the simulator or the live scheduler can run.
pub fn load(bytes: &[u8], opts: &PluginOptions) -> Result<Box<dyn Policy>, PluginError> {
    Ok(Box::new(WasmPolicy::new(bytes, opts)?))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// How a plugin is named before it has described itself.
pub(crate) fn short_hash(bytes: &[u8]) -> String {
    format!("sha256:{}", &sandbox::hex(&sha256(bytes))[..12])
}
