//! `slicesched cost ...`.

use anyhow::Result;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Fit the cost model on profiles and report its error on held-out or other profiles.
    Validate {
        /// Profiles to fit on (Vidur layout: model folders with mlp.csv, model_config.yml).
        #[arg(long)]
        fit: std::path::PathBuf,
        /// Profiles to test on; the same folder holds out 20% of token counts.
        #[arg(long)]
        test: std::path::PathBuf,
        /// Catalog GPU the test profiles were measured on.
        #[arg(long)]
        test_sku: Option<String>,
        /// Write the report as JSON to stdout.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Validate { .. } => anyhow::bail!("cost validate: not wired yet"),
    }
}
