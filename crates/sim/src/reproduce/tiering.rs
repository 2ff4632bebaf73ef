//! Seed 000, Figures 4-7: WebSearch and TPC-C on HDD only, SSD only, split and hot.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{run_scenarios, scenario_files};

/// One run of seed 000's experiment (Figures 4-7).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TieringRow {
    pub trace: String,
    pub vms: u32,
    /// `hdd`, `ssd`, `split` or `hot`.
    pub config: String,
    /// Simulated time until the last VM finished its trace.
    pub exec_time_s: f64,
    /// `exec_time_s` over that of one VM on SSD only, for the same trace.
    pub normalized: f64,
    pub promotions: u64,
    pub demotions: u64,
    /// Tier migration's own I/O (it runs on the same simulated devices).
    pub migrated_bytes: u64,
    pub scenario: String,
}

const CONFIGS: [&str; 4] = ["hdd", "ssd", "split", "hot"];
const TRACES: [&str; 2] = ["wsrch", "tpcc"];

/// `wsrch-2vm-hot.toml` -> ("wsrch", 2, "hot").
fn parse_name(path: &Path) -> Option<(String, u32, String)> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".toml")?;
    let mut parts = stem.splitn(3, '-');
    let trace = parts.next()?;
    let vms = parts.next()?.strip_suffix("vm")?.parse().ok()?;
    let config = parts.next()?;
    CONFIGS
        .contains(&config)
        .then(|| (trace.to_string(), vms, config.to_string()))
}

/// Seed 000's experiment: every `{trace}-{n}vm-{config}.toml` in `dir`.
pub fn tiering(dir: &Path, jobs: usize) -> Result<Vec<TieringRow>, String> {
    struct Run {
        order: (usize, u32, usize),
        trace: String,
        vms: u32,
        config: String,
        path: PathBuf,
    }
    let found = scenario_files(dir, parse_name, "<trace>-<n>vm-<hdd|ssd|split|hot>.toml")?;
    let mut runs: Vec<Run> = found
        .into_iter()
        .map(|((trace, vms, config), path)| {
            // The paper's order: WebSearch, then OLTP; HDD, SSD, 50/50, then ours.
            let t = TRACES
                .iter()
                .position(|x| *x == trace)
                .unwrap_or(TRACES.len());
            let c = CONFIGS.iter().position(|x| *x == config).unwrap_or(0);
            Run {
                order: (t, vms, c),
                trace,
                vms,
                config,
                path,
            }
        })
        .collect();
    runs.sort_by(|a, b| a.order.cmp(&b.order).then_with(|| a.trace.cmp(&b.trace)));
    let files: Vec<PathBuf> = runs.iter().map(|r| r.path.clone()).collect();
    let reports = run_scenarios(&files, jobs)?;
    let mut rows: Vec<TieringRow> = runs
        .iter()
        .zip(&reports)
        .map(|(run, r)| TieringRow {
            trace: run.trace.clone(),
            vms: run.vms,
            config: run.config.clone(),
            exec_time_s: r.vms.values().map(|v| v.exec_time_s).fold(0.0, f64::max),
            normalized: 0.0,
            promotions: r.volumes.values().map(|v| v.promotions).sum(),
            demotions: r.volumes.values().map(|v| v.demotions).sum(),
            migrated_bytes: r.volumes.values().map(|v| v.migrated_bytes).sum(),
            scenario: run
                .path
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        })
        .collect();
    for i in 0..rows.len() {
        let base = rows
            .iter()
            .find(|b| b.trace == rows[i].trace && b.vms == 1 && b.config == "ssd")
            .map(|b| b.exec_time_s)
            .ok_or_else(|| {
                format!(
                    "{}: no {}-1vm-ssd.toml to normalize against",
                    dir.display(),
                    rows[i].trace
                )
            })?;
        rows[i].normalized = if base > 0.0 {
            rows[i].exec_time_s / base
        } else {
            0.0
        };
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_parse() {
        assert_eq!(
            parse_name(Path::new("x/wsrch-2vm-hot.toml")),
            Some(("wsrch".into(), 2, "hot".into()))
        );
        assert_eq!(parse_name(Path::new("wsrch-2vm-cold.toml")), None);
        assert_eq!(parse_name(Path::new("wsrch-xvm-hot.toml")), None);
        assert_eq!(parse_name(Path::new("wsrch-2vm-hot.json")), None);
    }
}
