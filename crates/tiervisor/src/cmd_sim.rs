//! `tiervisor sim`.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;
use tiervisor_sim::{Progress, RunOptions, Scenario, Simulation};

use crate::Failure;

#[derive(Args)]
pub struct SimArgs {
    /// Scenario file (TOML).
    scenario: PathBuf,
    /// Seed for generators and tie-breaking (overrides the scenario's).
    #[arg(long)]
    seed: Option<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: SimArgs) -> Result<(), Failure> {
    let sc = Scenario::load(&a.scenario).map_err(|e| Failure::input(e.to_string()))?;
    // What a reader of the results must know about the traces (coarse timestamps,
    // address-only traces that measure locality only), on stderr beside the report.
    for vm in &sc.vms {
        if let tiervisor_sim::scenario::WorkloadSpec::Trace { trace, .. } = &vm.workload {
            for w in trace.warnings() {
                eprintln!("tiervisor: {}: {}: {w}", vm.name, trace.source);
            }
        }
    }
    let opts = RunOptions {
        seed: a.seed,
        ..RunOptions::default()
    };
    let mut sim = Simulation::new(sc, &opts).map_err(Failure::input)?;
    if let Some(total) = sim.total_ios()
        && total > 200_000
        && !a.json
        && std::io::stderr().is_terminal()
    {
        sim = sim.with_progress(Box::new(Bar::new(total)));
    }
    let report = sim.run().map_err(Failure::run)?;
    for (name, v) in &report.volumes {
        if let Some(w) = v.zero_fill_warning(name) {
            eprintln!("tiervisor: warning: {w}");
        }
    }
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}

/// A progress bar on stderr for long runs.
struct Bar(indicatif::ProgressBar);

impl Bar {
    fn new(total_ios: u64) -> Bar {
        let pb = indicatif::ProgressBar::new(total_ios);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} I/Os ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Bar(pb)
    }
}

impl Progress for Bar {
    fn advance(&mut self, done_ios: u64) {
        self.0.set_position(done_ios);
    }
    fn finish(&mut self) {
        self.0.finish_and_clear();
    }
}
