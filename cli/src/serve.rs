//! `slicesched serve`: the control plane (REST API, web UI, background runs).

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on (default 127.0.0.1:8080, or the config file's `addr`).
    #[arg(long)]
    addr: Option<String>,
    /// TOML config file (see api/README.md); DATABASE_URL and SLICESCHED_ADMIN_TOKEN override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Built web UI assets served at `/` (default web/dist).
    #[arg(long)]
    web_dir: Option<PathBuf>,
    /// Start nothing: no demo replays on an empty database, no live demo tenants.
    #[arg(long)]
    no_demo: bool,
    /// Print the OpenAPI document and exit.
    #[arg(long)]
    print_openapi: bool,
}

pub fn run(a: Args) -> Result<()> {
    if a.print_openapi {
        println!("{}", slicesched_api::http::openapi().to_pretty_json()?);
        return Ok(());
    }
    // One line naming the rule (a chain of causes would spread it over several).
    let mut config =
        slicesched_api::Config::load(a.config.as_deref()).map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
    if let Some(addr) = a.addr {
        config.addr = addr;
    }
    if let Some(w) = a.web_dir {
        config.web_dir = w;
    }
    if a.no_demo {
        config.demo_run = false;
    }
    // Before the runtime: the OTLP exporters' blocking clients must live outside it.
    let telemetry = slicesched_api::telemetry::init().map_err(anyhow::Error::msg).context("telemetry")?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")?;
    let served = rt.block_on(slicesched_api::serve(config));
    // Cancelled replays stop at their next progress check; a blocking task that does
    // not must not hold the exit.
    rt.shutdown_timeout(std::time::Duration::from_secs(10));
    telemetry.shutdown();
    served.context("slicesched serve")
}
