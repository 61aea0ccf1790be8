//! `slicesched cost ...`.

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Fit the cost model on profiles and report its relative error on held-out or
    /// other profiles (points under 10 µs excluded).
    Validate {
        /// Profiles to fit on (Vidur layout: model folders with mlp.csv, model_config.yml,
        /// optional attention.csv).
        #[arg(long)]
        fit: PathBuf,
        /// Profiles to test on; when it is the fit folder, 20% of the token counts per
        /// (model, TP, op) are held out with a fixed seed.
        #[arg(long)]
        test: PathBuf,
        /// Catalog GPU the test profiles were measured on (default A100-80GB).
        #[arg(long)]
        test_sku: Option<String>,
        /// Write the report as JSON to stdout (the table goes to stderr).
        #[arg(long)]
        json: bool,
        /// Also fit on all models but one and test on the one left out, for each model.
        #[arg(long)]
        leave_one_model_out: bool,
    },
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Validate { fit, test, test_sku, json, leave_one_model_out } => {
            let report = slicesched_cost::validate(&fit, &test, test_sku.as_deref())
                .with_context(|| format!("validating the cost model fitted on {} against {}", fit.display(), test.display()))?;
            if json {
                eprint!("{}", report.table());
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.table());
            }
            if leave_one_model_out {
                for m in slicesched_cost::validate_leave_one_model_out(&fit)? {
                    eprintln!("\nleft out: {} (fitted on the others)", m.model);
                    eprint!("{}", m.report.table());
                }
            }
            Ok(())
        }
    }
}
