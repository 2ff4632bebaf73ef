//! Timers the driver pulls: `next_deadline` names the engine's earliest timer until it has
//! run, and `host::Wakeups` queues a wake-up for it once.

mod common;

use common::*;
use tiervisor_engine::host::Wakeups;
use tiervisor_engine::*;

#[test]
fn a_timer_stays_asked_for_until_it_has_run() {
    let mut r = Rig::new(config(1 << 20));
    assert_eq!(
        r.engine.next_deadline(),
        None,
        "an idle engine has no timer"
    );
    let data = pattern(7, 4096);
    let id = r.submit("thin", ReqKind::Write, 0, Some(&data), 4096);
    assert!(r.take_done(id).is_some());
    // The write left journal records to commit: the commit timer is armed.
    let t = r.engine.next_deadline().expect("commit timer armed");
    assert!(t > r.now);
    // Ticking early runs nothing and loses nothing.
    r.tick(t - r.now - 1);
    assert_eq!(r.engine.next_deadline(), Some(t));
    assert!(r.engine.report().volumes[0].journal_pending_records > 0);
    // At the time, the commit runs and the timer is gone.
    r.tick(1);
    assert!(r.engine.next_deadline().is_none_or(|u| u > t));
    assert_eq!(r.engine.report().volumes[0].journal_pending_records, 0);
}

#[test]
fn wakeups_queue_each_deadline_once_and_again_after_it_fires() {
    let mut r = Rig::new(config(1 << 20));
    let mut w = Wakeups::default();
    assert_eq!(w.to_queue(&r.engine, r.now), None, "nothing to wake for");
    let data = pattern(3, 4096);
    let id = r.submit("thin", ReqKind::Write, 0, Some(&data), 4096);
    assert!(r.take_done(id).is_some());
    let t = w
        .to_queue(&r.engine, r.now)
        .expect("the commit timer is queued");
    assert_eq!(Some(t), r.engine.next_deadline());
    assert_eq!(w.to_queue(&r.engine, r.now), None, "already queued");
    // A deadline already past is queued at now, not in the past.
    assert_eq!(
        w.to_queue(&r.engine, t + 5),
        None,
        "one at or before it is queued"
    );
    w.fired(t);
    assert_eq!(w.to_queue(&r.engine, t + 5), Some(t + 5));
    w.fired(t + 5);
    r.tick(t + 5 - r.now);
    // The commit ran and wrote the journal; whatever timer remains is queued anew.
    assert_eq!(r.engine.report().volumes[0].journal_pending_records, 0);
    assert_eq!(
        w.to_queue(&r.engine, r.now),
        r.engine.next_deadline().map(|d| d.max(r.now))
    );
    w.clear();
    assert_eq!(
        w.to_queue(&r.engine, r.now),
        r.engine.next_deadline().map(|d| d.max(r.now))
    );
}

fn throttled_config() -> EngineConfig {
    let mut cfg = config(1 << 20);
    // The thick volume's pool models a drive with R/2 = 2 ms, S = 0: every op X = 2 ms.
    cfg.pools[0].throttle = Some(ThrottleConfig {
        model: "linear".into(),
        half_rotation_ns: 2_000_000,
        max_seek_ns: 0,
        max_seek_sectors: 0,
        cache_segments: 0,
        sectors_per_segment: 1,
        prefetch_sectors: 0,
        cache_hit_ns: 0,
        k: 3.0,
        adapt: false,
    });
    cfg
}

#[test]
fn a_held_throttled_completion_is_a_deadline_until_released() {
    let mut r = Rig::new(throttled_config());
    let ops = |r: &Rig| r.engine.report().pools[0].throttle.clone().unwrap().ops;
    // Start-up I/O was throttled too (the rig ran its timers).
    let ops_before = ops(&r);
    let start = r.now;
    let id = r.submit("thick", ReqKind::Read, 0, None, 4096);
    assert!(r.take_done(id).is_none(), "held by the throttle");
    // The read was dispatched at `start` and its target is start + k X = start + 6 ms.
    let target = start + 6_000_000;
    assert_eq!(r.engine.next_deadline(), Some(target));
    r.tick(target - r.now - 1);
    assert!(r.take_done(id).is_none(), "not before its target");
    assert_eq!(r.engine.next_deadline(), Some(target));
    r.tick(1);
    assert!(r.take_done(id).is_some(), "released at its target");
    assert!(r.engine.next_deadline().is_none_or(|t| t > target));
    let t = r.engine.report().pools[0].throttle.clone().unwrap();
    assert_eq!((t.ops, t.held_now), (ops_before + 1, 0));
}

#[test]
fn a_completion_passed_before_its_target_breaks_the_throttle_invariant() {
    let r = Rig::new(throttled_config());
    assert_eq!(r.engine.check_invariants(), Ok(()));
    let mut r = Rig::with_bug(throttled_config(), Some(InjectedBug::ThrottleEarlyRelease));
    let id = r.submit("thick", ReqKind::Read, 0, None, 4096);
    assert!(r.take_done(id).is_some(), "the defect passes it at once");
    let e = r.engine.check_invariants().unwrap_err();
    assert!(e.contains("passed before their modelled time"), "{e}");
}
