//! Seed 002: IOzone random writes of a 6 GB file, record sizes 4 KB to 512 KB, through the
//! guest's page cache and BitVisor's per-command cost (the scenarios' host profile), on
//! the paper's two SSDs and on a disk: with the log off (the paper's "BitVisor" bars),
//! in `bitvisor` mode (the paper's mechanism, its "conversion enabled" bars) and in
//! tiervisor's own gathering mode (what tiervisor adds; the paper has no such bars).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{run_scenarios, scenario_files};

/// The scenario's log: `off`, `bitvisor` or `gather`.
const LOGS: [&str; 3] = ["off", "bitvisor", "gather"];

/// One run of the experiment.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LogwriteRow {
    pub device: String,
    pub record_bytes: u64,
    /// `off`, `bitvisor` or `gather`.
    pub log: String,
    /// File bytes over the time to write them all and flush.
    pub mb_per_s: f64,
    /// The paper's MB/s for this bar, where it gives one (read off its figure: estimates).
    pub paper_mb_per_s: Option<f64>,
    /// On logging rows: `mb_per_s` over that of the `off` row.
    pub speedup: Option<f64>,
    /// The speed-up seed 002 reports for this device and record size (`bitvisor` rows).
    pub paper_speedup: Option<f64>,
    /// Device bytes the log wrote per VM byte it took (cleaning included).
    pub log_write_amplification: Option<f64>,
    pub scenario: String,
}

/// `mtron-msd-sata3035-4k-bitvisor.toml` -> ("mtron-msd-sata3035", 4096, "bitvisor").
fn parse_name(path: &Path) -> Option<(String, u64, String)> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".toml")?;
    let (rest, log) = stem.rsplit_once('-')?;
    let (device, rec) = rest.rsplit_once('-')?;
    let kib: u64 = rec.strip_suffix('k')?.parse().ok()?;
    LOGS.contains(&log)
        .then(|| (device.to_string(), kib * 1024, log.to_string()))
}

/// Seed 002's Figures 5 and 6 at 4 KB (the only record size its text gives a speed-up
/// for): MB/s of the "BitVisor" (log off) and "conversion enabled" bars, read off the
/// figures' axes (estimates: Figure 6's axis ends at 9 MB/s, Figure 5's at 30), and the
/// speed-ups its text states (about 8x and 3x).
pub fn paper_figure(device: &str, record_bytes: u64, log: &str) -> (Option<f64>, Option<f64>) {
    match (device, record_bytes, log) {
        ("mtron-msd-sata3035", 4096, "off") => (Some(1.1), None),
        ("mtron-msd-sata3035", 4096, "bitvisor") => (Some(8.5), Some(8.0)),
        ("intel-x25m-80g", 4096, "off") => (Some(9.0), None),
        ("intel-x25m-80g", 4096, "bitvisor") => (Some(27.5), Some(3.0)),
        _ => (None, None),
    }
}

/// Every `{device}-{n}k-{off|bitvisor|gather}.toml` in `dir`.
pub fn logwrite(dir: &Path, jobs: usize) -> Result<Vec<LogwriteRow>, String> {
    let mut runs = scenario_files(dir, parse_name, "<device>-<n>k-<off|bitvisor|gather>.toml")?;
    let order = |l: &str| LOGS.iter().position(|x| *x == l);
    // Device, record size, then off, bitvisor, gather.
    runs.sort_by(|a, b| (&a.0.0, a.0.1, order(&a.0.2)).cmp(&(&b.0.0, b.0.1, order(&b.0.2))));
    let files: Vec<PathBuf> = runs.iter().map(|r| r.1.clone()).collect();
    let reports = run_scenarios(&files, jobs)?;
    let mut rows: Vec<LogwriteRow> = Vec::new();
    for ((device, record_bytes, log), r) in runs.iter().map(|r| &r.0).zip(&reports) {
        let (bytes, secs) = r.vms.values().fold((0u64, 0f64), |(b, t), v| {
            (b + v.write_bytes, t.max(v.exec_time_s))
        });
        let mb_per_s = if secs > 0.0 {
            bytes as f64 / secs / 1e6
        } else {
            0.0
        };
        let speedup = if log != "off" {
            rows.iter()
                .find(|o| o.device == *device && o.record_bytes == *record_bytes && o.log == "off")
                .filter(|o| o.mb_per_s > 0.0)
                .map(|o| mb_per_s / o.mb_per_s)
        } else {
            None
        };
        let (paper_mb_per_s, paper_speedup) = paper_figure(device, *record_bytes, log);
        rows.push(LogwriteRow {
            device: device.clone(),
            record_bytes: *record_bytes,
            log: log.clone(),
            mb_per_s,
            paper_mb_per_s,
            speedup,
            paper_speedup,
            log_write_amplification: r
                .logs
                .values()
                .find(|l| l.user_bytes > 0)
                .map(|l| l.write_amplification),
            scenario: r.scenario.rsplit('/').next().unwrap_or("").to_string(),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_parse() {
        assert_eq!(
            parse_name(Path::new("x/mtron-msd-sata3035-4k-bitvisor.toml")),
            Some(("mtron-msd-sata3035".into(), 4096, "bitvisor".into()))
        );
        assert_eq!(
            parse_name(Path::new("intel-x25m-80g-512k-off.toml")),
            Some(("intel-x25m-80g".into(), 512 << 10, "off".into()))
        );
        assert_eq!(
            parse_name(Path::new("hitachi-7k1000c-8k-gather.toml")),
            Some(("hitachi-7k1000c".into(), 8 << 10, "gather".into()))
        );
        assert_eq!(parse_name(Path::new("x-4k-on.toml")), None);
        assert_eq!(parse_name(Path::new("x-4k-maybe.toml")), None);
        assert_eq!(parse_name(Path::new("x-4m-on.toml")), None);
    }
}
