//! A volume deletion waits for its volume to be quiet (`delete.rs`); when the last thing
//! it waited for ends outside a device completion (a write that waited for a shard's loan
//! of space, denied in an admin command), the answer steps it, as it steps a migration
//! job (tests/migration_wakeups.rs). `Engine::check_pauses_stepped` (run by DST after
//! every call) says so when it does not: the injected `loan-answer-no-step`.

mod common;

use common::*;
use tiervisor_engine::*;

const HDD: PoolId = PoolId(1);
const VOL: &str = "thin";

/// A write waits for a loan while the volume is being deleted; the loan is denied. The
/// check's verdict right after the answer, and whether the deletion then completed.
fn delete_after_a_denied_loan(bug: Option<InjectedBug>) -> (Result<(), String>, bool) {
    let mut r = Rig::with_bug(common::loaning_shard_config(), bug);
    let cb = r.engine.config().chunk_bytes;
    let mut c = 0;
    while free_chunks(&r)[HDD.0 as usize] > 0 {
        r.write(VOL, c * cb, &pattern(c as u8, 4096));
        c += 1;
    }
    let w = r.submit(VOL, ReqKind::Write, c * cb, Some(&pattern(99, 4096)), 4096);
    assert!(
        r.take_done(w).is_none(),
        "the write should wait for the loan"
    );
    let volume = r.engine.volume_id(VOL).unwrap();
    control(&mut r, Control::DeleteVolume { volume }).unwrap();
    assert_eq!(
        r.engine.check_pauses_stepped(),
        Ok(()),
        "the write is in flight"
    );
    // No shard has room: the write fails, and the volume is quiet.
    control(&mut r, Control::LoanDenied { pool: HDD }).unwrap();
    assert_eq!(r.take_done(w).map(|d| d.result), Some(Err(Errno::NoSpc)));
    let verdict = r.engine.check_pauses_stepped();
    for _ in 0..100 {
        r.tick(10_000_000);
    }
    let deleted = r
        .events
        .iter()
        .any(|e| matches!(e, EngineEvent::VolumeDeleted { volume } if volume == VOL));
    (verdict, deleted)
}

#[test]
fn a_deletion_waiting_for_a_write_denied_its_loan_goes_on() {
    let (verdict, deleted) = delete_after_a_denied_loan(None);
    assert_eq!(verdict, Ok(()));
    assert!(deleted, "the deletion did not complete");
}

#[test]
fn the_check_catches_a_loan_answer_that_leaves_a_deletion_waiting() {
    let (verdict, _) = delete_after_a_denied_loan(Some(InjectedBug::LoanAnswerNoStep));
    let e = verdict.expect_err("the check saw nothing");
    assert!(e.contains("its deletion waits (Quiescing)"), "{e}");
}
