//! `tiervisor model list` and `tiervisor calibrate`.

use clap::{Args, Subcommand};
use tiervisor_model::{Preset, calibrate, presets};

use crate::Failure;

#[derive(Subcommand)]
pub enum ModelCmd {
    /// List the device presets.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
pub struct CalibrateArgs {
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: ModelCmd) -> Result<(), Failure> {
    match cmd {
        ModelCmd::List { json } => {
            let ps = presets();
            if json {
                let v: Vec<serde_json::Value> = ps
                    .iter()
                    .map(|p| serde_json::json!({"name": p.name(), "kind": p.kind(), "capacity_bytes": p.capacity_bytes(), "description": p.description()}))
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&v).map_err(|e| Failure::run(e.to_string()))?
                );
                return Ok(());
            }
            println!(
                "{:<20} {:<4} {:>10}  description",
                "name", "kind", "capacity"
            );
            for p in &ps {
                let kind = match p {
                    Preset::Hdd { .. } => "hdd",
                    Preset::Ssd { .. } => "ssd",
                };
                println!(
                    "{:<20} {:<4} {:>7.0} GB  {}",
                    p.name(),
                    kind,
                    p.capacity_bytes() as f64 / 1e9,
                    p.description()
                );
            }
            Ok(())
        }
    }
}

pub fn calibrate(a: CalibrateArgs) -> Result<(), Failure> {
    let rows = calibrate::run();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))
                .map_err(|e| Failure::run(e.to_string()))?
        );
        return Ok(());
    }
    println!(
        "{:<18} {:<52} {:>9} {:>7} {:>6}",
        "source", "figure", "model", "paper", "ratio"
    );
    for r in rows {
        let paper = r.paper.map_or("-".to_string(), |p| format!("{p:.1}"));
        let ratio = r.ratio.map_or("-".to_string(), |x| format!("{x:.2}"));
        println!(
            "{:<18} {:<52} {:>8.2}{} {:>7} {:>6}",
            r.source, r.figure, r.model, r.unit, paper, ratio
        );
    }
    Ok(())
}
