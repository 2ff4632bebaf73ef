//! Paper experiments, run from the scenario files in `scenarios/`: each scenario is an
//! ordinary `tiervisor sim` input, and these modules run a set of them and tabulate the
//! figures the paper reports.

pub mod flush;
pub mod gaps;
mod logwrite;
pub mod migration;
pub mod migration_claims;
pub mod migration_figs;
pub mod migration_mix;
pub mod points;
mod scheduling;
mod tiering;

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use flush::{Check, FlushOptions, FlushResult, flush};
pub use logwrite::{LogwriteRow, logwrite};
pub use migration::{MigrationOptions, MigrationResult, migration};
pub use scheduling::{Measure, Ranking, SchedulingReport, SchedulingRow, scheduling};
pub use tiering::{
    SeededTarget, TieringRow, TieringTarget, targets_over_seeds, tiering, tiering_seeded,
    tiering_targets,
};

use crate::{RunOptions, Scenario, SimReport, Simulation};

/// The scenarios in `dir` whose names `parse` accepts, with what it made of them; an
/// error naming `pattern` if there are none.
fn scenario_files<K>(
    dir: &std::path::Path,
    parse: fn(&std::path::Path) -> Option<K>,
    pattern: &str,
) -> Result<Vec<(K, PathBuf)>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut runs = Vec::new();
    for e in entries {
        let path = e.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if let Some(key) = parse(&path) {
            runs.push((key, path));
        }
    }
    if runs.is_empty() {
        return Err(format!("{}: no scenarios named {pattern}", dir.display()));
    }
    Ok(runs)
}

/// Run `f` on each of `items` on up to `jobs` threads; results in the order of `items`.
fn run_parallel<T: Send, R: Send>(
    items: Vec<T>,
    jobs: usize,
    f: impl Fn(T) -> Result<R, String> + Sync,
) -> Result<Vec<R>, String> {
    let n = items.len();
    let queue = Mutex::new(items.into_iter().enumerate().collect::<Vec<_>>());
    let results: Mutex<Vec<Option<Result<R, String>>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, n.max(1)) {
            s.spawn(|| {
                loop {
                    let item = queue.lock().ok().and_then(|mut q| q.pop());
                    let Some((i, t)) = item else { break };
                    let r = f(t);
                    if let Ok(mut g) = results.lock() {
                        g[i] = Some(r);
                    }
                }
            });
        }
    });
    results
        .into_inner()
        .map_err(|_| "a simulation thread panicked".to_string())?
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("a simulation did not run".into())))
        .collect()
}

/// Run `files` on up to `jobs` threads; results in the order of `files`.
pub fn run_scenarios(files: &[PathBuf], jobs: usize) -> Result<Vec<SimReport>, String> {
    run_scenarios_with(files, jobs, &RunOptions::default())
}

/// [`run_scenarios`] with run options (a seed in place of each scenario's).
pub fn run_scenarios_with(
    files: &[PathBuf],
    jobs: usize,
    opts: &RunOptions,
) -> Result<Vec<SimReport>, String> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<SimReport, String>>>> =
        Mutex::new(vec![None; files.len()]);
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, files.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(f) = files.get(i) else { break };
                    let r = Scenario::load(f)
                        .map_err(|e| e.to_string())
                        .and_then(|sc| Simulation::new(sc, opts))
                        .and_then(|sim| sim.run())
                        .map_err(|e| format!("{}: {e}", f.display()));
                    if let Ok(mut g) = results.lock() {
                        g[i] = Some(r);
                    }
                }
            });
        }
    });
    results
        .into_inner()
        .map_err(|_| "a simulation thread panicked".to_string())?
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("a simulation did not run".into())))
        .collect()
}
