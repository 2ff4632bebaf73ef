//! The clean-stop marker (`stopmark.rs`): a mount knows whether the process before it
//! stopped in order with every acknowledged write durable (issue 19: a vhost-user
//! frontend resuming its rings after a kill -9 must be told its unflushed writes may be
//! gone).

mod common;

use common::*;
use tiervisor_engine::inject::InjectedBug;
use tiervisor_engine::*;

fn stop(r: &mut Rig) {
    let mut out = Outputs::default();
    r.engine.begin_shutdown(r.now, &mut out);
    r.drain(out);
    assert_eq!(r.engine.state(), &EngineState::Stopped);
}

fn clean(r: &Rig, vol: &str) -> bool {
    let v = r.engine.volume_id(vol).unwrap();
    r.engine.stopped_clean_before_mount(v)
}

#[test]
fn an_orderly_stop_reads_clean_and_a_kill_after_it_does_not() {
    let mut r = Rig::new(config(1 << 20));
    // Formatted by this run: nothing an earlier process acknowledged can be missing, but
    // the marker starts cautious until a stop writes it.
    r.write("thin", 0, b"acked, not flushed");
    stop(&mut r);
    r.crash_and_mount();
    assert!(clean(&r, "thin") && clean(&r, "thick"));
    assert_eq!(r.read("thin", 0, 18), b"acked, not flushed");
    // This run is killed: the mount it started with has cleared the marker.
    r.write("thin", 4096, b"lost?");
    r.crash_and_mount();
    assert!(!clean(&r, "thin") && !clean(&r, "thick"));
    // Still unclean after a kill that wrote nothing (the cautious direction).
    r.crash_and_mount();
    assert!(!clean(&r, "thin"));
    stop(&mut r);
    r.crash_and_mount();
    assert!(clean(&r, "thin"));
}

#[test]
fn the_marker_is_the_last_write_of_a_stop_after_the_data() {
    // A power loss right after the stop keeps only what was flushed or written with FUA:
    // the marker must still be there, and the data it vouches for.
    let mut r = Rig::new(config(1 << 20));
    r.volatile = true;
    r.write("thin", 8192, &pattern(3, 64 << 10));
    r.write("thick", 0, &pattern(4, 4096));
    stop(&mut r);
    r.power_loss();
    assert!(clean(&r, "thin") && clean(&r, "thick"));
    assert_eq!(r.read("thin", 8192, 64 << 10), pattern(3, 64 << 10));
    assert_eq!(r.read("thick", 0, 4096), pattern(4, 4096));
}

#[test]
fn a_stop_whose_final_commit_fails_is_not_clean() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, b"will not commit");
    r.fail_writes = Some(Errno::Io);
    stop(&mut r);
    assert!(!r.engine.lost_at_stop().is_empty());
    r.fail_writes = None;
    r.crash_and_mount();
    assert!(!clean(&r, "thin"));
}

#[test]
fn the_injected_bug_keeps_the_marker_over_a_crash() {
    let mut r = Rig::with_bug(config(1 << 20), Some(InjectedBug::CleanStopMarkerKept));
    stop(&mut r);
    r.crash_and_mount();
    assert!(clean(&r, "thin"));
    r.crash_and_mount();
    // Wrong, and the test above that says so catches it.
    assert!(clean(&r, "thin"), "the bug should keep the marker");
}

/// A stop whose data is all durable but whose marker checkpoint fails loses nothing: the
/// volume is reported unmarked, not lost (DST seed 650 saw such a failed write land
/// anyway, so the next mount may find the marker: it vouches only for durable data).
#[test]
fn a_stop_whose_marker_fails_after_the_data_is_durable_loses_nothing() {
    use std::cell::Cell;
    use std::rc::Rc;
    let setup = || {
        let mut r = Rig::new(config(1 << 20));
        r.write("thin", 0, &pattern(7, 4096));
        r.write("thick", 0, &pattern(8, 4096));
        r.flush("thin");
        r.flush("thick");
        r
    };
    // How many writes the stop makes: its last is the last marker checkpoint's.
    let mut r = setup();
    let writes = Rc::new(Cell::new(0u32));
    let w = writes.clone();
    r.fail_write_if = Some(Box::new(move |_| {
        w.set(w.get() + 1);
        None
    }));
    stop(&mut r);
    let total = writes.get();
    assert!(total > 0 && r.engine.unmarked_at_stop().is_empty());
    // Again, with that last write failing.
    let mut r = setup();
    let seen = Rc::new(Cell::new(0u32));
    let s = seen.clone();
    r.fail_write_if = Some(Box::new(move |_| {
        s.set(s.get() + 1);
        (s.get() == total).then_some(Errno::Io)
    }));
    stop(&mut r);
    assert!(r.engine.lost_at_stop().is_empty(), "nothing was lost");
    assert_eq!(r.engine.unmarked_at_stop().len(), 1, "one marker failed");
    let unmarked = r.engine.unmarked_at_stop()[0].clone();
    r.fail_write_if = None;
    r.crash_and_mount();
    assert!(!clean(&r, &unmarked), "the failed marker did not land here");
    assert_eq!(r.read("thin", 0, 4096), pattern(7, 4096));
    assert_eq!(r.read("thick", 0, 4096), pattern(8, 4096));
}
