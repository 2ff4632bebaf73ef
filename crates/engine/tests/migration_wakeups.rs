//! Live storage migration (seed 004): a job waiting for something that ends outside a
//! device completion is still stepped. The engine steps its jobs after every device
//! completion and every tick; a request that ends in an admin command (a shard's loan
//! denied) ended with neither, and a job pausing its volume for the pivot waited for it
//! forever: DST seed 1032 with `copy_priority = equal` (at 652341a), a mirror job left
//! `Draining` behind a write that waited for a loan and failed with ENOSPC when it was
//! denied, a FLUSH parked behind the pause and no event left.

mod common;

use common::*;
use tiervisor_engine::jobs::migrate::{MigrationPhase, Scheme};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const VOL: &str = "thin";

#[test]
fn a_pause_waiting_for_a_write_denied_its_loan_ends() {
    assert_eq!(pause_after_a_denied_loan(None), None);
}

/// The injected `loan-answer-no-step` (the answer steps nothing) leaves the job paused.
#[test]
fn the_check_catches_a_loan_answer_that_steps_nothing() {
    assert_eq!(
        pause_after_a_denied_loan(Some(InjectedBug::LoanAnswerNoStep)),
        Some(MigrationPhase::Draining)
    );
}

/// A write waits for a loan while a mirror job pauses the volume for its pivot; the loan
/// is denied. The job's phase if it is still paused right after the answer (else the
/// volume is checked through the pivot and `None`).
fn pause_after_a_denied_loan(bug: Option<InjectedBug>) -> Option<MigrationPhase> {
    let mut r = Rig::with_bug(common::loaning_shard_config(), bug);
    let cb = r.engine.config().chunk_bytes;
    // Fill the HDD slice: past its low-water mark the shard asks for a loan
    // (`SpaceLow`), which this rig never answers.
    let mut c = 0;
    while free_chunks(&r)[HDD.0 as usize] > 0 {
        r.write(VOL, c * cb, &pattern(c as u8, 4096));
        c += 1;
    }
    assert!(
        r.events
            .iter()
            .any(|e| matches!(e, EngineEvent::SpaceLow { pool, .. } if *pool == HDD)),
        "no ask for space: {:?}",
        r.events
    );
    // A write to a new chunk finds no room while the ask is out: it waits for the answer.
    let w = r.submit(VOL, ReqKind::Write, c * cb, Some(&pattern(99, 4096)), 4096);
    assert!(
        r.take_done(w).is_none(),
        "the write should wait for the loan"
    );
    assert_eq!(r.engine.loan_waits().1, 1);
    // A mirror job copies everything and pauses the volume for its pivot, where it waits
    // for the write in flight.
    let mut p = job_params(Scheme::Mirror, SSD);
    p.granularity_bytes = cb;
    start_job(&mut r, VOL, p).unwrap();
    assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Draining));
    let f = r.submit(VOL, ReqKind::Flush, 0, None, 0);
    assert!(r.take_done(f).is_none(), "the volume is paused");
    // The driver answers: no shard has room. The write fails with ENOSPC, which is what
    // the pause waited for: the pivot goes on, with nothing else to wake the job.
    control(&mut r, Control::LoanDenied { pool: HDD }).unwrap();
    assert_eq!(r.take_done(w).map(|d| d.result), Some(Err(Errno::NoSpc)));
    if let Some(p @ MigrationPhase::Draining) = job_phase(&r, VOL) {
        return Some(p); // still waiting for the write that ended
    }
    finish_job(&mut r, VOL);
    assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done));
    assert_eq!(r.take_done(f).map(|d| d.result), Some(Ok(())));
    for k in 0..c {
        assert_eq!(
            r.read(VOL, k * cb, 4096),
            pattern(k as u8, 4096),
            "chunk {k}"
        );
    }
    r.engine.check_invariants().unwrap();
    None
}
