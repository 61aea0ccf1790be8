//! Building a plugin folder into a component: a Rust crate compiled for
//! `wasm32-unknown-unknown`, then wrapped as a component in-process by `wit-component`.
//!
//! Two compiler routes, tried in order: a rustup toolchain with the wasm32 target
//! installed (`rustup target add wasm32-unknown-unknown`), then Debian's `rustc-web`,
//! `cargo-web` and `rust-web-src`, which build the standard library from source
//! (`-Zbuild-std`). The guest profile (LTO, one codegen unit, abort on panic, stripped)
//! is passed on the command line, so a plugin folder needs no profile of its own.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-unknown-unknown";
/// Where Debian's packages put their compiler and the standard library's source.
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_STD_SRC: &str = "/usr/lib/rustlib/src/rust/library";

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    // The io error is in the message, not `source()`: shown once where a caller prints the chain.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{path}: no [package] name")]
    NoName { path: String },
    #[error(
        "no Wasm toolchain: run `rustup target add {TARGET}`, or as root \
         `apt-get install rustc-web cargo-web rust-web-src` (see scripts/lib/wasm.sh)"
    )]
    NoToolchain,
    #[error("cargo ({route}) failed with {status}:\n{stderr}")]
    Cargo { route: &'static str, status: String, stderr: String },
    #[error("turning {module} into a component: {detail}")]
    Componentize { module: String, detail: String },
}

/// The compiler route a build took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Rustup,
    Debian,
}

/// A built plugin.
#[derive(Debug, Clone)]
pub struct Built {
    pub component: PathBuf,
    pub route: Route,
    pub module_bytes: usize,
    pub component_bytes: usize,
}

/// Builds the plugin crate in `dir` into the component `out`, compiling under
/// `target_dir` (kept apart from native builds: another compiler may write there), with
/// the crate's `guest` feature and `features`.
pub fn build(dir: &Path, out: &Path, target_dir: &Path, features: &[&str]) -> Result<Built, BuildError> {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).map_err(|e| BuildError::Io(manifest.display().to_string(), e))?;
    let name = package_name(&text).ok_or_else(|| BuildError::NoName { path: manifest.display().to_string() })?;
    let route = pick_route()?;
    let mut cmd = match route {
        Route::Rustup => Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())),
        Route::Debian => debian_cargo(),
    };
    cmd.arg("build").arg("--release").arg("--target").arg(TARGET);
    if route == Route::Debian {
        cmd.arg("-Zbuild-std=std,panic_abort");
    }
    cmd.arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .arg("--features")
        .arg(std::iter::once("guest").chain(features.iter().copied()).collect::<Vec<_>>().join(","));
    for c in GUEST_PROFILE {
        cmd.arg("--config").arg(c);
    }
    // Settings inherited from an outer cargo (a test run) would leak into the guest build.
    for v in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "RUSTC_WRAPPER", "CARGO_BUILD_TARGET", "CARGO_TARGET_DIR"] {
        cmd.env_remove(v);
    }
    let output = cmd.output().map_err(|e| BuildError::Io(format!("running cargo ({route:?})"), e))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
        let stderr = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
        let route = if route == Route::Rustup { "rustup" } else { "debian" };
        return Err(BuildError::Cargo { route, status: output.status.to_string(), stderr });
    }
    let module = target_dir.join(TARGET).join("release").join(format!("{}.wasm", name.replace('-', "_")));
    let bytes = std::fs::read(&module).map_err(|e| BuildError::Io(module.display().to_string(), e))?;
    let component = componentize(&bytes)
        .map_err(|detail| BuildError::Componentize { module: module.display().to_string(), detail })?;
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| BuildError::Io(parent.display().to_string(), e))?;
    }
    std::fs::write(out, &component).map_err(|e| BuildError::Io(out.display().to_string(), e))?;
    Ok(Built { component: out.to_path_buf(), route, module_bytes: bytes.len(), component_bytes: component.len() })
}

/// The guest profile: small and fast code, panics abort (the SDK logs them first).
const GUEST_PROFILE: &[&str] = &[
    "profile.release.opt-level=3",
    "profile.release.lto=true",
    "profile.release.codegen-units=1",
    "profile.release.panic=\"abort\"",
    "profile.release.strip=true",
    "profile.release.debug=0",
];

/// Wraps a core module whose bindings embed the WIT world into a component.
pub fn componentize(module: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .module(module)
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| format!("{e:#}"))
}

fn package_name(manifest: &str) -> Option<String> {
    let doc: toml::Table = manifest.parse().ok()?;
    Some(doc.get("package")?.get("name")?.as_str()?.to_string())
}

/// rustup's wasm32 target if installed, else Debian's packages if present.
fn pick_route() -> Result<Route, BuildError> {
    let libdir =
        Command::new("rustc").args(["--print", "target-libdir", "--target", TARGET]).env_remove("RUSTC").output();
    if let Ok(o) = libdir {
        let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
        let has_std = std::fs::read_dir(&dir)
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("libstd-")))
            .unwrap_or(false);
        if o.status.success() && has_std {
            return Ok(Route::Rustup);
        }
    }
    if Path::new(DEBIAN_CARGO).exists() && Path::new(DEBIAN_RUSTC).exists() && Path::new(DEBIAN_STD_SRC).exists() {
        return Ok(Route::Debian);
    }
    Err(BuildError::NoToolchain)
}

/// Debian's cargo with its own rustc, allowed `-Zbuild-std`, and a wasm linker: rustup's
/// `rust-lld` when there is one, else LLVM's `wasm-ld`.
fn debian_cargo() -> Command {
    let mut cmd = Command::new(DEBIAN_CARGO);
    cmd.env("RUSTC", DEBIAN_RUSTC).env("RUSTC_BOOTSTRAP", "1").env_remove("RUSTUP_TOOLCHAIN");
    if let Some(linker) = wasm_linker() {
        cmd.env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", linker);
    }
    cmd
}

fn wasm_linker() -> Option<PathBuf> {
    let sysroot = Command::new("rustc").arg("--print").arg("sysroot").env_remove("RUSTC").output().ok()?;
    let lld = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim())
        .join("lib/rustlib/x86_64-unknown-linux-gnu/bin/rust-lld");
    if lld.exists() {
        return Some(lld);
    }
    std::fs::read_dir("/usr/lib").ok()?.flatten().map(|e| e.path().join("bin/wasm-ld")).find(|p| p.exists())
}

#[cfg(test)]
mod tests {
    #[test]
    fn package_names_come_from_the_package_table() {
        let m = "[package]\nname = \"my-policy\"\nversion = \"0.1.0\"\n[dependencies]\nname = \"x\"\n";
        assert_eq!(super::package_name(m).as_deref(), Some("my-policy"));
        assert_eq!(super::package_name("[workspace]\n"), None);
    }

    #[test]
    fn a_core_module_without_the_world_is_refused() {
        // The smallest valid module: no embedded world, nothing to export.
        let empty = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
        let c = super::componentize(&empty).expect("an empty module still encodes");
        assert!(c.len() > empty.len());
        assert!(super::componentize(b"not wasm").is_err());
    }
}
