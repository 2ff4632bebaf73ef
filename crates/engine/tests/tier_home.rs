//! Kept homes (`[tiering] keep_home`, `engine/src/tier_home.rs`): a promotion copies the
//! chunk and keeps its home; demoting a clean chunk is a remap (no copy), a dirty one
//! copies the chunk into its kept home. Driven by directed moves of a pinned volume with
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
    let b = pattern(9, 8192);
    r.write("thin", 4096, &b);
    a[4096..4096 + 8192].copy_from_slice(&b);
    r.flush("thin");
    directed_move(&mut r, 0, HDD);
    r.tick(10_000_000);
    assert_eq!(loc(&r, 0), Some(home), "demoted into its kept home");
    if r.read("thin", 0, MIB) != a {
        return Err("the write made after the promotion was lost".into());
    }
    if bug.is_none() {
        assert_eq!(migrated(&r), 2 * MIB, "dirty: copied back");
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
