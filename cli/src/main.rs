//! `slicesched`: a thin binary that calls one function per command.

mod args;
mod bench;
mod compare;
mod cost;
mod load;
mod plugin;
mod plugin_bench;
mod policies;
mod profile;
mod replay;
mod run;
mod scenario;
mod scenario_gen;
mod serve;
mod sweep;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "slicesched", version, about = "Operator-level scheduling of multi-tenant LLM serving")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a scenario's traces on its simulated cluster under a policy.
    Replay(replay::Args),
    /// Cost-model commands.
    Cost {
        #[command(subcommand)]
        command: cost::Command,
    },
    /// Measure simulator throughput (op events/s) and whole-replay wall time.
    Bench(bench::Args),
    /// Replay every policy on one scenario at one load, side by side, with the idle
    /// GPU time each filled.
    Compare(compare::Args),
    /// Find each policy's goodput: the highest arrival-rate scale within SLA violation targets.
    Sweep(sweep::Args),
    /// Serve the control plane: REST API, web UI and background runs over Postgres.
    Serve(serve::Args),
    /// Run a scenario like replay, every op executed for real on the executor (CPU backend).
    Run(run::Args),
    /// Replay a scenario's arrivals against a live server (`serve`'s /v1) in wall clock.
    Load(load::Args),
    /// Measure every op of a model on this machine (CPU backend) in Vidur's layout.
    Profile(profile::Args),
    /// Scenario tools: draw a plausible mix from a seed.
    Scenario {
        #[command(subcommand)]
        command: scenario::Command,
    },
    /// Policy plugins: build, validate, measure.
    Plugin {
        #[command(subcommand)]
        command: plugin::Command,
    },
}

fn main() -> std::process::ExitCode {
    match dispatch(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, the context chain joined: a user's mistake or a missing driver is
            // a message, not a backtrace (anyhow's Debug form prints one under
            // RUST_BACKTRACE, which CI and many shells set).
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let result = match cli.command {
        Command::Replay(a) => replay::run(a),
        Command::Cost { command } => cost::run(command),
        Command::Bench(a) => bench::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Plugin { command } => plugin::run(command),
        Command::Profile(a) => profile::run(a),
        Command::Run(a) => run::run(a),
        Command::Load(a) => load::run(a),
        Command::Scenario { command } => scenario::run(command),
    };
    // A reader that stops early (`| head`) is not an error worth a message.
    match result {
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) => {
            Ok(())
        }
        other => other,
    }
}
