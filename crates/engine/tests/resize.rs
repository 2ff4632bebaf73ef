//! Growing and shrinking a thin volume while the engine runs (`Control::ResizeVolume`): a
//! new size is served only once the volume table naming it is durable (a smaller one at
//! once, and made durable after a checkpoint of the smaller map), a crash at any point
//! leaves the old size or the new one with every flushed write, and what cannot be
//! resized is refused with nothing changed.

mod common;

use common::*;
use tiervisor_engine::jobs::migrate::MigrationParams;
use tiervisor_engine::*;

fn resize(r: &mut Rig, name: &str, size_bytes: u64) -> Result<(), ControlError> {
    let volume = r.engine.volume_id(name).expect("volume exists");
    let mut out = Outputs::default();
    let res = r.engine.control(
        r.now,
        Control::ResizeVolume { volume, size_bytes },
        &mut out,
    );
    r.drain(out);
    res
}

fn resized(r: &Rig, name: &str) -> Option<u64> {
    r.events.iter().find_map(|e| match e {
        EngineEvent::VolumeResized { volume, size_bytes } if volume == name => Some(*size_bytes),
        _ => None,
    })
}

fn size(r: &Rig, name: &str) -> u64 {
    let v = r.engine.volume_id(name).expect("volume exists");
    r.engine.volume_size(v).expect("volume exists")
}

/// A write past the end of the volume as it is now (refused with an error).
fn write_fails(r: &mut Rig, name: &str, off: u64) -> bool {
    let data = pattern(9, 4096);
    let id = r.submit(name, ReqKind::Write, off, Some(&data), 4096);
    r.take_done(id).is_some_and(|c| c.result.is_err())
}

#[test]
fn a_grown_volume_serves_its_new_end_and_keeps_it_across_a_crash() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, &pattern(1, 65536));
    // The last sector of the old size, so a padded checkpoint must keep it in place.
    r.write("thin", 40 * MIB - 4096, &pattern(2, 4096));
    r.flush("thin");
    assert!(write_fails(&mut r, "thin", 40 * MIB));
    assert_eq!(resize(&mut r, "thin", 64 * MIB), Ok(()));
    assert_eq!(resized(&r, "thin"), Some(64 * MIB), "{:?}", r.events);
    assert_eq!(size(&r, "thin"), 64 * MIB);
    r.engine.check_invariants().unwrap();
    // The new chunks read as zeros and take writes.
    assert_eq!(r.read("thin", 40 * MIB, 24 * MIB), vec![0u8; 24 << 20]);
    r.write("thin", 63 * MIB, &pattern(3, 65536));
    r.flush("thin");
    r.crash_and_mount();
    r.engine.check_invariants().unwrap();
    // The configuration still says 40 MiB: the table's size stays, with a warning.
    assert_eq!(size(&r, "thin"), 64 * MIB);
    assert!(
        r.events.iter().any(|e| matches!(e, EngineEvent::Warning { message } if message.contains("set size to 67108864"))),
        "{:?}",
        r.events
    );
    assert_eq!(r.read("thin", 0, 65536), pattern(1, 65536));
    assert_eq!(r.read("thin", 40 * MIB - 4096, 4096), pattern(2, 4096));
    assert_eq!(r.read("thin", 63 * MIB, 65536), pattern(3, 65536));
}

/// A checkpoint written before the growth holds the old number of chunks; a mount after
/// the growth reads the rest as unmapped instead of calling the checkpoint corrupt.
#[test]
fn a_checkpoint_from_before_the_growth_still_mounts() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, b"before the checkpoint");
    let mut out = Outputs::default();
    r.engine.begin_shutdown(r.now, &mut out);
    r.drain(out);
    assert_eq!(r.engine.state(), &EngineState::Stopped);
    r.crash_and_mount();
    assert_eq!(resize(&mut r, "thin", 48 * MIB), Ok(()));
    r.write("thin", 47 * MIB, b"after the growth");
    r.flush("thin");
    r.crash_and_mount();
    r.engine.check_invariants().unwrap();
    assert_eq!(size(&r, "thin"), 48 * MIB);
    assert_eq!(r.read("thin", 0, 21), b"before the checkpoint");
    assert_eq!(r.read("thin", 47 * MIB, 16), b"after the growth");
}

/// Whichever device operation of the resize a crash comes before, the volume mounts at
/// its old size or its new one, never serving the new size before it is durable.
#[test]
fn a_crash_at_any_point_of_a_resize_leaves_the_old_size_or_the_new() {
    let mut r = Rig::new(config(1 << 20));
    r.hold = true;
    resize(&mut r, "thin", 64 * MIB).unwrap();
    let mut total = 0;
    while r.release_one().is_some() {
        total += 1;
    }
    assert!(total > 0);
    assert_eq!(resized(&r, "thin"), Some(64 * MIB));
    let mut saw = [false; 2];
    for k in 0..=total {
        let mut r = Rig::new(config(1 << 20));
        r.write("thin", 0, &pattern(4, 4096));
        r.flush("thin");
        r.hold = true;
        resize(&mut r, "thin", 64 * MIB).unwrap();
        for _ in 0..k {
            r.release_one();
        }
        let announced = resized(&r, "thin").is_some();
        assert_eq!(announced, k == total, "announced after {k} of {total}");
        if !announced {
            // Not durable yet: still the old size, and the new end refuses writes.
            assert_eq!(size(&r, "thin"), 40 * MIB);
            r.hold = false;
            assert!(write_fails(&mut r, "thin", 50 * MIB));
            r.hold = true;
        }
        r.crash_and_mount();
        r.engine.check_invariants().unwrap();
        let now = size(&r, "thin");
        assert!(now == 40 * MIB || now == 64 * MIB, "{now} after {k}");
        saw[(now == 64 * MIB) as usize] = true;
        assert!(
            !announced || now == 64 * MIB,
            "announced, then lost, after {k}"
        );
        assert_eq!(r.read("thin", 0, 4096), pattern(4, 4096));
        r.write("thin", now - 4096, &pattern(5, 4096));
        r.flush("thin");
        assert_eq!(r.read("thin", now - 4096, 4096), pattern(5, 4096));
    }
    assert_eq!(saw, [true, true], "both outcomes are reachable");
}

#[test]
fn what_cannot_grow_is_refused_and_nothing_changes() {
    let mut r = Rig::new(config(1 << 20));
    let cases: [(&str, u64, &str); 4] = [
        ("thick", 40 * MIB, "thick"),
        ("thin", 40 * MIB, "already"),
        ("thin", 40 * MIB + 100, "multiple of 512"),
        ("thin", 1 << 60, "may grow to"),
    ];
    for (name, size_bytes, why) in cases {
        let before = size(&r, name);
        let e = resize(&mut r, name, size_bytes).expect_err(why);
        assert!(e.to_string().contains(why), "{name} {size_bytes}: {e}");
        assert_eq!(size(&r, name), before);
    }
    assert!(resized(&r, "thin").is_none());
    // One at a time.
    r.hold = true;
    resize(&mut r, "thin", 48 * MIB).unwrap();
    let e = resize(&mut r, "thin", 56 * MIB).unwrap_err();
    assert!(e.to_string().contains("being resized"), "{e}");
    while r.release_one().is_some() {}
    assert_eq!(size(&r, "thin"), 48 * MIB);
}

/// The metadata pool keeps room for a bigger checkpoint: a growth whose checkpoints
/// would not fit is refused rather than stall every later flush.
#[test]
fn a_growth_the_metadata_pool_cannot_checkpoint_is_refused() {
    let mut r = Rig::new(config(1 << 20));
    // 1 PiB of chunk map is 8 GiB of checkpoint: far beyond the 64 MiB metadata pool.
    let e = resize(&mut r, "thin", 1 << 50).unwrap_err();
    assert!(matches!(e, ControlError::NoSpace { .. }), "{e}");
    assert_eq!(size(&r, "thin"), 40 * MIB);
}

/// A bigger configured size grows a thin volume at mount.
#[test]
fn a_bigger_configured_size_grows_a_thin_volume_at_mount() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, &pattern(6, 4096));
    r.flush("thin");
    r.cfg.volumes[0].size_bytes = 56 * MIB;
    r.crash_and_mount();
    assert_eq!(resized(&r, "thin"), Some(56 * MIB), "{:?}", r.events);
    assert_eq!(size(&r, "thin"), 56 * MIB);
    r.write("thin", 55 * MIB, &pattern(7, 4096));
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(size(&r, "thin"), 56 * MIB);
    assert!(resized(&r, "thin").is_none(), "grown once only");
    assert_eq!(r.read("thin", 0, 4096), pattern(6, 4096));
    assert_eq!(r.read("thin", 55 * MIB, 4096), pattern(7, 4096));
}

/// The injected `resize-before-durable` serves the new size before the table recording it
/// is durable: a crash then takes back a size clients were told about. The crash sweep
/// above would catch it; this shows the defect is reachable in one step.
#[test]
fn a_resize_announced_before_it_is_durable_is_lost_by_a_crash() {
    let mut r = Rig::with_bug(config(1 << 20), Some(InjectedBug::ResizeBeforeDurable));
    r.hold = true;
    resize(&mut r, "thin", 64 * MIB).unwrap();
    assert_eq!(resized(&r, "thin"), Some(64 * MIB), "announced at once");
    r.crash_and_mount();
    assert_eq!(size(&r, "thin"), 40 * MIB, "the crash took the size back");
}

/// A migration's per-chunk state is sized on the volume when it starts: while a resize of
/// the volume is being written, a migration is refused (DST seed 6846 started one through
/// `Engine::start_migration`, and indexed past its arrays once the volume grew), and a
/// resize of a migrating volume is refused the other way round.
#[test]
fn a_volume_is_not_migrated_and_resized_at_once() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, &pattern(8, 4096));
    r.flush("thin");
    r.hold = true;
    resize(&mut r, "thin", 48 * MIB).unwrap();
    let v = r.engine.volume_id("thin").unwrap();
    let mut out = Outputs::default();
    let e = r
        .engine
        .start_migration(r.now, v, MigrationParams::new(PoolId(0)), &mut out)
        .unwrap_err();
    r.drain(out);
    assert!(e.contains("being resized"), "{e}");
    while r.release_one().is_some() {}
    assert_eq!(size(&r, "thin"), 48 * MIB);
    // The job stays under way while its copies are held.
    let mut out = Outputs::default();
    r.engine
        .start_migration(r.now, v, MigrationParams::new(PoolId(0)), &mut out)
        .unwrap();
    r.drain(out);
    let e = resize(&mut r, "thin", 56 * MIB).unwrap_err();
    assert!(e.to_string().contains("migrating"), "{e}");
}

/// A volume created at run time (so no configured size grows it back at mount), 40 MiB.
fn created(r: &mut Rig, name: &str) {
    control(
        r,
        Control::CreateVolume {
            config: new_volume(
                name,
                40 * MIB,
                1,
                tiervisor_engine::config::Provisioning::Thin,
            ),
        },
    )
    .unwrap();
}

fn trim(r: &mut Rig, name: &str, off: u64, len: u64) {
    assert!(r.req(name, ReqKind::Trim, off, len, None).result.is_ok());
}

/// A shrink is refused while data lies past the new end; once the tail is trimmed it
/// shrinks at once, keeps the new size across a crash, and a later growth reads zeros
/// where the cut data was (the cut chunks are unmapped, not left behind).
#[test]
fn a_trimmed_tail_shrinks_and_a_later_growth_reads_zeros_there() {
    let mut r = Rig::new(config(1 << 20));
    created(&mut r, "s");
    r.write("s", 0, &pattern(1, 65536));
    r.write("s", 30 * MIB, &pattern(2, 65536));
    r.flush("s");
    let e = resize(&mut r, "s", 20 * MIB).unwrap_err();
    assert!(e.to_string().contains("shrink to at least 32505856"), "{e}");
    assert_eq!(size(&r, "s"), 40 * MIB);
    trim(&mut r, "s", 20 * MIB, 20 * MIB);
    r.flush("s");
    assert_eq!(resize(&mut r, "s", 20 * MIB), Ok(()));
    assert_eq!(size(&r, "s"), 20 * MIB);
    assert!(write_fails(&mut r, "s", 20 * MIB));
    assert_eq!(resized(&r, "s"), Some(20 * MIB), "{:?}", r.events);
    r.engine.check_invariants().unwrap();
    r.crash_and_mount();
    r.engine.check_invariants().unwrap();
    assert_eq!(size(&r, "s"), 20 * MIB);
    assert_eq!(r.read("s", 0, 65536), pattern(1, 65536));
    assert_eq!(resize(&mut r, "s", 40 * MIB), Ok(()));
    assert_eq!(r.read("s", 30 * MIB, 65536), vec![0u8; 65536]);
    r.crash_and_mount();
    assert_eq!(r.read("s", 30 * MIB, 65536), vec![0u8; 65536]);
    assert_eq!(r.read("s", 0, 65536), pattern(1, 65536));
}

/// Whichever device operation of a shrink (its checkpoint, then the table) a crash comes
/// before, the volume mounts at its old size or its new one with every flushed write, and
/// the table never says the new size before the smaller checkpoint is durable (a mount
/// would then replay journal records past the end).
#[test]
fn a_crash_at_any_point_of_a_shrink_leaves_the_old_size_or_the_new() {
    let setup = || {
        let mut r = Rig::new(config(1 << 20));
        created(&mut r, "s");
        r.write("s", 0, &pattern(4, 4096));
        // Journal records naming chunks the shrink cuts: written, then trimmed.
        r.write("s", 35 * MIB, &pattern(6, 4096));
        trim(&mut r, "s", 30 * MIB, 10 * MIB);
        r.flush("s");
        r.hold = true;
        assert_eq!(resize(&mut r, "s", 30 * MIB), Ok(()));
        r
    };
    let mut r = setup();
    let mut total = 0;
    while r.release_one().is_some() {
        total += 1;
    }
    assert!(total >= 2, "a checkpoint and a table write: {total}");
    assert_eq!(resized(&r, "s"), Some(30 * MIB));
    let mut saw = [false; 2];
    for k in 0..=total {
        let mut r = setup();
        for _ in 0..k {
            r.release_one();
        }
        let announced = resized(&r, "s").is_some();
        assert_eq!(announced, k == total, "announced after {k} of {total}");
        r.crash_and_mount();
        r.engine.check_invariants().unwrap();
        let now = size(&r, "s");
        assert!(now == 30 * MIB || now == 40 * MIB, "{now} after {k}");
        saw[(now == 30 * MIB) as usize] = true;
        assert!(
            !announced || now == 30 * MIB,
            "announced, then lost, after {k}"
        );
        assert_eq!(r.read("s", 0, 4096), pattern(4, 4096));
        if now == 40 * MIB {
            assert_eq!(r.read("s", 35 * MIB, 4096), vec![0u8; 4096], "after {k}");
        }
    }
    assert_eq!(saw, [true, true], "both outcomes are reachable");
}

/// What a shrink must not cut, or cannot do now, is refused with nothing changed.
#[test]
fn a_shrink_that_would_cut_something_is_refused() {
    let mut r = Rig::new(config(1 << 20));
    created(&mut r, "s");
    // A write in flight to the tail.
    r.hold = true;
    let id = r.submit("s", ReqKind::Write, 39 * MIB, Some(&pattern(7, 4096)), 4096);
    let e = resize(&mut r, "s", 20 * MIB).unwrap_err();
    assert!(
        matches!(e, ControlError::Busy(_) | ControlError::Invalid(_)),
        "{e}"
    );
    assert_eq!(size(&r, "s"), 40 * MIB);
    while r.release_one().is_some() {}
    r.hold = false;
    assert!(r.take_done(id).is_some_and(|c| c.result.is_ok()));
    assert_eq!(r.read("s", 39 * MIB, 4096), pattern(7, 4096));
    // A partly written last chunk: the new end inside it cuts its data.
    let e = resize(&mut r, "s", 39 * MIB + 512).unwrap_err();
    assert!(e.to_string().contains("data lies past the new end"), "{e}");
    // Thick volumes neither grow nor shrink.
    let e = resize(&mut r, "thick", 8 * MIB).unwrap_err();
    assert!(e.to_string().contains("thick"), "{e}");
    r.engine.check_invariants().unwrap();
}
