//! The seam to the Wasm plugin host (`slicesched-plugin-host`): validating an upload by
//! compiling and instantiating it in the sandbox, and loading an active plugin as a
//! policy for a run.

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

pub fn inspect(_bytes: &[u8]) -> Result<Inspected, String> {
    Err("this build has no Wasm plugin host (slicesched-plugin-host): uploads are refused".into())
}

pub fn load(_bytes: &[u8]) -> Result<Box<dyn Policy>, String> {
    Err("this build has no Wasm plugin host (slicesched-plugin-host)".into())
}
