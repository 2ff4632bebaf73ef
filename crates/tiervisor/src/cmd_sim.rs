//! `tiervisor sim`.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;
use tiervisor_sim::{RunOptions, Scenario, Simulation};

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
    let opts = RunOptions {
        seed: a.seed,
        progress: !a.json && std::io::stderr().is_terminal(),
        max_sim_ns: None,
    };
    let sim = Simulation::new(sc, &opts).map_err(Failure::input)?;
    let report = sim.run().map_err(Failure::run)?;
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}
