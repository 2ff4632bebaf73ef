//! Live storage migration (seed 004) at an orderly stop whose final commit fails: the
//! volume's journal is abandoned (`Journal::abandon`, nothing more of it is recorded in
//! this run), so its job starts no more copies. It used to go on copying the rest of the
//! image, every switch of which was dropped, holding the stop up (DST seed 1009 at
//! `--faults 2`: an LR job went on switching chunks after the stop's final commit failed).

mod common;

use common::*;
use tiervisor_engine::jobs::migrate::{MigrationPhase, Scheme};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const VOL: &str = "thin";
const CHUNKS: u64 = 6;

/// An unthrottled LR job is stopped with one chunk copied; the final commit's metadata
/// writes fail. Returns (chunks copied when the commit failed, chunks copied when the
/// engine stopped), after checking that the volume mounts with its data and the job
/// resumes and finishes.
fn copies_after_a_failed_final_commit() -> (u64, u64) {
    let mut r = Rig::new(config(1 << 20));
    let reference = fill_ref(&mut r, VOL, CHUNKS, 0..CHUNKS);
    r.flush(VOL);
    r.hold = true;
    start_job(&mut r, VOL, job_params(Scheme::Lr, SSD)).unwrap();
    // Chunk 0's first piece is read and written; the copy is under way.
    for _ in 0..3 {
        r.release_one().expect("the job's copy");
    }
    let v = r.engine.volume_id(VOL).unwrap();
    let copied = |r: &Rig| r.engine.migration_status(v).unwrap().stats.chunks_copied;
    r.fail_write_if = Some(Box::new(|op: &DeviceOp| {
        (op.class == IoClass::Metadata).then_some(Errno::Io)
    }));
    let mut out = Outputs::default();
    r.engine.begin_shutdown(r.now, &mut out);
    r.drain(out);
    let failed = |r: &Rig| {
        r.events
            .iter()
            .any(|e| matches!(e, EngineEvent::CommitFailed { volume, .. } if volume == VOL))
    };
    while !failed(&r) {
        r.release_one().expect("the final commit never failed");
    }
    assert!(r.engine.lost_at_stop().iter().any(|n| n == VOL));
    let at_failure = copied(&r);
    assert!(at_failure < CHUNKS, "the copy is over already");
    // The devices work again; everything in flight completes.
    r.fail_write_if = None;
    r.hold = false;
    for _ in 0..100 {
        if r.engine.state() == &EngineState::Stopped {
            break;
        }
        while r.release_one().is_some() {}
        r.tick(100_000_000);
    }
    assert_eq!(r.engine.state(), &EngineState::Stopped, "{:?}", r.events);
    let at_stop = copied(&r);
    // Mounted again, the volume holds its data and the job resumes from what is durable.
    r.crash_and_mount();
    check_ref(&mut r, VOL, &reference, "after the mount");
    finish_job(&mut r, VOL);
    assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done));
    check_ref(&mut r, VOL, &reference, "after the resumed job");
    r.engine.check_invariants().unwrap();
    (at_failure, at_stop)
}

/// The copy in flight at the failure may finish (pass 1 copies one chunk at a time); no
/// other starts. Before the fix every chunk was copied.
#[test]
fn a_job_starts_no_copy_once_its_journal_is_abandoned() {
    let (at_failure, at_stop) = copies_after_a_failed_final_commit();
    assert!(
        at_stop <= at_failure + 1,
        "chunks copied: {at_failure} when the final commit failed, {at_stop} at the stop"
    );
}
