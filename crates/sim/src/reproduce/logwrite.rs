//! Seed 002: IOzone-like random writes of a 6 GB file, record sizes 4 KB to 512 KB, with
//! the log-structured write path off and on, on the paper's two SSDs and on a disk.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{run_scenarios, scenario_files};

/// One run of the experiment.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LogwriteRow {
    pub device: String,
    pub record_bytes: u64,
    /// `on` or `off`.
    pub log: String,
    /// File bytes over the time to write them all and flush.
    pub mb_per_s: f64,
    /// On `on` rows: `mb_per_s` over that of the `off` row.
    pub speedup: Option<f64>,
    /// The speed-up seed 002 reports for this device and record size, where it does.
    pub paper_speedup: Option<f64>,
    /// Device bytes the log wrote per VM byte it took (cleaning included).
    pub log_write_amplification: Option<f64>,
    pub scenario: String,
}

/// `mtron-msd-sata3035-4k-on.toml` -> ("mtron-msd-sata3035", 4096, "on").
fn parse_name(path: &Path) -> Option<(String, u64, String)> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".toml")?;
    let (rest, log) = stem.rsplit_once('-')?;
    let (device, rec) = rest.rsplit_once('-')?;
    let kib: u64 = rec.strip_suffix('k')?.parse().ok()?;
    (log == "on" || log == "off").then(|| (device.to_string(), kib * 1024, log.to_string()))
}

/// Seed 002's figures: about 8x on the MTRON and 3x on the X25-M at 4 KB.
fn paper_speedup(device: &str, record_bytes: u64) -> Option<f64> {
    match (device, record_bytes) {
        ("mtron-msd-sata3035", 4096) => Some(8.0),
        ("intel-x25m-80g", 4096) => Some(3.0),
        _ => None,
    }
}

/// Every `{device}-{n}k-{on|off}.toml` in `dir`.
pub fn logwrite(dir: &Path, jobs: usize) -> Result<Vec<LogwriteRow>, String> {
    let mut runs = scenario_files(dir, parse_name, "<device>-<n>k-<on|off>.toml")?;
    // Device, record size, then off before on.
    runs.sort_by(|a, b| (&a.0.0, a.0.1, a.0.2 == "on").cmp(&(&b.0.0, b.0.1, b.0.2 == "on")));
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
        let speedup = if log == "on" {
            rows.iter()
                .find(|o| o.device == *device && o.record_bytes == *record_bytes && o.log == "off")
                .filter(|o| o.mb_per_s > 0.0)
                .map(|o| mb_per_s / o.mb_per_s)
        } else {
            None
        };
        rows.push(LogwriteRow {
            device: device.clone(),
            record_bytes: *record_bytes,
            log: log.clone(),
            mb_per_s,
            speedup,
            paper_speedup: if log == "on" {
                paper_speedup(device, *record_bytes)
            } else {
                None
            },
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
            parse_name(Path::new("x/mtron-msd-sata3035-4k-on.toml")),
            Some(("mtron-msd-sata3035".into(), 4096, "on".into()))
        );
        assert_eq!(
            parse_name(Path::new("intel-x25m-80g-512k-off.toml")),
            Some(("intel-x25m-80g".into(), 512 << 10, "off".into()))
        );
        assert_eq!(parse_name(Path::new("x-4k-maybe.toml")), None);
        assert_eq!(parse_name(Path::new("x-4m-on.toml")), None);
    }
}
