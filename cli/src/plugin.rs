//! `slicesched plugin`: build a plugin folder into a component, validate a component,
//! and measure what running policies as plugins costs.

use anyhow::{bail, Context, Result};
use slicesched_plugin_host::toolchain;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Build a plugin crate folder into a policy component (.wasm).
    Build {
        /// The plugin crate (for example plugins/slice, or a copy of plugins/template).
        dir: PathBuf,
        /// The component to write (default: target/plugins/<folder name>.wasm, where
        /// `--policy NAME` finds the shipped ones).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Where cargo compiles the guest (apart from native builds).
        #[arg(long, default_value = "target/wasm")]
        target_dir: PathBuf,
        /// Cargo features of the plugin crate to enable (comma-separated), e.g. one
        /// misbehaviour of plugins/hostile for a quarantine test.
        #[arg(long, value_delimiter = ',')]
        features: Vec<String>,
    },
    /// Check that a file is a policy component of a supported interface version.
    Validate { file: PathBuf },
    /// Measure call overhead, per-decision cost and whole-replay wall time, Wasm
    /// against native.
    Bench(crate::plugin_bench::Args),
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Build { dir, out, target_dir, features } => {
            let name = dir
                .canonicalize()
                .with_context(|| format!("plugin folder {}", dir.display()))?
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .context("a plugin folder has a name")?;
            let out = out.unwrap_or_else(|| crate::policies::plugin_dir().join(format!("{name}.wasm")));
            let features: Vec<&str> = features.iter().map(String::as_str).collect();
            let built = toolchain::build(&dir, &out, &target_dir, &features)
                .with_context(|| format!("building the plugin in {}", dir.display()))?;
            let info = validate(&out)?;
            println!(
                "built {} ({:?} toolchain): module {} B, component {} B",
                out.display(),
                built.route,
                built.module_bytes,
                built.component_bytes
            );
            print!("{info}");
            Ok(())
        }
        Command::Validate { file } => {
            print!("{}", validate(&file)?);
            Ok(())
        }
        Command::Bench(a) => crate::plugin_bench::run(a),
    }
}

/// What `validate` prints, or why the file is refused.
fn validate(file: &PathBuf) -> Result<String> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    match slicesched_plugin_host::inspect(&bytes) {
        Ok(i) => Ok(format!(
            "name:              {}\nversion:           {}\ninterface version: {}\nsize:              {} bytes\nsha256:            {}\n",
            i.name, i.version, i.interface_version, i.size_bytes, i.sha256_hex
        )),
        Err(e) => bail!("{} is refused: {e}", file.display()),
    }
}
