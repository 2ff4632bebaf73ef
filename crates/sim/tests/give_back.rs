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
    both_volumes_read_back_before_and_after_a_crash(&mut r);
}

/// v0's kept MiB 60..100 and all v1 wrote read back, before and after a power loss.
fn both_volumes_read_back_before_and_after_a_crash(r: &mut Rig) {
    for crash in [false, true] {
        if crash {
            r.crash_and_mount();
        }
        check_data(r, 0, 60..100);
        check_data(r, 1, 0..V1_MIB);
    }
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

/// A hold long enough that the timer gives nothing back within these tests' time.
const HOLD_LONG_NS: u64 = 10_000_000_000;

/// `fill_and_free` without the settle: the frees are durable, and shard 0's timer has
/// not looked at its borrowed runs yet.
fn fill_and_free_now(r: &mut Rig, id: &mut u64) {
    for mib in 0..FILL_MIB {
        write_flushed(r, id, 0, mib).unwrap();
    }
    assert!(loans_made(&r.events) >= 1, "no loan was made");
    trim_flushed(r, id, 0, 0..60);
    trim_flushed(r, id, 0, 100..FILL_MIB);
}

/// Engine time passes by `ns` (the timers due run), as between a guest's retries.
fn pass(r: &mut Rig, ns: u64) {
    r.now += ns;
    r.s.tick(r.now, &mut r.out);
    r.take_events();
    while !r.out.ops.is_empty() {
        r.step();
    }
}

/// A shard refused space while another holds a wholly free borrowed run: the broker's
/// denial hints the holder (`Control::GiveBackNow`), which gives the run back at once
/// (reach, the FUA record) instead of after two looks a hold apart; the run back with
/// its donor (here the refused shard itself) ends the denial's wait to ask again, so the
/// next ask hints the holder's next free run. v1 writes what it could not without
/// give-back, writing a refused MiB again every millisecond of engine time (as a guest
/// retries): no write waits 10 ms. Without the hint they wait for shard 0's hold (10 s
/// here, two looks).
#[test]
fn a_denied_shard_gets_a_free_borrowed_run_back_at_once() {
    let mut r = rig(HOLD_LONG_NS, None);
    let mut id = 0;
    fill_and_free_now(&mut r, &mut id);
    assert_eq!(given_back(&r.events), 0);
    let (mut refusals, mut longest_ns) = (0, 0);
    for mib in 0..V1_MIB {
        let first_at = r.now;
        while let Err(e) = try_write_flushed(&mut r, &mut id, 1, mib) {
            assert_eq!(e, tiervisor_engine::Errno::NoSpc, "MiB {mib}");
            refusals += 1;
            assert!(
                r.now - first_at < 1_000_000_000,
                "MiB {mib}: no space within 1 s"
            );
            pass(&mut r, 1_000_000);
        }
        longest_ns = longest_ns.max(r.now - first_at);
    }
    let (hints, on_hint) = r.s.engines()[0].give_back_hints();
    eprintln!(
        "{refusals} refusals; longest wait for space {:.1} ms; shard 0: {hints} hints, \
         {on_hint} give-backs on them",
        longest_ns as f64 / 1e6
    );
    // Well under a denial's wait to ask again (`ASK_AGAIN_NS`, 50 ms): the run back
    // with shard 1 ends that wait.
    assert!(longest_ns < 10_000_000, "a write waited {longest_ns} ns");
    // Shard 1 was denied (the hints say so) and the runs went back on them (the last
    // one started may still wait for a checkpoint).
    let t = r.now;
    while r.s.engines()[0].give_backs().2 {
        assert!(r.now - t < 1_000_000_000, "a give-back does not end");
        pass(&mut r, 1_000_000);
    }
    let given = given_back(&r.events) as u64;
    assert!(
        on_hint >= 1 && given == on_hint,
        "{given} given back, {on_hint} on hints: {:?}",
        r.s.engines()[0].give_backs()
    );
    both_volumes_read_back_before_and_after_a_crash(&mut r);
}

/// The injected `give-back-now-used`: a hint gives the last borrowed run back though v0
/// still maps chunks there; the ownership check sees a chunk both mapped and being
/// given back.
#[test]
fn the_injected_hint_that_skips_the_free_check_is_caught() {
    let mut r = rig(HOLD_LONG_NS, Some(InjectedBug::GiveBackNowUsed));
    let mut id = 0;
    // v0 frees nothing of its borrowed runs: MiB 0..60 only, in its own slice.
    for mib in 0..FILL_MIB {
        write_flushed(&mut r, &mut id, 0, mib).unwrap();
    }
    trim_flushed(&mut r, &mut id, 0, 0..60);
    let mut mib = 0;
    while r.broken.is_none() && mib < 180 {
        if try_write_flushed(&mut r, &mut id, 1, mib).is_ok() {
            mib += 1;
        } else {
            pass(&mut r, 1_000_000);
        }
        assert!(r.now < 100_000_000_000, "nothing caught");
    }
    let broken = r.broken.clone().expect("the invariant check saw nothing");
    assert!(broken.contains("being given back"), "{broken}");
}

/// After a restart a shard gives back its free borrowed runs without waiting for a VM
/// request: the mount arms the look. Here no request reaches shard 0 after the power
/// loss, and its runs go back within two holds.
#[test]
fn after_a_restart_free_borrowed_runs_go_back_without_requests() {
    let mut r = rig(1_000_000_000, None);
    let mut id = 0;
    fill_and_free_now(&mut r, &mut id);
    assert_eq!(given_back(&r.events), 0);
    let t0 = r.now;
    r.crash_and_mount();
    let n = given_back(&r.events);
    eprintln!(
        "{n} runs given back in {:.2} s after the restart",
        (r.now - t0) as f64 / 1e9
    );
    assert!(n >= 1, "nothing given back after the restart");
    for mib in 0..V1_MIB {
        write_flushed(&mut r, &mut id, 1, mib)
            .unwrap_or_else(|e| panic!("v1's write of MiB {mib} failed with {e:?}"));
    }
    check_data(&mut r, 0, 60..100);
}
