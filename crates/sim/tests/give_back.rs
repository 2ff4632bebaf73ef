//! Borrowed space goes back between shards (issue 18, `engine::give_back`): a shard that
//! borrowed and then freed gives its wholly free borrowed runs back, so another shard
//! that needs the space later gets it; a power loss at each step of a give-back mounts
//! with every flushed write intact and every chunk owned by at most one shard.

mod common;
mod shard_rig;

use shard_rig::*;
use tiervisor_engine::{EngineEvent, InjectedBug, ReqKind, VmRequest, VolumeId};

fn rig(hold_ns: u64, bug: Option<InjectedBug>) -> Rig {
    let mut cfg = config();
    cfg.give_back_hold_ns = hold_ns;
    Rig::with_config(cfg, 0, bug)
}

fn trim_flushed(r: &mut Rig, id: &mut u64, vol: u32, mibs: std::ops::Range<u64>) {
    *id += 2;
    let t = VmRequest::new(
        *id,
        VolumeId(vol),
        ReqKind::Trim,
        mibs.start * MIB,
        (mibs.end - mibs.start) * MIB,
    );
    r.run(t).unwrap().0.unwrap();
    let f = VmRequest::new(*id + 1, VolumeId(vol), ReqKind::Flush, 0, 0);
    r.run(f).unwrap().0.unwrap();
}

/// v0 fills 140 MiB of the 200 MiB pool (borrowing from shard 1), then frees all but
/// MiB 60..100 (what its own slice and the borrowed runs hold alike); time passes.
fn fill_and_free(r: &mut Rig, id: &mut u64) {
    for mib in 0..FILL_MIB {
        write_flushed(r, id, 0, mib).unwrap();
    }
    assert!(loans_made(&r.events) >= 1, "no loan was made");
    trim_flushed(r, id, 0, 0..60);
    trim_flushed(r, id, 0, 100..FILL_MIB);
    r.settle();
}

fn given_back(ev: &[EngineEvent]) -> usize {
    ev.iter()
        .filter(|e| matches!(e, EngineEvent::GaveBack { .. }))
        .count()
}

/// How far v1 writes before ENOSPC.
fn v1_room(r: &mut Rig, id: &mut u64) -> u64 {
    let mut mib = 0;
    while mib < 180 && write_flushed(r, id, 1, mib).is_ok() {
        mib += 1;
    }
    mib
}

/// What v1 writes in the test below: more than it gets while shard 0 keeps its free
/// borrowed runs (84 MiB when written), less than it gets once they are back (103).
const V1_MIB: u64 = 95;

/// The gap: v0 borrowed from shard 1 and freed it; without give-back (a hold of 0 keeps
/// borrowed space) v1 runs out of space while shard 0 holds free chunks of its slice.
#[test]
fn without_give_back_the_other_shard_runs_out_of_space() {
    let mut r = rig(0, None);
    let mut id = 0;
    fill_and_free(&mut r, &mut id);
    assert_eq!(given_back(&r.events), 0);
    let room = v1_room(&mut r, &mut id);
    assert!(room < V1_MIB, "v1 wrote {room} MiB");
}

/// With it, shard 0 gives its free borrowed runs back once two looks a hold apart saw
/// them free; v1 then writes what it could not, and everything survives a power loss.
#[test]
fn a_shard_gets_back_the_space_another_borrowed_and_freed() {
    let mut r = rig(100_000_000, None);
    let mut id = 0;
    fill_and_free(&mut r, &mut id);
    let (given, cancelled, under_way) = r.s.engines()[0].give_backs();
    assert!(given >= 1 && !under_way, "{given} given back");
    assert_eq!(given as usize, given_back(&r.events));
    assert_eq!(cancelled, 0);
    // Each went back to its donor: shard 1 holds no record of lending it.
    let returned = r
        .events
        .iter()
        .filter(|e| matches!(e, EngineEvent::LoanReturned { .. }))
        .count();
    assert_eq!(returned, given as usize);
    for mib in 0..V1_MIB {
        write_flushed(&mut r, &mut id, 1, mib)
            .unwrap_or_else(|e| panic!("v1's write of MiB {mib} failed with {e:?}"));
    }
    check_data(&mut r, 0, 60..100);
    check_data(&mut r, 1, 0..V1_MIB);
    r.crash_and_mount();
    check_data(&mut r, 0, 60..100);
    check_data(&mut r, 1, 0..V1_MIB);
}

/// A power loss at every few device operations of the give-backs: each mount finds the
/// run with shard 0 (borrowed, its record not yet removed), with nobody (removed, the
/// donor's record still there: the start gives it back to the donor) or with shard 1;
/// the invariants hold at every step (no chunk owned twice), v0's data reads back, and
/// once time passes v1 gets the space.
#[test]
fn a_power_loss_at_any_step_of_a_give_back_loses_nothing() {
    // The device operations from the end of the frees to the last run returned.
    let mut r = rig(100_000_000, None);
    let mut id = 0;
    fill_and_free_steps(&mut r, &mut id, None);
    assert!(given_back(&r.events) >= 1);
    let ops = OPS.with(|o| o.get());
    assert!(ops > 10, "{ops} operations");
    let mut outcomes = [0; 3];
    for k in (0..ops).step_by((ops / 24).max(1) as usize) {
        let mut r = rig(100_000_000, None);
        let mut id = 0;
        fill_and_free_steps(&mut r, &mut id, Some(k));
        let gave = given_back(&r.events);
        let returned_before = r
            .events
            .iter()
            .filter(|e| matches!(e, EngineEvent::LoanReturned { .. }))
            .count();
        outcomes[(gave > 0) as usize + (gave > 0 && returned_before >= gave) as usize] += 1;
        r.crash_and_mount();
        check_data(&mut r, 0, 60..100);
        // Reads armed shard 0's look at its borrowed runs; let it give them back.
        r.settle();
        for mib in 0..V1_MIB {
            write_flushed(&mut r, &mut id, 1, mib)
                .unwrap_or_else(|e| panic!("crash after {k} of {ops}: v1's MiB {mib}: {e:?}"));
        }
        check_data(&mut r, 0, 60..100);
        check_data(&mut r, 1, 0..V1_MIB);
    }
    eprintln!("{ops} operations; crashes before, between, after: {outcomes:?}");
    // Crashes fell before a run was given back, after, and between its two records.
    assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");
}

thread_local! {
    static OPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// `fill_and_free`, counting the device operations after the frees (in `OPS`), and with
/// `crash_after`, stopping after that many of them (before a power loss).
fn fill_and_free_steps(r: &mut Rig, id: &mut u64, crash_after: Option<u64>) {
    for mib in 0..FILL_MIB {
        write_flushed(r, id, 0, mib).unwrap();
    }
    trim_flushed(r, id, 0, 0..60);
    trim_flushed(r, id, 0, 100..FILL_MIB);
    let mut n = 0;
    while crash_after.is_none_or(|k| n < k) && r.step() {
        n += 1;
    }
    if crash_after.is_none() {
        OPS.with(|o| o.set(n));
    }
}

/// The injected `give-back-early` removes the record without waiting for the
/// checkpoints: a journal still names a chunk of the run, which the invariant check says
/// at once, and a power loss then would not mount.
#[test]
fn the_injected_early_give_back_is_caught() {
    let mut r = rig(100_000_000, Some(InjectedBug::GiveBackEarly));
    let mut id = 0;
    fill_and_free(&mut r, &mut id);
    assert!(given_back(&r.events) >= 1);
    let broken = r.broken.clone().expect("the invariant check saw nothing");
    assert!(broken.contains("beyond the"), "{broken}");
    // What that means: the power goes before the volume's next checkpoint, and the mount
    // refuses its journal.
    r.out = Default::default();
    r.events.clear();
    r.s.reset().unwrap();
    r.s.start(r.now, tiervisor_engine::StartMode::Mount, &mut r.out);
    r.settle();
    let failed = r.events.iter().find_map(|e| match e {
        EngineEvent::Failed { reason } => Some(reason.clone()),
        _ => None,
    });
    assert!(
        failed
            .as_ref()
            .is_some_and(|f| f.contains("does not exist")),
        "{failed:?}"
    );
}

/// Hysteresis: a shard gives a run back only if it keeps twice its low-water mark (what
/// a donor keeps when it lends). v0 frees only MiB 100..140, the part its borrowed runs
/// hold, so shard 0 keeps its own slice full: it gives back runs while it stays above
/// that mark and keeps the rest, and a write of v0 right after does not ask for space
/// again.
#[test]
fn a_shard_near_its_low_water_mark_keeps_what_it_borrowed() {
    let mut r = rig(100_000_000, None);
    let mut id = 0;
    for mib in 0..FILL_MIB {
        write_flushed(&mut r, &mut id, 0, mib).unwrap();
    }
    let borrowed = loans_made(&r.events);
    trim_flushed(&mut r, &mut id, 0, 100..FILL_MIB);
    r.settle();
    let e = &r.s.engines()[0];
    let pool = tiervisor_engine::PoolId(0);
    let (avail, low) = (e.available_chunks(pool), e.low_water_chunks(pool));
    let given = given_back(&r.events);
    assert!(avail >= 2 * low, "{avail} available, low-water mark {low}");
    assert!(given < borrowed, "gave back all {given} runs");
    let asks = |ev: &[EngineEvent]| {
        ev.iter()
            .filter(|e| matches!(e, EngineEvent::SpaceLow { .. }))
            .count()
    };
    let before = asks(&r.events);
    write_flushed(&mut r, &mut id, 0, 100).unwrap();
    assert_eq!(asks(&r.events), before, "asked for space again at once");
}
