//! The seam to the Wasm plugin host (`slicesched-plugin-host`): validating an upload by
//! compiling and instantiating it in the sandbox, and loading an active plugin as a
//! policy for a run (with the host's default fuel and memory limits).

use slicesched_plugin_host::PluginOptions;
use slicesched_policy::Policy;

/// What an upload declares about itself, read by instantiating it.
#[derive(Debug, Clone)]
pub struct Inspected {
    pub name: String,
    pub version: String,
    pub interface_version: String,
    pub size_bytes: u64,
    pub sha256_hex: String,
}

pub fn inspect(bytes: &[u8]) -> Result<Inspected, String> {
    let i = slicesched_plugin_host::inspect(bytes).map_err(|e| e.to_string())?;
    Ok(Inspected {
        name: i.name,
        version: i.version,
        interface_version: i.interface_version,
        size_bytes: i.size_bytes,
        sha256_hex: i.sha256_hex,
    })
}

pub fn load(bytes: &[u8]) -> Result<Box<dyn Policy>, String> {
    slicesched_plugin_host::load(bytes, &PluginOptions::default()).map_err(|e| e.to_string())
}
