//! Space moves between shards (issue 18, `engine::loan`): a shard whose slice is full
//! borrows from another, and a power loss at each step of a loan mounts with every
//! flushed write intact and every chunk owned by one shard.
//!
//! The device here is a byte array per pool completing operations one at a time in
//! order, so a completed write is durable and a power loss drops what is still queued.

mod common;
mod shard_rig;

use shard_rig::*;
use tiervisor_engine::{
    EngineEvent, EngineState, Errno, InjectedBug, ReqKind, VmRequest, VolumeId,
};

/// One volume per shard; v0 writes 140 MiB of a 200 MiB pool (its slice holds under 100):
/// without loans its writes fail with ENOSPC past its slice.
#[test]
fn a_shard_fills_far_more_than_its_slice_by_borrowing() {
    let mut r = Rig::new();
    let mut id = 0;
    write_flushed(&mut r, &mut id, 1, 0).unwrap();
    for mib in 0..FILL_MIB {
        write_flushed(&mut r, &mut id, 0, mib).unwrap_or_else(|e| {
            panic!(
                "write of MiB {mib} failed with {e:?}; {:?}",
                r.events
                    .iter()
                    .filter(|e| matches!(
                        e,
                        EngineEvent::Lent { .. } | EngineEvent::SpaceLow { .. }
                    ))
                    .collect::<Vec<_>>()
            )
        });
    }
    assert!(loans_made(&r.events) >= 1, "no loan was made");
    check_data(&mut r, 0, 0..FILL_MIB);
    check_data(&mut r, 1, 0..1);
    // Shard 1 keeps what it needs: its volume still writes.
    for mib in 1..8 {
        write_flushed(&mut r, &mut id, 1, mib).unwrap();
    }
    // And everything survives a power loss, borrowed chunks included.
    r.crash_and_mount();
    check_data(&mut r, 0, 0..FILL_MIB);
    check_data(&mut r, 1, 0..8);
}

/// A loan takes 2 x 200 ms of carrying (ask to lend, lent to borrow) beside the table
/// writes, while v0 writes a chunk every 30 µs: it runs out of its slice long before the
/// loan it asked for at its low-water mark lands. Its writes wait for it instead of
/// failing (before `loan_wait.rs`: ENOSPC at MiB 88).
#[test]
fn writes_wait_for_a_loan_slower_than_the_shard_fills() {
    let mut r = Rig::with_loan_delay(200_000_000, None);
    let mut id = 0;
    for mib in 0..FILL_MIB {
        write_flushed(&mut r, &mut id, 0, mib)
            .unwrap_or_else(|e| panic!("write of MiB {mib} failed with {e:?}"));
    }
    let (waited, waiting) = r.s.engines()[0].loan_waits();
    assert!(
        waited >= 1 && waiting == 0,
        "{waited} waits, {waiting} waiting"
    );
    assert!(loans_made(&r.events) >= 1, "no loan was made");
    // Several writes in flight at once wait together and land in order.
    let base = FILL_MIB;
    for k in 0..4u64 {
        let mut w = VmRequest::new(
            10_000 + k,
            VolumeId(0),
            ReqKind::Write,
            (base + k) * MIB,
            MIB,
        );
        w.payload = Some(pattern(0, base + k));
        r.s.submit(r.now, w, &mut r.out);
    }
    r.settle();
    let done: Vec<_> = r.out.completions.drain(..).collect();
    assert_eq!(done.len(), 4, "{done:?}");
    assert!(done.iter().all(|c| c.result.is_ok()), "{done:?}");
    check_data(&mut r, 0, 0..base + 4);
    r.crash_and_mount();
    check_data(&mut r, 0, 0..FILL_MIB);
}

/// When no shard has room to spare, a write that waited fails with ENOSPC once the
/// denial comes (it neither hangs nor fails before), and the shard asks again later.
#[test]
fn a_denied_loan_fails_the_waiting_write_with_enospc() {
    let mut r = Rig::with_loan_delay(200_000_000, None);
    let mut id = 0;
    let mut mib = 0;
    let err = loop {
        match write_flushed(&mut r, &mut id, 0, mib) {
            Ok(()) => mib += 1,
            Err(e) => break e,
        }
        assert!(mib < 180, "v0 filled its whole size");
    };
    assert_eq!(err, Errno::NoSpc);
    // It went well past its own slice (half the pool) before the pool ran out.
    assert!(mib > POOL_BYTES / MIB * 3 / 4, "only {mib} MiB written");
    assert_eq!(r.s.engines()[0].loan_waits().1, 0);
    check_data(&mut r, 0, 0..mib);
}

/// A loan step carried 10 s late (a driver that lost the answer, as far as the engine can
/// tell): a waiting write fails with ENOSPC once `ANSWER_WAIT_NS` has passed, not before
/// and not never; the loan still lands later and the filling goes on.
#[test]
fn an_unanswered_ask_fails_the_waiting_write_after_its_bound() {
    use tiervisor_engine::loan_wait::ANSWER_WAIT_NS;
    let mut r = Rig::with_loan_delay(10_000_000_000, None);
    let mut id = 0;
    let mut mib = 0;
    let (err, waited_ns) = loop {
        let t0 = r.now;
        match write_flushed(&mut r, &mut id, 0, mib) {
            Ok(()) => mib += 1,
            Err(e) => break (e, r.now - t0),
        }
        assert!(mib < FILL_MIB, "no write waited");
    };
    assert_eq!(err, Errno::NoSpc);
    // The bound runs from the ask, made at the low-water mark a few writes (well under
    // a millisecond) before this one.
    assert!(
        (ANSWER_WAIT_NS - 1_000_000..=ANSWER_WAIT_NS).contains(&waited_ns),
        "the write failed after {waited_ns} ns"
    );
    assert_eq!(loans_made(&r.events), 0);
    // Time passes (a VM pauses on ENOSPC); the late loan lands and the write goes in
    // (each next loan is as late, so the filling would stall again at the next one).
    while loans_made(&r.events) == 0 {
        assert!(r.step(), "the loan never lands");
    }
    write_flushed(&mut r, &mut id, 0, mib).unwrap();
    check_data(&mut r, 0, 0..mib + 1);
}

/// An orderly stop while a write waits for a loan answers it (ENOSPC) and stops; the
/// loan steps still under way are refused or denied, nothing hangs.
#[test]
fn a_stop_answers_the_writes_waiting_for_a_loan() {
    let mut r = Rig::with_loan_delay(10_000_000_000, None);
    let mut id = 0;
    let mut mib = 0;
    while r.s.engines()[0].loan_waits().1 == 0 {
        id += 1;
        let mut w = VmRequest::new(id, VolumeId(0), ReqKind::Write, mib * MIB, MIB);
        w.payload = Some(pattern(0, mib));
        r.s.submit(r.now, w, &mut r.out);
        while !r.out.ops.is_empty() {
            r.step();
        }
        mib += 1;
        assert!(mib < FILL_MIB, "no write waited");
    }
    let t0 = r.now;
    r.s.begin_shutdown(r.now, &mut r.out);
    // At once, not after the answer's 5 s bound.
    while r.out.completions.len() < mib as usize {
        assert!(r.step(), "a write was never answered");
    }
    assert!(
        r.now - t0 < 1_000_000_000,
        "answered after {} ns",
        r.now - t0
    );
    r.settle();
    assert_eq!(r.s.state(), EngineState::Stopped, "{:?}", r.events);
    let done: Vec<_> = r.out.completions.drain(..).collect();
    assert_eq!(done.len() as u64, mib, "every write was answered");
    assert_eq!(done.last().map(|c| c.result), Some(Err(Errno::NoSpc)));
    assert!(done[..done.len() - 1].iter().all(|c| c.result.is_ok()));
}

/// The injected `loan-wait-drops` (a waiting write forgotten when the loan lands, its
/// request completed as written) loses that write's data.
#[test]
fn the_injected_loan_wait_drop_loses_data() {
    let mut r = Rig::with_loan_delay(200_000_000, Some(InjectedBug::LoanWaitDrops));
    let mut id = 0;
    for mib in 0..FILL_MIB {
        write_flushed(&mut r, &mut id, 0, mib).unwrap();
    }
    let lost = (0..FILL_MIB).find(|&mib| {
        let q = VmRequest::new(2_000_000 + mib, VolumeId(0), ReqKind::Read, mib * MIB, MIB);
        let (res, data) = r.run(q).unwrap();
        res.is_ok() && data.is_some_and(|d| d != pattern(0, mib))
    });
    assert!(lost.is_some(), "every write survived the injected bug");
}

/// Power loss once the donor recorded the loan, before the borrower did: the mount
/// gives the run back to the donor, and nothing is lost or owned twice.
#[test]
fn a_crash_between_lend_and_borrow_gives_the_run_back() {
    let mut r = Rig::new();
    let mut id = 0;
    let mut written = 0;
    // Operations complete one at a time; stop as soon as the donor's record is durable.
    r.stop_at = |e| matches!(e, EngineEvent::Lent { .. });
    while try_write_flushed(&mut r, &mut id, 0, written).unwrap() {
        written += 1;
        assert!(written < FILL_MIB, "no loan asked for");
    }
    assert_eq!(
        loans_made(&r.events),
        0,
        "the borrower's record is still queued"
    );
    let donor_loans = r.s.engines()[1].loans().len();
    assert_eq!(donor_loans, 1);
    // Writes that were not flushed when the power went are not checked.
    r.stop_at = |_| false;
    r.crash_and_mount();
    assert!(
        r.events
            .iter()
            .any(|e| matches!(e, EngineEvent::LoanReturned { .. })),
        "{:?}",
        r.events
    );
    assert!(r.s.engines().iter().all(|e| e.loans().is_empty()));
    check_data(&mut r, 0, 0..written);
    // The space is lendable again, and the filling goes on.
    for mib in written..FILL_MIB {
        write_flushed(&mut r, &mut id, 0, mib).unwrap();
    }
    check_data(&mut r, 0, 0..FILL_MIB);
}

/// Power loss right after the borrower recorded the loan, and again after it wrote into
/// the borrowed run: both shards keep their records, the data is there.
#[test]
fn a_crash_after_the_borrow_keeps_the_run_with_the_borrower() {
    let mut r = Rig::new();
    let mut id = 0;
    let mut written = 0;
    while loans_made(&r.events) == 0 {
        write_flushed(&mut r, &mut id, 0, written).unwrap();
        written += 1;
        assert!(written < FILL_MIB, "no loan made");
    }
    r.crash_and_mount();
    let k0 = r.s.engines()[0].loans().to_vec();
    let k1 = r.s.engines()[1].loans().to_vec();
    assert_eq!((k0.len(), k1.len()), (1, 1), "{k0:?} {k1:?}");
    assert_eq!(k1[0].mirror(1), k0[0]);
    check_data(&mut r, 0, 0..written);
    for mib in written..FILL_MIB {
        write_flushed(&mut r, &mut id, 0, mib).unwrap();
    }
    r.crash_and_mount();
    check_data(&mut r, 0, 0..FILL_MIB);
}
