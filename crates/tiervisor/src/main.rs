//! The `tiervisor` command.

mod cmd_blk_bench;
mod cmd_ctl_migrate;
mod cmd_ctl_volume;
mod cmd_dst;
mod cmd_flush;
mod cmd_load;
mod cmd_migration;
mod cmd_migration_figs;
mod cmd_model;
mod cmd_reproduce;
mod cmd_reproduce_all;
mod cmd_serve;
mod cmd_sim;
mod cmd_trace;
mod nbd_client;
mod plot;
mod plot_flush;
mod plot_migration;
mod plot_migration_figs;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for bad input (configuration, scenario, trace): the user must fix it.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit status for a failure while running.
pub const EXIT_FAILURE: u8 = 1;

#[derive(Parser)]
#[command(
    name = "tiervisor",
    version,
    about = "A storage hypervisor for VM disks on mixed SSD and HDD pools"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve volumes to VMs over NBD (embedded default configuration without --config).
    Serve(cmd_serve::ServeArgs),
    /// Pool files and devices.
    Pool {
        #[command(subcommand)]
        cmd: cmd_serve::PoolCmd,
    },
    /// Talk to a running server through its admin socket.
    Ctl {
        #[command(subcommand)]
        cmd: cmd_serve::CtlCmd,
    },
    /// Run a simulation scenario (TOML) with device models.
    Sim(cmd_sim::SimArgs),
    /// Replay a scenario's VM workloads against real NBD exports (this server's or any
    /// other's) and report what `sim` reports, to check a simulated prediction for real.
    Load(cmd_load::LoadArgs),
    /// Random reads at a fixed depth over NBD or vhost-user-blk (a host-side vhost-user
    /// frontend, no VM): the transport's cost per request.
    BlkBench(cmd_blk_bench::BlkBenchArgs),
    /// Deterministic simulation testing: random workloads, crashes and device faults,
    /// every read and recovery checked against a reference disk.
    Dst(cmd_dst::DstArgs),
    /// Inspect block traces.
    Trace {
        #[command(subcommand)]
        cmd: cmd_trace::TraceCmd,
    },
    /// Device models.
    Model {
        #[command(subcommand)]
        cmd: cmd_model::ModelCmd,
    },
    /// Run the presets through the papers' micro-benchmarks: model vs published.
    Calibrate(cmd_model::CalibrateArgs),
    /// Reproduce a paper's experiment in simulation, from the scenarios in `scenarios/`.
    Reproduce {
        #[command(subcommand)]
        cmd: cmd_reproduce::ReproduceCmd,
    },
}

/// An error with the exit status it deserves.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn input(message: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_BAD_INPUT,
            message: message.into(),
        }
    }
    pub fn run(message: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_FAILURE,
            message: message.into(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("TIERVISOR_LOG"))
        .init();
    let r = match cli.cmd {
        Cmd::Serve(a) => cmd_serve::serve(a),
        Cmd::Pool { cmd } => cmd_serve::pool(cmd),
        Cmd::Ctl { cmd } => cmd_serve::ctl(cmd),
        Cmd::Sim(a) => cmd_sim::run(a),
        Cmd::Load(a) => cmd_load::run(a),
        Cmd::BlkBench(a) => cmd_blk_bench::run(a),
        Cmd::Dst(a) => cmd_dst::run(a),
        Cmd::Trace { cmd } => cmd_trace::run(cmd),
        Cmd::Model { cmd } => cmd_model::run(cmd),
        Cmd::Calibrate(a) => cmd_model::calibrate(a),
        Cmd::Reproduce { cmd } => cmd_reproduce::run(cmd),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("tiervisor: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
