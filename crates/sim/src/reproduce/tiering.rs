//! Seed 000, Figures 4-7: WebSearch and TPC-C on HDD only, SSD only, split and hot;
//! and (issue 17) the workloads where placement can matter, SPC-like and fio zipf, with
//! the oracles to measure `hot` against: the static placement and the dynamic one.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{run_scenarios_with, scenario_files};
use crate::RunOptions;

/// One run of seed 000's experiment (Figures 4-7).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TieringRow {
    pub trace: String,
    pub vms: u32,
    /// `hdd`, `ssd`, `split`, `hot`, `smq`, `bcache` (the two `cache` placements),
    /// `oracle` (static) or `oracle-dynamic`.
    pub config: String,
    /// Simulated time until the last VM finished its trace.
    pub exec_time_s: f64,
    /// `exec_time_s` over that of one VM on SSD only, for the same trace.
    pub normalized: f64,
    pub promotions: u64,
    pub demotions: u64,
    /// Demotions that were a remap to a kept home, with no copy (`[tiering] keep_home`).
    pub clean_demotions: u64,
    /// Dirty demotions to a kept home that copied only the span written since the
    /// promotion.
    pub span_demotions: u64,
    /// Tier migration's own I/O (it runs on the same simulated devices).
    pub migrated_bytes: u64,
    /// `hot`, `smq` and `bcache` rows with `split` and `oracle` beside them: the share of
    /// the oracle's gain over `split` that the row gets, (split − it) / (split − oracle),
    /// in execution time. Issue 17's target is judged on this one.
    pub gain_share: Option<f64>,
    /// The same against the dynamic oracle: (split − it) / (split − oracle-dynamic).
    pub gain_share_dynamic: Option<f64>,
    pub scenario: String,
}

/// One of issue 17's targets, judged on the rows.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TieringTarget {
    pub workload: String,
    pub vms: u32,
    /// What is compared, e.g. "hot gain share" or "SSD only speed-up over hot".
    pub what: String,
    pub ours: f64,
    pub target: f64,
    /// True: ours must be at least the target; false: at most.
    pub at_least: bool,
    pub met: bool,
}

const CONFIGS: [&str; 8] = [
    "hdd",
    "ssd",
    "split",
    "hot",
    "smq",
    "bcache",
    "oracle",
    "oracle-dynamic",
];
/// The dynamic placements a gain share is computed for; the last two are `cache`.
const DYNAMIC: [&str; 3] = ["hot", "smq", "bcache"];
const TRACES: [&str; 7] = [
    "wsrch",
    "tpcc",
    "websearch",
    "financial",
    "zipf0.8",
    "zipf1.0",
    "zipf1.2",
];
/// Issue 17: `hot` gets at least this share of the oracle's gain on generated workloads.
const GAIN_SHARE_TARGET: f64 = 0.7;
/// Seed 000's 50/50 figures: SSD only at most this much faster (one VM).
const PAPER_SSD_OVER_MIXED: [(&str, f64); 2] = [("websearch", 2.2), ("financial", 1.3)];

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
    tiering_seeded(dir, jobs, None)
}

/// [`tiering`] with every scenario run on `seed` instead of its own.
pub fn tiering_seeded(
    dir: &Path,
    jobs: usize,
    seed: Option<u64>,
) -> Result<Vec<TieringRow>, String> {
    struct Run {
        order: (usize, u32, usize),
        trace: String,
        vms: u32,
        config: String,
        path: PathBuf,
    }
    let found = scenario_files(
        dir,
        parse_name,
        "<trace>-<n>vm-<hdd|ssd|split|hot|smq|bcache|oracle|oracle-dynamic>.toml",
    )?;
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
    let opts = RunOptions {
        seed,
        ..RunOptions::default()
    };
    let reports = run_scenarios_with(&files, jobs, &opts)?;
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
            clean_demotions: r.volumes.values().map(|v| v.clean_demotions).sum(),
            span_demotions: r.volumes.values().map(|v| v.span_demotions).sum(),
            migrated_bytes: r.volumes.values().map(|v| v.migrated_bytes).sum(),
            gain_share: None,
            gain_share_dynamic: None,
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
    let time = |rows: &[TieringRow], t: &str, n: u32, c: &str| {
        rows.iter()
            .find(|r| r.trace == t && r.vms == n && r.config == c)
            .map(|r| r.exec_time_s)
    };
    for i in 0..rows.len() {
        if !DYNAMIC.contains(&rows[i].config.as_str()) {
            continue;
        }
        let (t, n) = (rows[i].trace.clone(), rows[i].vms);
        let x = rows[i].exec_time_s;
        let share = |oracle: &str| match (time(&rows, &t, n, "split"), time(&rows, &t, n, oracle)) {
            (Some(split), Some(o)) if split > o => Some((split - x) / (split - o)),
            _ => None,
        };
        let (g, gd) = (share("oracle"), share("oracle-dynamic"));
        rows[i].gain_share = g;
        rows[i].gain_share_dynamic = gd;
    }
    Ok(rows)
}

/// Issue 17's targets on the rows that have them: `hot`'s gain share on every generated
/// workload, SSD only's speed-up over `hot` with one VM on the SPC-like ones, and `hot`
/// no slower than the better cache mode wherever both cache modes ran.
pub fn tiering_targets(rows: &[TieringRow]) -> Vec<TieringTarget> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.config == "hot") {
        let cache_time = |c: &str| {
            rows.iter()
                .find(|x| x.trace == r.trace && x.vms == r.vms && x.config == c)
                .map(|x| x.exec_time_s)
        };
        if let (Some(smq), Some(bcache)) = (cache_time("smq"), cache_time("bcache")) {
            let best = smq.min(bcache);
            if best > 0.0 {
                let x = r.exec_time_s / best;
                out.push(TieringTarget {
                    workload: r.trace.clone(),
                    vms: r.vms,
                    what: "hot time over the better cache mode's".into(),
                    ours: x,
                    target: 1.0,
                    at_least: false,
                    met: x <= 1.0,
                });
            }
        }
        if let Some(g) = r.gain_share {
            out.push(TieringTarget {
                workload: r.trace.clone(),
                vms: r.vms,
                what: "hot gain share (split - hot) / (split - oracle)".into(),
                ours: g,
                target: GAIN_SHARE_TARGET,
                at_least: true,
                met: g >= GAIN_SHARE_TARGET,
            });
        }
        let paper = PAPER_SSD_OVER_MIXED.iter().find(|(t, _)| *t == r.trace);
        let ssd = rows
            .iter()
            .find(|s| s.trace == r.trace && s.vms == r.vms && s.config == "ssd");
        if let (Some((_, paper)), Some(ssd), 1) = (paper, ssd, r.vms)
            && ssd.exec_time_s > 0.0
        {
            let x = r.exec_time_s / ssd.exec_time_s;
            out.push(TieringTarget {
                workload: r.trace.clone(),
                vms: r.vms,
                what: "SSD only speed-up over hot (paper's 50/50)".into(),
                ours: x,
                target: *paper,
                at_least: false,
                met: x <= *paper,
            });
        }
    }
    out
}

/// One of issue 17's targets judged over several seeds: one run decides little where a
/// row's time swings with the seed (the generated workloads' draws, the placement's
/// timing), so the verdict is the median's, with every seed's value beside it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SeededTarget {
    pub workload: String,
    pub vms: u32,
    pub what: String,
    pub target: f64,
    pub at_least: bool,
    /// The seeds, in the order run.
    pub seeds: Vec<u64>,
    /// `ours` on each seed, in the order of `seeds`.
    pub per_seed: Vec<f64>,
    /// The median of `per_seed` (the mean of the middle two for an even count).
    pub median: f64,
    /// Seeds on which the target was met.
    pub met_on: usize,
    /// The median meets the target.
    pub met: bool,
}

/// Judge each target over the runs of `seeds` (`per_seed[i]` the targets of seed `i`).
/// A target missing from some seed's run (a row that did not yield it) is judged on the
/// seeds that have it.
pub fn targets_over_seeds(seeds: &[u64], per_seed: &[Vec<TieringTarget>]) -> Vec<SeededTarget> {
    let mut out: Vec<SeededTarget> = Vec::new();
    for (&seed, targets) in seeds.iter().zip(per_seed) {
        for t in targets {
            let i = match out
                .iter()
                .position(|s| s.workload == t.workload && s.vms == t.vms && s.what == t.what)
            {
                Some(i) => i,
                None => {
                    out.push(SeededTarget {
                        workload: t.workload.clone(),
                        vms: t.vms,
                        what: t.what.clone(),
                        target: t.target,
                        at_least: t.at_least,
                        seeds: Vec::new(),
                        per_seed: Vec::new(),
                        median: 0.0,
                        met_on: 0,
                        met: false,
                    });
                    out.len() - 1
                }
            };
            let s = &mut out[i];
            s.seeds.push(seed);
            s.per_seed.push(t.ours);
            s.met_on += usize::from(t.met);
        }
    }
    for s in &mut out {
        let mut v = s.per_seed.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        s.median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        s.met = if s.at_least {
            s.median >= s.target
        } else {
            s.median <= s.target
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(trace: &str, config: &str, t: f64) -> TieringRow {
        TieringRow {
            trace: trace.into(),
            vms: 1,
            config: config.into(),
            exec_time_s: t,
            normalized: 0.0,
            promotions: 0,
            demotions: 0,
            clean_demotions: 0,
            span_demotions: 0,
            migrated_bytes: 0,
            gain_share: None,
            gain_share_dynamic: None,
            scenario: String::new(),
        }
    }

    #[test]
    fn targets_are_judged_on_their_side_of_the_bound() {
        let mut hot = row("websearch", "hot", 30.0);
        hot.gain_share = Some(0.69);
        let rows = vec![row("websearch", "ssd", 10.0), hot];
        let t = tiering_targets(&rows);
        assert_eq!(t.len(), 2);
        assert!(!t[0].met && t[0].at_least && t[0].target == 0.7);
        assert!(!t[1].met && (t[1].ours - 3.0).abs() < 1e-9 && t[1].target == 2.2);
        let mut hot = row("websearch", "hot", 20.0);
        hot.gain_share = Some(0.7);
        let t = tiering_targets(&[row("websearch", "ssd", 10.0), hot.clone()]);
        assert!(t.iter().all(|t| t.met), "{t:?}");
        // With both cache modes: hot is judged against the faster one.
        let rows = [
            row("websearch", "smq", 25.0),
            row("websearch", "bcache", 19.0),
            hot,
        ];
        let t = tiering_targets(&rows);
        let c = t.iter().find(|t| t.what.contains("cache")).unwrap();
        assert!(!c.met && (c.ours - 20.0 / 19.0).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn a_target_over_seeds_is_judged_on_its_median() {
        let t = |ours: f64, at_least: bool| TieringTarget {
            workload: "zipf1.2".into(),
            vms: 2,
            what: "hot gain share".into(),
            ours,
            target: 0.7,
            at_least,
            met: if at_least { ours >= 0.7 } else { ours <= 0.7 },
        };
        // Met on two seeds of three, so the median (0.72) meets it though seed 1 did not.
        let runs = vec![vec![t(0.69, true)], vec![t(0.72, true)], vec![t(0.9, true)]];
        let s = targets_over_seeds(&[1, 2, 3], &runs);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].met_on, s[0].met), (2, true));
        assert!((s[0].median - 0.72).abs() < 1e-12);
        assert_eq!(s[0].per_seed, vec![0.69, 0.72, 0.9]);
        // An even count takes the mean of the middle two, and "at most" is judged below.
        let runs = vec![vec![t(0.6, false)], vec![t(0.9, false)]];
        let s = targets_over_seeds(&[4, 5], &runs);
        assert!((s[0].median - 0.75).abs() < 1e-12);
        assert_eq!((s[0].met_on, s[0].met), (1, false));
        // Different targets stay apart.
        let mut other = t(0.5, true);
        other.vms = 3;
        let s = targets_over_seeds(&[1], &[vec![t(0.8, true), other]]);
        assert_eq!(s.len(), 2);
        assert!(s[0].met && !s[1].met);
    }

    #[test]
    fn scenario_names_parse() {
        assert_eq!(
            parse_name(Path::new("x/wsrch-2vm-hot.toml")),
            Some(("wsrch".into(), 2, "hot".into()))
        );
        assert_eq!(
            parse_name(Path::new("zipf1.2-1vm-oracle.toml")),
            Some(("zipf1.2".into(), 1, "oracle".into()))
        );
        assert_eq!(
            parse_name(Path::new("zipf1.2-4vm-oracle-dynamic.toml")),
            Some(("zipf1.2".into(), 4, "oracle-dynamic".into()))
        );
        assert_eq!(
            parse_name(Path::new("zipf1.0-3vm-bcache.toml")),
            Some(("zipf1.0".into(), 3, "bcache".into()))
        );
        assert_eq!(parse_name(Path::new("wsrch-2vm-cold.toml")), None);
        assert_eq!(parse_name(Path::new("wsrch-xvm-hot.toml")), None);
        assert_eq!(parse_name(Path::new("wsrch-2vm-hot.json")), None);
    }
}
