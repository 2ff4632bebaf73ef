//! Kept homes (`[tiering] keep_home`, `engine/src/tier_home.rs`): a promotion copies the
//! chunk and keeps its home; demoting a clean chunk is a remap (no copy), a dirty one
//! copies the span written since the promotion into its kept home, then remaps. Driven by directed moves of a pinned volume with
//! a fast pool (`Engine::move_chunk`), which take the same path as `hot`'s moves.

mod common;

use common::*;
use tiervisor_engine::cache::CachedChunk;
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);

fn keep_home_config() -> EngineConfig {
    let mut cfg = config(1 << 20);
    cfg.volumes[0].placement = Placement::Pinned;
    cfg.volumes[0].fast_pool = Some(SSD);
    cfg.tiering = TieringConfig {
        max_moves: 4,
        bytes_per_s: 1 << 30,
        keep_home: true,
        ..TieringConfig::default()
    };
    cfg
}

fn loc(r: &Rig, chunk: u64) -> Option<(PoolId, u64)> {
    let v = r.engine.volume_id("thin").unwrap();
    r.engine.chunk_location(v, chunk)
}

/// Ask for chunk `c` to move to `to` and run what that starts (unless operations are
/// held).
fn directed_move(r: &mut Rig, c: u64, to: PoolId) {
    let v = r.engine.volume_id("thin").unwrap();
    r.tick(1_000_000_000); // the bucket refills
    let mut out = Outputs::default();
    let now = r.now;
    assert_eq!(r.engine.move_chunk(now, v, c, to, &mut out), Ok(true));
    r.drain(out);
}

fn migrated(r: &Rig) -> u64 {
    let v = r.engine.volume_id("thin").unwrap();
    r.engine.volume_report(v).unwrap().migrated_bytes
}

/// Write a pattern of `len` bytes (seed `seed`) at `off` of "thin" and mirror it into the
/// expected image `a`.
fn write_expect(r: &mut Rig, a: &mut [u8], off: u64, seed: u8, len: usize) {
    let b = pattern(seed, len);
    r.write("thin", off, &b);
    a[off as usize..off as usize + len].copy_from_slice(&b);
}

/// Chunk 0 written with pattern 1 and flushed, then promoted: (rig, data, home slot).
fn promoted(bug: Option<InjectedBug>) -> (Rig, Vec<u8>, (PoolId, u64)) {
    let mut r = Rig::with_bug(keep_home_config(), bug);
    let a = pattern(1, MIB as usize);
    r.write("thin", 0, &a);
    r.flush("thin");
    let home = loc(&r, 0).unwrap();
    assert_eq!(home.0, HDD, "pinned: written on its home pool");
    directed_move(&mut r, 0, SSD);
    r.tick(10_000_000);
    r.flush("thin"); // the promotion's record is durable
    assert_eq!(loc(&r, 0).map(|l| l.0), Some(SSD), "promoted");
    let v = r.engine.volume_id("thin").unwrap();
    assert_eq!(
        r.engine.cached_chunk(v, 0),
        Some(CachedChunk {
            slow: home,
            dirty: false
        }),
        "the home is kept, clean"
    );
    assert_eq!(migrated(&r), MIB, "the promotion copied the chunk");
    (r, a, home)
}

#[test]
fn a_clean_demotion_is_a_remap_and_a_crash_before_its_record_keeps_the_fast_copy() {
    let (mut r, a, home) = promoted(None);
    directed_move(&mut r, 0, HDD);
    assert_eq!(loc(&r, 0), Some(home), "back on its home slot");
    assert_eq!(migrated(&r), MIB, "no copy");
    assert_eq!(r.read("thin", 0, MIB), a);
    r.crash_and_mount();
    assert_eq!(loc(&r, 0), Some(home));
    assert_eq!(r.read("thin", 0, MIB), a);
    r.engine.check_invariants().unwrap();

    // Again, but the engine dies with the remap's commit held: the chunk mounts on its
    // fast copy, its home still kept (and dirty, as every kept home is at mount).
    let (mut r, a, home) = promoted(None);
    r.hold = true;
    directed_move(&mut r, 0, HDD);
    assert_eq!(loc(&r, 0), Some(home), "remapped in memory");
    assert!(!r.held.is_empty(), "its commit is held");
    r.crash_and_mount();
    assert_eq!(
        loc(&r, 0).map(|l| l.0),
        Some(SSD),
        "the remap was not durable"
    );
    let v = r.engine.volume_id("thin").unwrap();
    assert_eq!(
        r.engine.cached_chunk(v, 0),
        Some(CachedChunk {
            slow: home,
            dirty: true
        })
    );
    assert_eq!(r.read("thin", 0, MIB), a);
    r.engine.check_invariants().unwrap();
    // Dirty since the mount: its demotion copies the chunk into the kept home.
    directed_move(&mut r, 0, HDD);
    r.tick(10_000_000);
    assert_eq!(loc(&r, 0), Some(home));
    assert_eq!(
        migrated(&r),
        MIB,
        "the copy back (stats count from the mount)"
    );
    assert_eq!(r.read("thin", 0, MIB), a);
    r.engine.check_invariants().unwrap();
}

/// A write to the fast copy after the promotion: the demotion copies the chunk back, and
/// the data survives it and a crash. With `hot-demotes-stale-home` the demotion remaps
/// to the stale home and the write is lost, which this catches.
fn written_then_demoted(bug: Option<InjectedBug>) -> Result<(), String> {
    let (mut r, mut a, home) = promoted(bug);
    write_expect(&mut r, &mut a, 4096, 9, 8192);
    r.flush("thin");
    directed_move(&mut r, 0, HDD);
    r.tick(10_000_000);
    assert_eq!(loc(&r, 0), Some(home), "demoted into its kept home");
    if r.read("thin", 0, MIB) != a {
        return Err("the write made after the promotion was lost".into());
    }
    if bug.is_none() {
        // One write in the first thirty-second: that part goes back, not the chunk.
        assert_eq!(migrated(&r), MIB + MIB / 32, "dirty: its span copied back");
    }
    r.crash_and_mount();
    if r.read("thin", 0, MIB) != a {
        return Err("lost after a crash".into());
    }
    r.engine.check_invariants()
}

#[test]
fn a_write_after_the_promotion_makes_the_demotion_copy_and_the_injected_bug_is_caught() {
    written_then_demoted(None).unwrap();
    let e = written_then_demoted(Some(InjectedBug::HotDemotesStaleHome)).unwrap_err();
    assert!(e.contains("lost"), "{e}");
}

/// A write that arrives right after a clean demotion, before its remap is durable, goes
/// to the home (where the map now points) and a FLUSH then makes both durable together.
#[test]
fn a_write_racing_a_clean_demotion_lands_on_the_home_and_survives() {
    let (mut r, mut a, home) = promoted(None);
    r.hold = true;
    directed_move(&mut r, 0, HDD);
    r.hold = false;
    let b = pattern(7, 4096);
    let id = r.submit("thin", ReqKind::Write, 8192, Some(&b), 4096);
    a[8192..8192 + 4096].copy_from_slice(&b);
    let f = r.submit("thin", ReqKind::Flush, 0, None, 0);
    while r.release_one().is_some() {}
    r.tick(10_000_000);
    assert_eq!(r.take_done(id).map(|c| c.result), Some(Ok(())));
    assert_eq!(r.take_done(f).map(|c| c.result), Some(Ok(())));
    assert_eq!(loc(&r, 0), Some(home));
    r.crash_and_mount();
    assert_eq!(loc(&r, 0), Some(home), "the FLUSH made the remap durable");
    assert_eq!(r.read("thin", 0, MIB), a);
    r.engine.check_invariants().unwrap();
}

/// A trim of the whole chunk while its dirty demotion copies it home waits for the copy,
/// then frees both copies once: nothing is freed twice or left claimed.
#[test]
fn a_trim_racing_a_dirty_demotion_waits_and_frees_the_home_once() {
    let (mut r, _, _) = promoted(None);
    r.write("thin", 0, &pattern(3, 4096));
    r.hold = true;
    directed_move(&mut r, 0, HDD);
    r.hold = false;
    let t = r.submit("thin", ReqKind::Trim, 0, None, MIB);
    assert!(r.take_done(t).is_none(), "the trim waits for the copy");
    while r.release_one().is_some() {}
    r.tick(10_000_000);
    assert_eq!(r.take_done(t).map(|c| c.result), Some(Ok(())));
    assert_eq!(loc(&r, 0), None, "trimmed: unmapped");
    assert_eq!(r.read("thin", 0, MIB), vec![0; MIB as usize]);
    r.engine.check_invariants().unwrap();
    r.tick(2_000_000_000);
    r.crash_and_mount();
    assert_eq!(r.read("thin", 0, MIB), vec![0; MIB as usize]);
    r.engine.check_invariants().unwrap();
}

/// Two writes far apart in a promoted chunk (sixty-fourths 6 and 18 of 1 MiB): the
/// demotion copies thirty-seconds 3 to 9, 224 KiB from 96 KiB, and both writes are at home.
/// With `hot-span-not-widened` the second write replaces the span, the first write's part
/// is not copied, and the test reports it lost.
fn two_writes_then_demoted(bug: Option<InjectedBug>) -> Result<(), String> {
    let (mut r, mut a, home) = promoted(bug);
    for (off, seed) in [(100 << 10, 5u8), (300 << 10, 6)] {
        write_expect(&mut r, &mut a, off, seed, 4096);
    }
    r.flush("thin");
    directed_move(&mut r, 0, HDD);
    r.tick(10_000_000);
    assert_eq!(loc(&r, 0), Some(home), "demoted into its kept home");
    if bug.is_none() {
        assert_eq!(migrated(&r), MIB + (224 << 10), "the span, not the chunk");
        let v = r.engine.volume_id("thin").unwrap();
        assert_eq!(r.engine.volume_report(v).unwrap().span_demotions, 1);
    }
    if r.read("thin", 0, MIB) != a {
        return Err("a write made after the promotion was lost".into());
    }
    r.crash_and_mount();
    if r.read("thin", 0, MIB) != a {
        return Err("a write was lost after a crash".into());
    }
    r.engine.check_invariants()
}

#[test]
fn a_dirty_demotion_copies_the_span_written_and_the_injected_bug_is_caught() {
    two_writes_then_demoted(None).unwrap();
    let e = two_writes_then_demoted(Some(InjectedBug::HotSpanNotWidened)).unwrap_err();
    assert!(e.contains("lost"), "{e}");
}

/// The span's copy lands and the chunk is remapped in memory, but the engine dies before
/// the remap's record is durable: the chunk mounts on its fast copy (the newest data),
/// dirty throughout, so its next demotion copies the whole chunk, not a span it no
/// longer knows.
#[test]
fn a_crash_between_the_span_copy_and_the_remap_commit_mounts_the_fast_copy() {
    let (mut r, mut a, home) = promoted(None);
    for (off, seed) in [(100 << 10, 5u8), (300 << 10, 6)] {
        write_expect(&mut r, &mut a, off, seed, 4096);
    }
    r.flush("thin");
    r.hold = true;
    directed_move(&mut r, 0, HDD);
    // Run the copy (its read, then its write) until the remap, no further: its record
    // waits for the commit timer.
    while loc(&r, 0) != Some(home) {
        assert!(r.release_one().is_some(), "the copy finishes");
    }
    assert_eq!(migrated(&r), MIB + (224 << 10));
    r.crash_and_mount();
    assert_eq!(
        loc(&r, 0).map(|l| l.0),
        Some(SSD),
        "the remap was not durable: the fast copy"
    );
    let v = r.engine.volume_id("thin").unwrap();
    assert_eq!(
        r.engine.cached_chunk(v, 0),
        Some(CachedChunk {
            slow: home,
            dirty: true
        }),
        "its home still kept, dirty"
    );
    assert_eq!(r.read("thin", 0, MIB), a);
    // A write after the mount (a part the span did not cover): the chunk was dirty
    // throughout already, so the demotion copies it all, and every write is at home.
    write_expect(&mut r, &mut a, 900 << 10, 8, 4096);
    r.flush("thin");
    directed_move(&mut r, 0, HDD);
    r.tick(10_000_000);
    assert_eq!(loc(&r, 0), Some(home));
    assert_eq!(
        migrated(&r),
        MIB,
        "the whole chunk (stats count from the mount)"
    );
    assert_eq!(r.read("thin", 0, MIB), a);
    r.crash_and_mount();
    assert_eq!(r.read("thin", 0, MIB), a);
    r.engine.check_invariants().unwrap();
}

/// While a span is copied home, a write to a part inside the span and one to a clean
/// part outside it (and a trim of another clean part) wait for the copy and the remap,
/// then land on the home: none goes to the fast copy the remap drops.
#[test]
fn writes_and_a_trim_racing_a_span_copy_wait_and_land_on_the_home() {
    let (mut r, mut a, home) = promoted(None);
    write_expect(&mut r, &mut a, 100 << 10, 5, 4096);
    r.flush("thin");
    r.hold = true;
    directed_move(&mut r, 0, HDD);
    r.hold = false;
    assert!(!r.held.is_empty(), "the span copy is in flight");
    let inside = pattern(11, 4096);
    let outside = pattern(12, 4096);
    let w1 = r.submit("thin", ReqKind::Write, 104 << 10, Some(&inside), 4096);
    let w2 = r.submit("thin", ReqKind::Write, 700 << 10, Some(&outside), 4096);
    let t = r.submit("thin", ReqKind::Trim, 512 << 10, None, 64 << 10);
    a[104 << 10..(104 << 10) + 4096].copy_from_slice(&inside);
    a[700 << 10..(700 << 10) + 4096].copy_from_slice(&outside);
    a[512 << 10..576 << 10].fill(0);
    for id in [w1, w2, t] {
        assert!(r.take_done(id).is_none(), "request {id} waits for the copy");
    }
    while r.release_one().is_some() {}
    r.tick(10_000_000);
    for id in [w1, w2, t] {
        assert_eq!(
            r.take_done(id).map(|c| c.result),
            Some(Ok(())),
            "request {id}"
        );
    }
    assert_eq!(loc(&r, 0), Some(home), "demoted");
    assert_eq!(
        migrated(&r),
        MIB + MIB / 32,
        "the span only (thirty-second 3)"
    );
    assert_eq!(r.read("thin", 0, MIB), a);
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(loc(&r, 0), Some(home));
    assert_eq!(r.read("thin", 0, MIB), a);
    r.engine.check_invariants().unwrap();
}
