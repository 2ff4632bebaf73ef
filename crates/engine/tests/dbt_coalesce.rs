//! DBT copies a dirty chunk whole (one read and one write of the chunk) once its dirty
//! blocks form `coalesce_runs` runs or more, in its dirty passes and the pause's final
//! copy; fewer runs are copied one by one, as before. Into an HDD each run is a write that
//! pays a rotation, so a chunk dirtied all over costs many rotations where one sequential
//! chunk write would do (seed 004's Table 3, SSD to HDD). The volume reads back as its
//! reference after the pivot and after a power loss at each step of the final copy.

mod common;

use std::collections::BTreeMap;

use common::*;
use tiervisor_engine::jobs::migrate::{MigrationParams, MigrationPhase, Scheme};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const VOL: &str = "thin";
const CHUNKS: u64 = 6;
/// Dirty runs written to each chunk once its first copy is done (chunk index order).
const RUNS: [u64; CHUNKS as usize] = [1, 2, 3, 4, 6, 9];

/// Deep device queues, so every copy in flight reaches the (held) device.
fn setup(bug: Option<InjectedBug>) -> (Rig, Vec<u8>) {
    let mut cfg = config(1 << 20);
    for p in &mut cfg.pools {
        p.queue_depth = 32;
    }
    let mut r = Rig::with_bug(cfg, bug);
    let reference = fill_ref(&mut r, VOL, CHUNKS, 0..CHUNKS);
    r.flush(VOL);
    (r, reference)
}

fn status(r: &Rig) -> jobs::migrate::MigrationStatus {
    let v = r.engine.volume_id(VOL).unwrap();
    r.engine.migration_status(v).unwrap()
}

/// A DBT job of one pass at 4 KiB tracking with `coalesce_runs`; each chunk, once its first
/// copy is done, gets `RUNS` separate 4 KiB writes and a FLUSH. Runs until the pause's final
/// copy begins, by when every FLUSH has completed; returns the rig and its reference.
fn to_the_final_copy(coalesce_runs: u32, bug: Option<InjectedBug>) -> (Rig, Vec<u8>) {
    let (mut r, mut reference) = setup(bug);
    r.hold = true;
    let p = MigrationParams {
        granularity_bytes: 4096,
        // One read and one write per whole chunk.
        buffer_bytes: MIB,
        dbt_max_passes: 1,
        coalesce_runs: Some(coalesce_runs),
        ..job_params(Scheme::Dbt, SSD)
    };
    start_job(&mut r, VOL, p).unwrap();
    let mut dirtied = 0;
    let mut flushes = Vec::new();
    while status(&r).phase == (MigrationPhase::Copying { pass: 1 }) {
        assert!(r.release_one().is_some(), "pass 1 stuck");
        while dirtied < status(&r).stats.chunks_copied
            && status(&r).phase == (MigrationPhase::Copying { pass: 1 })
        {
            // Not held: the writes land now (the chunk's copy is done).
            r.hold = false;
            for j in 0..RUNS[dirtied as usize] {
                let off = dirtied * MIB + j * (64 << 10) + 8192;
                write_ref(&mut r, VOL, &mut reference, off, 40 + j as u8, 4096);
            }
            r.hold = true;
            flushes.push(r.submit(VOL, ReqKind::Flush, 0, None, 0));
            dirtied += 1;
        }
    }
    assert_eq!(dirtied, CHUNKS, "every chunk was written after its copy");
    while status(&r).phase != MigrationPhase::FinalCopy {
        assert!(r.release_one().is_some(), "no final copy");
    }
    for id in flushes {
        let done = r
            .take_done(id)
            .expect("a FLUSH made before the pause completed");
        assert!(done.result.is_ok(), "{done:?}");
    }
    (r, reference)
}

/// The final copy's reads of the source, per source chunk (by device MiB): their lengths.
fn final_copy_reads(r: &mut Rig) -> BTreeMap<u64, Vec<u64>> {
    let mut reads: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    while status(r).phase == MigrationPhase::FinalCopy {
        let op = r.release_one().expect("final copy stuck");
        if op.pool == HDD && op.kind == DevKind::Read && op.class == IoClass::Migration {
            reads
                .entry(op.offset_bytes / MIB)
                .or_default()
                .push(op.len_bytes);
        }
    }
    reads
}

#[test]
fn a_chunk_with_coalesce_runs_dirty_runs_or_more_is_copied_whole() {
    for coalesce_runs in [0u32, 1, 3, 7] {
        let (mut r, reference) = to_the_final_copy(coalesce_runs, None);
        let reads = final_copy_reads(&mut r);
        let mut lens: Vec<Vec<u64>> = reads.into_values().collect();
        lens.sort_by_key(|l| (l.len(), l.first().copied()));
        let mut want: Vec<Vec<u64>> = RUNS
            .iter()
            .map(|&n| {
                if coalesce_runs > 0 && n >= u64::from(coalesce_runs) {
                    vec![MIB]
                } else {
                    vec![4096; n as usize]
                }
            })
            .collect();
        want.sort_by_key(|l| (l.len(), l.first().copied()));
        assert_eq!(lens, want, "coalesce_runs {coalesce_runs}");
        r.hold = false;
        while r.release_one().is_some() {}
        finish_job(&mut r, VOL);
        let st = status(&r);
        assert_eq!(
            st.phase,
            MigrationPhase::Done,
            "coalesce_runs {coalesce_runs}"
        );
        let whole = RUNS
            .iter()
            .filter(|&&n| coalesce_runs > 0 && n >= u64::from(coalesce_runs));
        assert_eq!(st.stats.whole_chunk_copies, whole.clone().count() as u64);
        let recopied: u64 = RUNS
            .iter()
            .map(|&n| {
                if coalesce_runs > 0 && n >= u64::from(coalesce_runs) {
                    MIB
                } else {
                    n * 4096
                }
            })
            .sum();
        assert_eq!(
            st.stats.redundant_bytes, recopied,
            "coalesce_runs {coalesce_runs}"
        );
        check_ref(&mut r, VOL, &reference, "after the pivot");
        r.crash_and_mount();
        check_ref(&mut r, VOL, &reference, "after a crash");
        r.engine.check_invariants().unwrap();
    }
}

/// `dbt-coalesce-skips-last-run`: a chunk copied whole is copied only up to the start of
/// its last dirty run, so the destination keeps that run's old data: the reference check
/// after the pivot catches it.
#[test]
fn the_checks_catch_a_whole_chunk_copy_that_skips_the_last_run() {
    let bug = InjectedBug::DbtCoalesceSkipsLastRun;
    let caught = std::panic::catch_unwind(|| {
        let (mut r, reference) = to_the_final_copy(3, Some(bug));
        r.hold = false;
        while r.release_one().is_some() {}
        finish_job(&mut r, VOL);
        check_ref(&mut r, VOL, &reference, "after the pivot");
    });
    let Err(e) = caught else {
        panic!("{} not caught", bug.name());
    };
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("after the pivot: first difference"), "{msg}");
}

/// A power loss at each step of a final copy made of whole-chunk copies (the devices'
/// caches lose every write not flushed) mounts with every flushed write, and the job,
/// resumed from the volume table with its `coalesce_runs`, ends on the destination with
/// the same data.
#[test]
fn a_power_loss_at_each_step_of_a_whole_chunk_final_copy_keeps_every_flushed_write() {
    let mut k = 0;
    loop {
        let (mut r, reference) = to_the_final_copy(1, None);
        r.volatile = true;
        let mut released = 0;
        while released < k && status(&r).phase == MigrationPhase::FinalCopy {
            r.release_one().expect("final copy stuck");
            released += 1;
        }
        let in_final_copy = status(&r).phase == MigrationPhase::FinalCopy;
        r.power_loss();
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("after a power loss at step {k}"),
        );
        let v = r.engine.volume_id(VOL).unwrap();
        let st = r.engine.migration_status(v).expect("the job resumed");
        assert_eq!(
            st.coalesce_runs, 1,
            "step {k}: the resumed job's coalescing"
        );
        finish_job(&mut r, VOL);
        assert_eq!(status(&r).phase, MigrationPhase::Done, "step {k}");
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("step {k}: after the resumed job"),
        );
        assert!(
            (0..CHUNKS).all(|c| r.engine.chunk_location(v, c).is_some_and(|(p, _)| p == SSD)),
            "step {k}: not every chunk on the destination"
        );
        r.engine.check_invariants().unwrap();
        if !in_final_copy {
            break;
        }
        k += 1;
    }
    // Every whole-chunk copy (six reads and six writes) had a power loss in its flight.
    assert!(k >= 12, "the final copy had {k} operations");
}
