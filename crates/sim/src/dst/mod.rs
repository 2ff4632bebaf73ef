//! Deterministic simulation testing: the whole engine (journal, recovery and all) on
//! data-carrying simulated devices with power loss and device faults, every read and every
//! recovery checked against reference disks. Same seed, same run.

mod create;
mod delete;
mod device;
mod directed;
mod idle;
mod ncq;
mod pattern;
mod probe;
mod reference;
mod release;
mod resize;
mod runner;
mod space;
mod status;

pub use device::Faults;
pub use ncq::ArrayShape;
pub use runner::{DstConfig, DstFailure, DstStats, SCHED_WAIT_BOUND_NS, run_seed};

/// The array seed `seed`'s HDD pool is, if any (`ncq.rs`): its drives queue (NCQ) and it
/// drew an array.
pub fn hdd_array(seed: u64) -> Option<ArrayShape> {
    ncq::NcqDrive::draw(seed).and(ncq::NcqDrive::draw_array(seed))
}

/// Run seeds `[from, to)` on `jobs` threads; stops at the first failure (lowest seed).
pub fn run_range(
    from: u64,
    to: u64,
    steps: u64,
    faults: Faults,
    bug: Option<tiervisor_engine::InjectedBug>,
    jobs: usize,
) -> Result<DstStats, DstFailure> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let next = AtomicU64::new(from);
    let stop = AtomicBool::new(false);
    let total = Mutex::new(DstStats::default());
    let failures: Mutex<Vec<DstFailure>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= to {
                        break;
                    }
                    match run_seed(&DstConfig {
                        seed,
                        steps,
                        faults,
                        bug,
                    }) {
                        Ok(st) => {
                            let mut t = total.lock().unwrap_or_else(|e| e.into_inner());
                            t.requests += st.requests;
                            t.reads_checked += st.reads_checked;
                            t.sectors_checked += st.sectors_checked;
                            t.crashes += st.crashes;
                            t.recoveries += st.recoveries;
                            t.clean_stops += st.clean_stops;
                            t.injected_errors += st.injected_errors;
                            t.space_seeds += st.space_seeds;
                            t.space_errors += st.space_errors;
                            t.space_spells += st.space_spells;
                            t.space_mounts += st.space_mounts;
                            t.checkpoints += st.checkpoints;
                            t.chunk_moves += st.chunk_moves;
                            t.cache_moves += st.cache_moves;
                            t.clean_demotions += st.clean_demotions;
                            t.span_demotions += st.span_demotions;
                            t.directed_moves += st.directed_moves;
                            t.cache_writebacks += st.cache_writebacks;
                            t.idle_spells += st.idle_spells;
                            t.log_appends += st.log_appends;
                            t.segments_cleaned += st.segments_cleaned;
                            t.cleaner_waits += st.cleaner_waits;
                            t.sched_wait_max_ns = t.sched_wait_max_ns.max(st.sched_wait_max_ns);
                            t.migrations += st.migrations;
                            t.migration_pivots += st.migration_pivots;
                            t.migration_cancels += st.migration_cancels;
                            t.migrations_tiered += st.migrations_tiered;
                            t.migrations_thick += st.migrations_thick;
                            t.migrations_cache += st.migrations_cache;
                            t.migrations_logged += st.migrations_logged;
                            t.buffered_writes += st.buffered_writes;
                            t.tagged_flushes += st.tagged_flushes;
                            t.throttled_ops += st.throttled_ops;
                            t.volumes_created += st.volumes_created;
                            t.sharded_seeds += st.sharded_seeds;
                            t.shards += st.shards;
                            t.loan_seeds += st.loan_seeds;
                            t.loans += st.loans;
                            t.loans_returned += st.loans_returned;
                            t.given_back += st.given_back;
                            t.given_back_on_hint += st.given_back_on_hint;
                            t.stuck_runs += st.stuck_runs;
                            t.stuck_chunks += st.stuck_chunks;
                            t.loan_waits += st.loan_waits;
                            t.slow_loan_seeds += st.slow_loan_seeds;
                            t.pause_answers += st.pause_answers;
                            t.budget_seeds += st.budget_seeds;
                            t.budget_steps += st.budget_steps;
                            t.share_seeds += st.share_seeds;
                            t.share_steps += st.share_steps;
                            t.gated_steps += st.gated_steps;
                            t.volumes_resized += st.volumes_resized;
                            t.volumes_shrunk += st.volumes_shrunk;
                            t.volumes_deleted += st.volumes_deleted;
                            t.volumes_moved_down += st.volumes_moved_down;
                            t.probe_seeds += st.probe_seeds;
                            t.probe_crashes += st.probe_crashes;
                            t.ncq_seeds += st.ncq_seeds;
                            t.ncq_served += st.ncq_served;
                            t.ncq_reordered += st.ncq_reordered;
                            t.array_seeds += st.array_seeds;
                            t.context_seeds += st.context_seeds;
                            t.context_requests += st.context_requests;
                        }
                        Err(f) => {
                            failures.lock().unwrap_or_else(|e| e.into_inner()).push(f);
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let mut f = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    f.sort_by_key(|x| x.seed);
    match f.into_iter().next() {
        Some(x) => Err(x),
        None => Ok(total.into_inner().unwrap_or_else(|e| e.into_inner())),
    }
}

/// Find a shorter run that still fails: the smallest step count (by bisection) for which
/// the same seed fails. Returns that failure (or the original if nothing shorter fails).
pub fn shrink(
    f: DstFailure,
    steps: u64,
    faults: Faults,
    bug: Option<tiervisor_engine::InjectedBug>,
) -> DstFailure {
    let fails = |n: u64| {
        run_seed(&DstConfig {
            seed: f.seed,
            steps: n,
            faults,
            bug,
        })
        .err()
    };
    let (mut lo, mut hi) = (1u64, f.step.clamp(1, steps));
    let mut best = match fails(hi) {
        Some(x) => x,
        None => return f,
    };
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match fails(mid) {
            Some(x) => {
                best = x;
                hi = mid;
            }
            None => lo = mid + 1,
        }
    }
    best
}
