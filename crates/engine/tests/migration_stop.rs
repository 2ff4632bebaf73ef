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

/// A healthy orderly stop with an unthrottled job of scheme `s` under way (a chunk copied,
/// a guest write in the copy's wake, FLUSHed): the job issues no byte more to the
/// destination than it had when the stop began (the copies in flight finish), and is
/// still in its copy phase when the engine has stopped; the volume mounts with its data
/// and the resumed job reaches Done with the data intact.
fn stop_during_a_job(s: Scheme) {
    let mut r = Rig::new(config(1 << 20));
    let mut reference = fill_ref(&mut r, VOL, CHUNKS, 0..CHUNKS);
    r.flush(VOL);
    r.hold = true;
    start_job(&mut r, VOL, job_params(s, SSD)).unwrap();
    let v = r.engine.volume_id(VOL).unwrap();
    let status = |r: &Rig| r.engine.migration_status(v).unwrap();
    while status(&r).stats.chunks_copied < 1 {
        r.release_one().expect("the job's copy");
    }
    // A guest write to a chunk not yet copied (LR sends it to the destination), and a
    // FLUSH of it, while the copy goes on.
    let d = pattern(77, 8192);
    let off = 4 * (1 << 20) + 4096;
    let w = r.submit(VOL, ReqKind::Write, off, Some(&d), d.len() as u64);
    while r.take_done(w).is_none() {
        r.release_one().expect("the write");
    }
    reference[off as usize..off as usize + d.len()].copy_from_slice(&d);
    let f = r.submit(VOL, ReqKind::Flush, 0, None, 0);
    let flushed = loop {
        if let Some(c) = r.take_done(f) {
            break c;
        }
        r.release_one().expect("the FLUSH");
    };
    assert_eq!(flushed.result, Ok(()));
    assert!(
        matches!(status(&r).phase, MigrationPhase::Copying { .. }),
        "{s:?}: the copy is over already: {:?}",
        status(&r)
    );
    let at_stop_begin = status(&r).stats.copied_bytes;
    let mut out = Outputs::default();
    r.engine.begin_shutdown(r.now, &mut out);
    r.drain(out);
    r.hold = false;
    for _ in 0..1000 {
        if r.engine.state() == &EngineState::Stopped {
            break;
        }
        while r.release_one().is_some() {}
        r.tick(10_000_000);
    }
    assert_eq!(r.engine.state(), &EngineState::Stopped, "{:?}", r.events);
    // A driver may tick a stopped engine: the job must not run on.
    r.tick(1_000_000_000);
    let (at_stopped, phase) = (status(&r).stats.copied_bytes, job_phase(&r, VOL));
    assert_eq!(
        at_stopped, at_stop_begin,
        "{s:?}: bytes issued to the destination: {at_stop_begin} when the stop began, {at_stopped} once stopped (phase {phase:?})"
    );
    assert!(
        matches!(phase, Some(MigrationPhase::Copying { .. })),
        "{s:?}: stopped in {phase:?}"
    );
    // The next start: the volume holds its data; the job resumes and finishes.
    r.crash_and_mount();
    check_ref(&mut r, VOL, &reference, &format!("{s:?} after the mount"));
    assert!(
        r.events
            .iter()
            .any(|e| matches!(e, EngineEvent::Warning { message }
            if message.contains("resumed its migration"))),
        "{s:?}: the job did not resume: {:?}",
        r.events
    );
    finish_job(&mut r, VOL);
    assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done), "{s:?}");
    check_ref(
        &mut r,
        VOL,
        &reference,
        &format!("{s:?} after the resumed job"),
    );
    r.engine.check_invariants().unwrap();
}

/// An orderly stop freezes a running job, which resumes at the next mount. Before, an
/// unthrottled job copied up to its pivot (and pivoted) before the engine stopped.
#[test]
fn an_orderly_stop_freezes_a_running_job_which_resumes_at_the_mount() {
    for s in [
        Scheme::Dbt,
        Scheme::Mirror,
        Scheme::Lr,
        Scheme::Slr,
        Scheme::Aio,
    ] {
        stop_during_a_job(s);
    }
}
