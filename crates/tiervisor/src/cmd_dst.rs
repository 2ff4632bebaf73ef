//! `tiervisor dst`: deterministic simulation testing.

use std::time::Instant;

use clap::Args;
use tiervisor_engine::InjectedBug;
use tiervisor_sim::dst::{Faults, run_range, shrink};

use crate::Failure;

#[derive(Args)]
pub struct DstArgs {
    /// Seed range, A..B (B excluded) or a single seed.
    #[arg(long, default_value = "0..200")]
    seeds: String,
    /// Steps (requests, completions, crashes) per seed.
    #[arg(long, default_value_t = 3000)]
    steps: u64,
    /// 0 none; 1 power loss and stalls; 2 and transient I/O errors; 3 and latent sector errors.
    #[arg(long, default_value_t = 3)]
    faults: u8,
    /// Threads (default: available cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Run a deliberately broken engine (to see the checker catch it).
    #[arg(long, hide = true)]
    bug: Option<String>,
}

fn parse_seeds(s: &str) -> Option<(u64, u64)> {
    match s.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            (a < b).then_some((a, b))
        }
        None => s.trim().parse::<u64>().ok().map(|a| (a, a + 1)),
    }
}

pub fn run(a: DstArgs) -> Result<(), Failure> {
    let (from, to) = parse_seeds(&a.seeds).ok_or_else(|| {
        Failure::input(format!(
            "--seeds {:?}: expected A..B with A < B, or one seed",
            a.seeds
        ))
    })?;
    if a.faults > 3 {
        return Err(Failure::input("--faults: expected 0 to 3"));
    }
    let bug = match &a.bug {
        Some(b) => Some(InjectedBug::parse(b).ok_or_else(|| {
            Failure::input(format!(
                "--bug {b:?}: expected one of {}",
                InjectedBug::all()
                    .iter()
                    .map(|b| b.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?),
        None => None,
    };
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let t = Instant::now();
    match run_range(from, to, a.steps, Faults::from_level(a.faults), bug, jobs) {
        Ok(s) => {
            println!(
                "dst: seeds {from}..{to} passed ({} steps each, faults {}) in {:.1} s: {} requests, {} reads checked ({} sectors), {} power losses, {} recoveries ({} after an orderly stop), {} injected device errors ({} ENOSPC in {} seeds, {} lasting spells, {} mounts waited for space), {} checkpoints, {} chunk moves ({} cache fills and evictions, {} background cache writebacks, {} quiet spells, {} remaps to a kept home, {} span copies to one, {} directed moves), {} log appends, {} segments cleaned ({} cleaner waits for its cap), longest scheduler wait {:.3} s (bound {} s), {} migrations started ({} pivoted, {} cancelled or failed, {} of tiered volumes, {} of thick volumes, {} of cache volumes, {} of logged volumes), {} writes buffered, {} tagged flushes, {} throttled operations, {} volumes created, {} resized ({} of them shrunk) and {} deleted while running ({} volumes moved down an index at a mount after a deletion before them), {} seeds sharded ({} shards in all; {} seeds moved space between shards: {} runs borrowed, {} given back by their borrowers ({} of them at once on a hint after a denial; {} seen free behind a used run, {} chunks, which only the last run's rule kept), {} returned to their donors (at a start or after a give-back), {} writes waited for a loan, {} seeds with a slow driver, {} loan answers during a pivot's pause; {} seeds moved budgets by demand: {} budget commands; {} seeds shared weighted pools' devices: {} share commands, {} setting a gate), {} seeds migration-heavy ({} power losses right after a FLUSH or a durable pivot), {} seeds with a queueing (NCQ) HDD ({} of them an array; {} commands served, {} ahead of an older one), {} seeds whose requests named processes for cfq, bfq or cats ({} requests)",
                a.steps,
                a.faults,
                t.elapsed().as_secs_f64(),
                s.requests,
                s.reads_checked,
                s.sectors_checked,
                s.crashes,
                s.recoveries,
                s.clean_stops,
                s.injected_errors,
                s.space_errors,
                s.space_seeds,
                s.space_spells,
                s.space_mounts,
                s.checkpoints,
                s.chunk_moves,
                s.cache_moves,
                s.cache_writebacks,
                s.idle_spells,
                s.clean_demotions,
                s.span_demotions,
                s.directed_moves,
                s.log_appends,
                s.segments_cleaned,
                s.cleaner_waits,
                s.sched_wait_max_ns as f64 / 1e9,
                tiervisor_sim::dst::SCHED_WAIT_BOUND_NS / 1_000_000_000,
                s.migrations,
                s.migration_pivots,
                s.migration_cancels,
                s.migrations_tiered,
                s.migrations_thick,
                s.migrations_cache,
                s.migrations_logged,
                s.buffered_writes,
                s.tagged_flushes,
                s.throttled_ops,
                s.volumes_created,
                s.volumes_resized,
                s.volumes_shrunk,
                s.volumes_deleted,
                s.volumes_moved_down,
                s.sharded_seeds,
                s.shards,
                s.loan_seeds,
                s.loans,
                s.given_back,
                s.given_back_on_hint,
                s.stuck_runs,
                s.stuck_chunks,
                s.loans_returned,
                s.loan_waits,
                s.slow_loan_seeds,
                s.pause_answers,
                s.budget_seeds,
                s.budget_steps,
                s.share_seeds,
                s.share_steps,
                s.gated_steps,
                s.probe_seeds,
                s.probe_crashes,
                s.ncq_seeds,
                s.array_seeds,
                s.ncq_served,
                s.ncq_reordered,
                s.context_seeds,
                s.context_requests
            );
            Ok(())
        }
        Err(f) => {
            let first = f.step;
            // A traced run prints everything: do not repeat it while shrinking.
            let short = if std::env::var_os("TIERVISOR_DST_TRACE").is_some() {
                f
            } else {
                shrink(f, a.steps, Faults::from_level(a.faults), bug)
            };
            let note = if short.step < first {
                format!(" (shrunk from {first} steps)")
            } else {
                String::new()
            };
            Err(Failure::run(format!("dst: {short}{note}")))
        }
    }
}
