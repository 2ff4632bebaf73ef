//! `tiervisor reproduce migration`: seed 004's Tables 5 and 6 and migration cost in
//! simulation, printed as tables (or JSON) with the paper's numbers beside ours.

use clap::Args;
use tiervisor_sim::reproduce::migration::{GAMMAS, MigrationOptions, MigrationResult};
use tiervisor_sim::reproduce::points::BAND;

use crate::Failure;
use crate::cmd_reproduce::default_jobs;

#[derive(Args)]
pub struct MigrationArgs {
    /// Size of the migrated image in MiB (the paper moved 30 GB).
    #[arg(long, default_value_t = 256)]
    image_mib: u64,
    /// Copy rate cap in MB/s.
    #[arg(long, default_value_t = 64)]
    rate_mb_s: u64,
    /// Simulations run at once (default: one per CPU).
    #[arg(long)]
    jobs: Option<usize>,
    /// Print the result as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

impl MigrationArgs {
    pub(crate) fn options(&self) -> Result<MigrationOptions, Failure> {
        if self.image_mib < 8 || self.rate_mb_s == 0 {
            return Err(Failure::input(
                "--image-mib: expected at least 8; --rate-mb-s: expected a positive number",
            ));
        }
        Ok(MigrationOptions {
            image_mib: self.image_mib,
            rate_mb_s: self.rate_mb_s,
            jobs: default_jobs(self.jobs),
        })
    }
}

pub fn run(a: MigrationArgs) -> Result<(), Failure> {
    let r = tiervisor_sim::reproduce::migration(&a.options()?).map_err(Failure::run)?;
    if a.json {
        let text = serde_json::to_string_pretty(&r).map_err(|e| Failure::run(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    print!("{}", tables(&r));
    Ok(())
}

fn verdict(ratio: f64) -> &'static str {
    if (BAND.0..=BAND.1).contains(&ratio) {
        "within"
    } else {
        "outside"
    }
}

/// The result as text tables.
pub(crate) fn tables(r: &MigrationResult) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Seed 004 in simulation: a {} MiB image (the paper's was 30 GB), copy capped at {} MB/s, intel-520 and hitachi-7k1000c.",
        r.image_mib, r.rate_mb_s
    );
    let _ = writeln!(
        s,
        "\nTable 5, downtime (ms), workload {}; band [{}, {}]",
        r.downtime_load, BAND.0, BAND.1
    );
    let _ = writeln!(
        s,
        "{:<11} {:<7} {:>9} {:>9} {:>7} {:<8} {:>8} {:>6}",
        "pair", "scheme", "paper", "ours", "ratio", "verdict", "time s", "passes"
    );
    for d in &r.downtime {
        let _ = writeln!(
            s,
            "{:<11} {:<7} {:>9.0} {:>9.1} {:>7.3} {:<8} {:>8.2} {:>6}",
            d.pair,
            d.scheme,
            d.paper_ms,
            d.ours_ms,
            d.ratio,
            verdict(d.ratio),
            d.migration_time_s,
            d.passes
        );
    }
    let _ = writeln!(
        s,
        "\nTable 6, share of the VM's writes issued to an SSD, workload {}; the paper's formula at our alpha and beta = 1",
        r.share_load
    );
    let _ = writeln!(
        s,
        "{:<11} {:<7} {:>6} {:>8} {:>8} {:>7}",
        "pair", "scheme", "alpha", "formula", "ours", "ratio"
    );
    for x in &r.share {
        let ratio = if x.paper_formula > 0.0 {
            format!("{:>7.3}", x.ours / x.paper_formula)
        } else {
            format!("{:>7}", "-")
        };
        let _ = writeln!(
            s,
            "{:<11} {:<7} {:>6.3} {:>8.3} {:>8.3} {ratio}",
            x.pair, x.scheme, x.alpha, x.paper_formula, x.ours
        );
    }
    let _ = writeln!(
        s,
        "\nMigration cost (equations 1-4), workload {}; image copy alone and the workload alone on the faster pool:",
        r.cost_load
    );
    for ((p, c), (_, b)) in r.image_copy_s.iter().zip(&r.best_iops) {
        let _ = writeln!(s, "  {p}: image copy {c:.2} s, best {b:.0} IOPS");
    }
    let g: Vec<String> = GAMMAS.iter().map(|g| format!("MC g={g}")).collect();
    let _ = writeln!(
        s,
        "{:<11} {:<7} {:>8} {:>9} {:>8} {:>10} {:>10} {:>10} {:>11}",
        "pair", "scheme", "l_IO", "l_time", "l_wear", g[0], g[1], g[2], "downtime ms"
    );
    for c in &r.cost {
        let _ = writeln!(
            s,
            "{:<11} {:<7} {:>8.3} {:>9.2} {:>8.3} {:>10.3} {:>10.3} {:>10.3} {:>11.1}",
            c.pair,
            c.scheme,
            c.lambda_io,
            c.lambda_migration_time,
            c.lambda_wear,
            c.mc[0],
            c.mc[1],
            c.mc[2],
            c.downtime_ms
        );
    }
    let held = r.orderings.iter().filter(|o| o.holds).count();
    let _ = writeln!(
        s,
        "\nThe paper's orderings: {held} of {} hold",
        r.orderings.len()
    );
    for o in &r.orderings {
        let _ = writeln!(
            s,
            "  [{}] {}: {}",
            if o.holds { "holds" } else { "does not hold" },
            o.claim,
            o.detail
        );
    }
    s
}
