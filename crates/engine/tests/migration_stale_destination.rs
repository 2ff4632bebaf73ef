//! LR/SLR destination writes against newer home writes after a cancel (DST seed 13127,
//! the 10,000-seed soak at 3845a43). A cancel sends a chunk's writes home again while
//! older writes to its destination are still in flight. One of them, A, completed after a
//! newer write C of its range had completed at home, and marked the range `Moved` all the
//! same. The destination is written in place, so it held there the data of B, a write
//! that completed before C was submitted (B landed after A but A's completion came
//! last): the volume read B's data, which C had replaced, and the cancel's copy back
//! wrote it home. A may win over C (they overlapped), B may not.

mod common;

use common::*;
use tiervisor_engine::jobs::migrate::{MigrationPhase, Scheme};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const VOL: &str = "thin";
const KIB: u64 = 1024;
/// A's range, from the chunk's start.
const SPAN: u64 = 64 * KIB;
/// B's and C's range, inside A's.
const SMALL: std::ops::Range<u64> = 4 * KIB..8 * KIB;

/// Every 512-byte sector of `got` (the volume from `base`, `SPAN` bytes) must hold A's
/// data, or C's inside `SMALL`, and never B's.
fn check_outcome(got: &[u8], a: &[u8], b: &[u8], c: &[u8], what: &str) -> Result<(), String> {
    for s in 0..(SPAN / 512) as usize {
        let r = s * 512..(s + 1) * 512;
        let sector = &got[r.clone()];
        let small = SMALL.start as usize..SMALL.end as usize;
        if small.contains(&r.start) {
            let i = r.start - SMALL.start as usize..r.end - SMALL.start as usize;
            if sector == &b[i.clone()] {
                return Err(format!(
                    "{what}: sector {s} returned write B, which completed before write C \
                     of the range was submitted"
                ));
            }
            if sector == &c[i] {
                continue;
            }
        }
        if sector != &a[r] {
            return Err(format!(
                "{what}: sector {s} holds neither write A nor write C"
            ));
        }
    }
    Ok(())
}

/// The held device write of `len` bytes to pool `pool`, taken out of the rig's queue.
fn take_held_write(r: &mut Rig, pool: PoolId, len: u64, what: &str) -> DeviceOp {
    let i = r
        .held
        .iter()
        .position(|o| {
            o.pool == pool
                && o.kind == DevKind::Write
                && o.len_bytes == len
                && o.class == IoClass::Foreground
        })
        .unwrap_or_else(|| panic!("{what}: no held write of {len} bytes to {pool:?}"));
    r.held.remove(i).expect("found")
}

/// The seed's order of events with `scheme` on the thin volume (HDD to SSD) at chunk
/// `chunk`, on an engine with `bug`: the first wrong read, if any.
fn stale_destination_write(
    scheme: Scheme,
    chunk: u64,
    bug: Option<InjectedBug>,
) -> Result<(), String> {
    let mut r = Rig::with_bug(config(1 << 20), bug);
    for c in 0..6 {
        r.write(VOL, c * MIB, &pattern(c as u8 + 1, MIB as usize));
    }
    r.flush(VOL);
    let v = r.engine.volume_id(VOL).unwrap();
    let base = chunk * MIB;

    r.hold = true;
    let mut out = Outputs::default();
    r.engine
        .start_migration(r.now, v, job_params(scheme, SSD), &mut out)
        .unwrap();
    r.drain(out);
    if scheme == Scheme::Slr {
        // SLR writes to the destination only in the copied region: let chunk 0 copy.
        while r.engine.migration_status(v).unwrap().chunks_done == 0 {
            assert!(r.release_one().is_some(), "the copy stalled");
        }
    }

    // A, then B inside it: both to the destination, both held.
    let a = pattern(10, SPAN as usize);
    let a_id = r.submit(VOL, ReqKind::Write, base, Some(&a), SPAN);
    let a_op = take_held_write(&mut r, SSD, SPAN, "A");
    let b = pattern(11, (SMALL.end - SMALL.start) as usize);
    let b_id = r.submit(
        VOL,
        ReqKind::Write,
        base + SMALL.start,
        Some(&b),
        b.len() as u64,
    );
    let b_op = take_held_write(&mut r, SSD, b.len() as u64, "B");

    // A lands first (its completion is reported only later), then B lands and completes.
    let (o, l) = (a_op.offset_bytes as usize, a_op.len_bytes as usize);
    r.devs[SSD.0 as usize][o..o + l].copy_from_slice(&a);
    r.held.push_front(b_op);
    r.release_one();
    assert_eq!(r.take_done(b_id).map(|c| c.result), Some(Ok(())));

    // The cancel sends writes home. C, of B's range, is submitted after B completed and
    // completes at home while A is still in flight.
    let mut out = Outputs::default();
    r.engine.cancel_migration(r.now, v, &mut out).unwrap();
    r.drain(out);
    let c = pattern(12, b.len());
    let c_id = r.submit(
        VOL,
        ReqKind::Write,
        base + SMALL.start,
        Some(&c),
        c.len() as u64,
    );
    // (The HDD's queue may be taken by the copy's reads: C goes once they are done.)
    let mut home = false;
    while r.take_done(c_id).is_none() {
        let op = r.release_one().expect("C is stuck");
        home |= op.pool == HDD && op.kind == DevKind::Write && op.class == IoClass::Foreground;
    }
    assert!(home, "C went home");

    // A's completion, late.
    r.now += 1000;
    let mut out = Outputs::default();
    let done = DeviceCompletion {
        id: a_op.id,
        result: Ok(()),
        data: None,
    };
    r.engine.device_done(r.now, done, &mut out);
    r.drain(out);
    assert_eq!(r.take_done(a_id).map(|c| c.result), Some(Ok(())));

    // Read first (held operations go in order until it completes: the copy back of the
    // chunk comes after it).
    let read = r.submit(VOL, ReqKind::Read, base, None, SPAN);
    let got = loop {
        if let Some(done) = r.take_done(read) {
            break done.data.expect("read data").to_vec();
        }
        assert!(r.release_one().is_some(), "the read is stuck");
    };
    check_outcome(&got, &a, &b, &c, &format!("{scheme:?}: during the cancel"))?;
    r.hold = false;
    while r.release_one().is_some() {}
    finish_job(&mut r, VOL);
    assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Cancelled));
    r.engine.check_invariants().unwrap();
    let got = r.read(VOL, base, SPAN);
    check_outcome(&got, &a, &b, &c, &format!("{scheme:?}: cancelled"))?;
    r.flush(VOL);
    r.crash_and_mount();
    let got = r.read(VOL, base, SPAN);
    check_outcome(&got, &a, &b, &c, &format!("{scheme:?}: after a restart"))
}

/// The schemes that write to the destination, each at a chunk it sends there: SLR's
/// copied chunk 0, and for LR a chunk its copy has not reached.
const CASES: [(Scheme, u64); 2] = [(Scheme::Slr, 0), (Scheme::Lr, 5)];

#[test]
fn an_older_destination_write_does_not_hide_a_newer_home_write_after_a_cancel() {
    for (s, c) in CASES {
        stale_destination_write(s, c, None).unwrap();
    }
}

/// `stale-dst-write-hides-home` puts the defect back: write B reads back.
#[test]
fn the_stale_destination_test_catches_its_injected_bug() {
    for (s, c) in CASES {
        let bug = Some(InjectedBug::StaleDstWriteHidesHome);
        let e = stale_destination_write(s, c, bug).expect_err("caught");
        assert!(e.contains("returned write B"), "{s:?}: {e}");
    }
}
