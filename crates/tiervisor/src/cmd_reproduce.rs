//! `tiervisor reproduce`: paper experiments in simulation.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use tiervisor_sim::reproduce;

use crate::Failure;

#[derive(Subcommand)]
pub enum ReproduceCmd {
    /// Seed 000, Figures 4-7: WebSearch and TPC-C traces, SPC-like and fio zipf generated
    /// workloads on HDD only, SSD only, split 50/50, hot, the cache modes and (generated)
    /// the static and dynamic oracles, 1 to 4 VMs; execution time normalized to one VM on
    /// SSD only, hot's gain share against each oracle and issue 17's targets (judged
    /// against the static oracle).
    Tiering(TieringArgs),
    /// Seed 002: IOzone-like random writes of a 6 GB file, 4 KB to 512 KB records, with
    /// the log-structured write path off and on; MB/s and the speed-up.
    Logwrite(ReproduceArgs),
    /// Seed 003 Tables 2 and 3: 50,000 requests of the SURGE-like web-server workload on
    /// cheetah-15k4, O_DIRECT and through a page cache, per scheduler: mean and variance
    /// of service and response time, sectors/ms, beside the paper's real column; and the
    /// virtual column (a fast SSD model behind the throttle, k = 8) beside the paper's.
    Scheduling(SchedulingArgs),
    /// Seed 001 (vFLUSH) on the simulated openssd-jasmine: flush = "all" (Baseline)
    /// against "tagged"; Figures 1/8, 2/6, 7 and 9 with the paper's numbers and ratios.
    Flush(FlushArgs),
    /// Seed 004 (live storage migration) with intel-520 and hitachi-7k1000c: Table 5
    /// (downtime of DBT, mirror, LR, SLR, AIO for four pool pairs), Table 6 (share of
    /// writes reaching an SSD against the paper's formulas), the migration cost MC and
    /// the paper's orderings, each with the paper's number beside ours.
    Migration(crate::cmd_migration::MigrationArgs),
    /// Every reproduction above: one Markdown report with each point's paper value, ours,
    /// the ratio and whether it is within [0.67, 1.5], a plot per experiment, a summary.
    All(crate::cmd_reproduce_all::AllArgs),
}

#[derive(Args)]
pub struct FlushArgs {
    /// Simulated seconds per run (micro-benchmark and applications).
    #[arg(long, default_value_t = tiervisor_sim::reproduce::flush::DEFAULT_RUNTIME_S)]
    runtime_s: f64,
    /// Simulations run at once (default: one per CPU).
    #[arg(long)]
    jobs: Option<usize>,
    /// Print the result as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Write a Markdown report and CSV data for the plots into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Draw Figures 1/8, 2/6 and 7 as SVG files into this directory (created if missing).
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args)]
pub struct TieringArgs {
    #[command(flatten)]
    common: ReproduceArgs,
    /// Run every scenario on each of these seeds instead of its own (e.g. `1,2,3,4,5`),
    /// and judge issue 17's targets on the median over them, each seed's value beside it:
    /// one run's verdict can be luck where a row swings with the seed.
    #[arg(long, value_delimiter = ',')]
    seeds: Vec<u64>,
}

#[derive(Args)]
pub struct ReproduceArgs {
    /// Directory of the experiment's scenarios (default: scenarios/<experiment> of this
    /// source tree).
    #[arg(long)]
    scenarios: Option<PathBuf>,
    /// Simulations run at once (default: one per CPU).
    #[arg(long)]
    jobs: Option<usize>,
    /// Print `{"rows": [...]}` instead of a table.
    #[arg(long)]
    json: bool,
}

/// `scenarios/<name>` under the working directory, else under this source tree.
pub(crate) fn scenario_dir(given: Option<PathBuf>, name: &str) -> PathBuf {
    given.unwrap_or_else(|| {
        let here = PathBuf::from("scenarios").join(name);
        if here.is_dir() {
            here
        } else {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../scenarios")
                .join(name)
        }
    })
}

fn jobs(a: &ReproduceArgs) -> usize {
    default_jobs(a.jobs)
}

pub(crate) fn default_jobs(given: Option<usize>) -> usize {
    given.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

impl FlushArgs {
    pub(crate) fn parts(&self) -> (f64, Option<usize>, bool, Option<&std::path::Path>) {
        (self.runtime_s, self.jobs, self.json, self.out.as_deref())
    }
    pub(crate) fn plot_dir(&self) -> Option<&std::path::Path> {
        self.plot.as_deref()
    }
}

fn print_json<T: serde::Serialize>(rows: &[T]) -> Result<(), Failure> {
    let v = serde_json::json!({ "rows": rows });
    println!(
        "{}",
        serde_json::to_string_pretty(&v).map_err(|e| Failure::run(e.to_string()))?
    );
    Ok(())
}

pub fn run(cmd: ReproduceCmd) -> Result<(), Failure> {
    match cmd {
        ReproduceCmd::Flush(a) => crate::cmd_flush::run(a),
        ReproduceCmd::Migration(a) => crate::cmd_migration::run(a),
        ReproduceCmd::All(a) => crate::cmd_reproduce_all::run(a),
        ReproduceCmd::Scheduling(a) => scheduling(a),
        ReproduceCmd::Logwrite(a) => {
            let dir = scenario_dir(a.scenarios.clone(), "logwrite");
            let rows = reproduce::logwrite(&dir, jobs(&a)).map_err(Failure::input)?;
            if a.json {
                return print_json(&rows);
            }
            println!(
                "{:<20} {:>12} {:>8} {:>10} {:>8} {:>6} {:>8} {:>8} {:>6} {:>6}",
                "device",
                "record_bytes",
                "log",
                "mb_per_s",
                "paper",
                "ratio",
                "speedup",
                "paper",
                "ratio",
                "WAF"
            );
            let opt = |x: Option<f64>, w: usize| {
                x.map_or(format!("{:>w$}", "-"), |v| format!("{v:>w$.2}"))
            };
            for r in &rows {
                let ratio = |m: Option<f64>, p: Option<f64>| m.zip(p).map(|(m, p)| m / p);
                println!(
                    "{:<20} {:>12} {:>8} {:>10.2} {} {} {} {} {} {}",
                    r.device,
                    r.record_bytes,
                    r.log,
                    r.mb_per_s,
                    opt(r.paper_mb_per_s, 8),
                    opt(ratio(Some(r.mb_per_s), r.paper_mb_per_s), 6),
                    opt(r.speedup, 8),
                    opt(r.paper_speedup, 8),
                    opt(ratio(r.speedup, r.paper_speedup), 6),
                    opt(r.log_write_amplification, 6)
                );
            }
            let points = tiervisor_sim::reproduce::points::from_logwrite(&rows);
            println!(
                "paper's mechanism (bitvisor) against seed 002: {}; gather rows: what tiervisor adds (no paper number)",
                tiervisor_sim::reproduce::points::summary(&points)
            );
            Ok(())
        }
        ReproduceCmd::Tiering(a) => tiering(a),
    }
}

fn tiering(a: TieringArgs) -> Result<(), Failure> {
    let dir = scenario_dir(a.common.scenarios.clone(), "tiering");
    let jobs = jobs(&a.common);
    if a.seeds.is_empty() {
        let rows = reproduce::tiering(&dir, jobs).map_err(Failure::input)?;
        let targets = reproduce::tiering_targets(&rows);
        if a.common.json {
            let v = serde_json::json!({ "rows": rows, "targets": targets });
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| Failure::run(e.to_string()))?
            );
        } else {
            print_tiering(&rows, &targets);
        }
        return Ok(());
    }
    let mut runs = Vec::new();
    for &seed in &a.seeds {
        let rows = reproduce::tiering_seeded(&dir, jobs, Some(seed)).map_err(Failure::input)?;
        let targets = reproduce::tiering_targets(&rows);
        runs.push((seed, rows, targets));
    }
    let per_seed: Vec<_> = runs.iter().map(|(_, _, t)| t.clone()).collect();
    let judged = reproduce::targets_over_seeds(&a.seeds, &per_seed);
    if a.common.json {
        let runs: Vec<_> = runs
            .iter()
            .map(|(seed, rows, targets)| {
                serde_json::json!({ "seed": seed, "rows": rows, "targets": targets })
            })
            .collect();
        let v = serde_json::json!({ "seeds": a.seeds, "runs": runs, "targets": judged });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Failure::run(e.to_string()))?
        );
        return Ok(());
    }
    for (seed, rows, targets) in &runs {
        println!("## seed {seed}\n");
        print_tiering(rows, targets);
        println!();
    }
    print_targets_over_seeds(&judged);
    Ok(())
}

/// One of issue 17's targets: what, our value under `label`, the bound and the ratio.
fn target_line(
    workload: &str,
    vms: u32,
    what: &str,
    label: &str,
    value: f64,
    at_least: bool,
    target: f64,
) -> String {
    format!(
        "{workload:<9} {vms} VM: {what:<46} {label} {value:>6.3}  target {} {target:>4.2}  ratio {:>5.2}",
        if at_least { ">=" } else { "<=" },
        value / target
    )
}

fn print_targets_over_seeds(judged: &[reproduce::SeededTarget]) {
    println!("issue 17's targets over the seeds (verdict on the median; ratio = median / target):");
    for t in judged {
        let values: Vec<String> = t.per_seed.iter().map(|v| format!("{v:.2}")).collect();
        println!(
            "{}  met on {} of {} seeds ({})  {}",
            target_line(
                &t.workload,
                t.vms,
                &t.what,
                "median",
                t.median,
                t.at_least,
                t.target
            ),
            t.met_on,
            t.per_seed.len(),
            values.join(" "),
            if t.met { "met" } else { "NOT met" }
        );
    }
    let met = judged.iter().filter(|t| t.met).count();
    println!("{met} of {} targets met on the median", judged.len());
}

fn print_tiering(rows: &[reproduce::TieringRow], targets: &[reproduce::TieringTarget]) {
    println!(
        "{:<9} {:>3} {:<14} {:>12} {:>11} {:>11} {:>10} {:>13} {:>10} {:>14}",
        "workload",
        "vms",
        "config",
        "exec_time_s",
        "normalized",
        "promotions",
        "demotions",
        "migrated_MiB",
        "gain_share",
        "gain_share_dyn"
    );
    for r in rows {
        println!(
            "{:<9} {:>3} {:<14} {:>12.2} {:>11.2} {:>11} {:>10} {:>13.0} {:>10} {:>14}",
            r.trace,
            r.vms,
            r.config,
            r.exec_time_s,
            r.normalized,
            r.promotions,
            r.demotions,
            r.migrated_bytes as f64 / (1u64 << 20) as f64,
            r.gain_share.map_or("-".to_string(), |g| format!("{g:.2}")),
            r.gain_share_dynamic
                .map_or("-".to_string(), |g| format!("{g:.2}"))
        );
    }
    if targets.is_empty() {
        return;
    }
    println!(
        "\nissue 17's targets (ratio = ours / target; gain shares against the static oracle):"
    );
    for t in targets {
        println!(
            "{}  {}",
            target_line(
                &t.workload,
                t.vms,
                &t.what,
                "ours",
                t.ours,
                t.at_least,
                t.target
            ),
            if t.met { "met" } else { "NOT met" }
        );
    }
}

fn scheduling(a: SchedulingArgs) -> Result<(), Failure> {
    let dir = scenario_dir(a.common.scenarios.clone(), "scheduling");
    let report = reproduce::scheduling(&dir, a.schedulers.as_deref(), jobs(&a.common))
        .map_err(Failure::input)?;
    if a.common.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| Failure::run(e.to_string()))?
        );
        return Ok(());
    }
    let cell = |m: &reproduce::Measure| match (m.paper, m.ratio) {
        (Some(p), Some(r)) => format!(
            "{:>10.2} {:>10.2} {:>5.2}{}",
            m.ours,
            p,
            r,
            match m.verdict {
                Some("met") => " ok ",
                Some(_) => " OUT",
                None => "    ",
            }
        ),
        _ => format!("{:>10.2} {:>10} {:>5}    ", m.ours, "-", "-"),
    };
    for (table, column) in [
        ("o_direct", "real"),
        ("o_direct", "virtual"),
        ("page_cache", "real"),
        ("page_cache", "virtual"),
    ] {
        println!(
            "\n{}, {} (paper's {column} column beside; verdict band [0.5, 2])",
            if table == "o_direct" {
                "Table 2, O_DIRECT"
            } else {
                "Table 3, page cache"
            },
            if column == "real" {
                "simulated real column"
            } else {
                "virtual column: fast SSD model behind the throttle, k = 8, times / k"
            }
        );
        println!(
            "{:<9} {:<22} {:>10} {:>10} {:>5}",
            "sched", "measure", "ours", "paper", "ratio"
        );
        for r in report
            .rows
            .iter()
            .filter(|r| r.table == table && r.column == column)
        {
            for (name, m) in [
                ("mean service ms", &r.mean_service_ms),
                ("variance service ms2", &r.variance_service_ms2),
                ("mean response ms", &r.mean_response_ms),
                ("variance response ms2", &r.variance_response_ms2),
                ("sectors/ms", &r.sectors_per_ms),
            ] {
                println!("{:<9} {:<22} {}", r.scheduler, name, cell(m));
            }
            println!(
                "{:<9} {:<22} {:>10}",
                r.scheduler, "drive cache hits", r.drive_cache_hits
            );
        }
    }
    println!();
    for k in &report.rankings {
        println!("{k}");
    }
    if !report.missing.is_empty() {
        println!("not in this build (no rows): {}", report.missing.join(", "));
    }
    println!("virtual column: {}", report.virtual_column);
    Ok(())
}

#[derive(Args)]
pub struct SchedulingArgs {
    #[command(flatten)]
    common: ReproduceArgs,
    /// Only these schedulers (comma-separated; default: cats, deadline, cfq, bfq, kyber,
    /// mclock, fifo, and cats-think, tiervisor's own CATS variant with
    /// `busdriver_think_gate`; those this build has).
    #[arg(long, value_delimiter = ',')]
    schedulers: Option<Vec<String>>,
}
