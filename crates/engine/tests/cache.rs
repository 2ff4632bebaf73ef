//! `cache` placement (issue 17): the fast pool as a write-back cache of the slow pool.
//! A fill copies a chunk and keeps its slow slot; a clean eviction costs no I/O; a dirty
//! one writes back first; everything cached is dirty after a crash; bcache's sequential
//! cutoff; and the injected bug `cache-clean-too-early` is caught.

mod common;

use common::*;
use tiervisor_engine::config::{CachePolicy, Placement, TieringConfig};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const TICK: u64 = 20_000_000;

/// The "thin" volume on the HDD, cached on the SSD with a budget of `budget` chunks.
/// `writeback_percent = 100` keeps dirty chunks dirty until they are evicted.
fn cache_config(policy: CachePolicy, budget: u64, writeback_percent: u32) -> EngineConfig {
    let mut cfg = config(1 << 20);
    cfg.volumes[0].placement = Placement::Cache {
        cache_policy: policy,
        fast_budget_bytes: budget * MIB,
    };
    cfg.volumes[0].fast_pool = Some(SSD);
    cfg.tiering = TieringConfig {
        interval_ns: 10_000_000,
        max_moves: 2,
        bytes_per_s: 1 << 30,
        writeback_percent,
        ..TieringConfig::default()
    };
    cfg
}

fn vid(r: &Rig) -> VolumeId {
    r.engine.volume_id("thin").unwrap()
}

fn loc(r: &Rig, chunk: u64) -> Option<PoolId> {
    r.engine.chunk_location(vid(r), chunk).map(|(p, _)| p)
}

fn cached(r: &Rig, chunk: u64) -> Option<cache::CachedChunk> {
    r.engine.cached_chunk(vid(r), chunk)
}

fn ticks(r: &mut Rig, n: usize) {
    for _ in 0..n {
        r.tick(TICK);
    }
}

/// Chunks 0 and 1 written (on the HDD), then read once each and cached by bcache.
fn two_cached(writeback_percent: u32) -> (Rig, Vec<Vec<u8>>) {
    let mut r = Rig::new(cache_config(CachePolicy::Bcache, 2, writeback_percent));
    let data: Vec<Vec<u8>> = (0..4).map(|i| pattern(i as u8 + 1, MIB as usize)).collect();
    for (c, d) in data.iter().enumerate() {
        r.write("thin", c as u64 * MIB, d);
    }
    r.flush("thin");
    for c in 0..4 {
        assert_eq!(loc(&r, c), Some(HDD), "a cache starts cold: chunk {c}");
    }
    // The sequential writes were first accesses too: bcache admitted all four, so the
    // two-chunk cache churned; then reads of chunks 0 and 1 bring them back.
    ticks(&mut r, 20);
    for c in 0..2u64 {
        assert_eq!(
            r.read("thin", c * MIB + 4096, 4096),
            &data[c as usize][4096..8192]
        );
    }
    ticks(&mut r, 20);
    for c in 0..2 {
        assert_eq!(loc(&r, c), Some(SSD), "chunk {c} was filled");
    }
    (r, data)
}

#[test]
fn a_fill_copies_the_chunk_and_keeps_its_slow_slot() {
    let (mut r, data) = two_cached(10);
    for c in 0..2u64 {
        let e = cached(&r, c).expect("cached");
        assert_eq!(e.slow.0, HDD);
        assert!(!e.dirty, "a fresh fill is clean");
        // The slow slot still holds the data.
        let off = (e.slow.1 * MIB) as usize + tiervisor_engine::layout::DATA_START_BYTES as usize;
        assert_eq!(&r.devs[1][off..off + MIB as usize], &data[c as usize][..]);
        assert_eq!(r.read("thin", c * MIB, MIB), data[c as usize]);
    }
    let rep = r.engine.volume_report(vid(&r)).unwrap();
    assert!(rep.promotions >= 2);
    r.engine.check_invariants().unwrap();
    // The fill is journaled: after a crash the chunk is still cached, and dirty.
    r.flush("thin");
    r.crash_and_mount();
    for c in 0..2u64 {
        assert_eq!(loc(&r, c), Some(SSD));
        assert!(
            cached(&r, c).unwrap().dirty,
            "everything cached is dirty at mount"
        );
        assert_eq!(r.read("thin", c * MIB, MIB), data[c as usize]);
    }
    r.engine.check_invariants().unwrap();
}

#[test]
fn a_clean_eviction_does_no_io() {
    let (mut r, data) = two_cached(100);
    // Chunk 2 wants in; the cache is full of clean chunks.
    assert_eq!(r.read("thin", 2 * MIB, 4096), &data[2][..4096]);
    let before = r.engine.volume_report(vid(&r)).unwrap();
    r.hold = true;
    r.tick(TICK);
    let rep = r.engine.volume_report(vid(&r)).unwrap();
    assert_eq!(rep.demotions, before.demotions + 1, "one chunk was evicted");
    assert!(
        !r.held
            .iter()
            .any(|op| op.len_bytes == MIB && op.pool == SSD),
        "no chunk was copied from the fast pool for the eviction: {:?}",
        r.held
    );
    // The fill of chunk 2 may start at once (the pool has free chunks beyond the
    // budget): its copy is the only one.
    assert_eq!(rep.migrated_bytes, before.migrated_bytes);
    while r.release_one().is_some() {}
    r.hold = false;
    ticks(&mut r, 200);
    assert_eq!(
        loc(&r, 2),
        Some(SSD),
        "chunk 2 was filled once the room was free"
    );
    for (c, d) in data.iter().enumerate() {
        assert_eq!(&r.read("thin", c as u64 * MIB, MIB), d, "chunk {c}");
    }
    r.engine.check_invariants().unwrap();
}

/// Chunk 0 cached and dirty with `new`, then evicted for chunk 2 (its writeback held
/// at the first device operation when `hold`).
fn dirty_victim(bug: Option<InjectedBug>) -> (Rig, Vec<Vec<u8>>) {
    let mut r = Rig::with_bug(cache_config(CachePolicy::Bcache, 2, 100), bug);
    let mut data: Vec<Vec<u8>> = (0..4).map(|i| pattern(i as u8 + 1, MIB as usize)).collect();
    for (c, d) in data.iter().enumerate() {
        r.write("thin", c as u64 * MIB, d);
    }
    ticks(&mut r, 20);
    for c in 0..2u64 {
        r.read("thin", c * MIB, 4096);
    }
    ticks(&mut r, 20);
    assert_eq!(loc(&r, 0), Some(SSD));
    data[0] = pattern(40, MIB as usize);
    r.write("thin", 0, &data[0]);
    assert!(
        cached(&r, 0).unwrap().dirty,
        "a write to a cached chunk dirties it"
    );
    r.read("thin", MIB, 4096);
    r.read("thin", 2 * MIB, 4096);
    r.flush("thin");
    (r, data)
}

#[test]
fn a_dirty_eviction_writes_back_first() {
    let (mut r, data) = dirty_victim(None);
    r.hold = true;
    r.tick(TICK);
    let copy: Vec<_> = r.held.iter().filter(|op| op.len_bytes == MIB).collect();
    assert_eq!(
        copy.iter().map(|op| (op.pool, op.kind)).collect::<Vec<_>>(),
        vec![(SSD, DevKind::Read)],
        "the writeback reads the fast copy first"
    );
    while r.release_one().is_some() {}
    r.hold = false;
    assert_eq!(loc(&r, 0), Some(HDD), "evicted after its writeback");
    assert_eq!(r.read("thin", 0, MIB), data[0]);
    ticks(&mut r, 200);
    r.flush("thin");
    r.power_loss();
    for (c, d) in data.iter().enumerate() {
        assert_eq!(&r.read("thin", c as u64 * MIB, MIB), d, "chunk {c}");
    }
    r.engine.check_invariants().unwrap();
}

/// The injected bug maps the chunk back when the writeback starts: a read in between
/// sees the old data. Without it the read waits for nothing and sees the new data.
#[test]
fn cache_clean_too_early_is_caught() {
    for bug in [None, Some(InjectedBug::CacheCleanTooEarly)] {
        let (mut r, data) = dirty_victim(bug);
        r.hold = true;
        r.tick(TICK);
        let id = r.submit("thin", ReqKind::Read, 0, None, MIB);
        while r.release_one().is_some() {}
        r.hold = false;
        let got = r.take_done(id).unwrap().data.unwrap();
        if bug.is_none() {
            assert_eq!(&got[..], &data[0][..]);
        } else {
            assert_ne!(&got[..], &data[0][..], "the bug must show stale data");
        }
    }
}

/// Power fails after 0, 1, 2, ... device operations of a dirty eviction, the fill that
/// follows and their commits: every flushed byte must read back, for thin and thick.
#[test]
fn power_loss_at_every_point_of_eviction_and_fill_loses_nothing() {
    let mut seen_evicted = false;
    for n in 0..40 {
        let (mut r, data) = dirty_victim(None);
        r.volatile = true;
        r.unflushed = vec![Vec::new(); r.devs.len()];
        r.hold = true;
        r.tick(TICK);
        let mut steps = 0;
        while steps < n {
            if r.release_one().is_none() {
                r.tick(TICK);
                if r.held.is_empty() {
                    break;
                }
            }
            steps += 1;
        }
        seen_evicted |= loc(&r, 0) == Some(HDD);
        r.power_loss();
        for (c, d) in data.iter().enumerate() {
            assert_eq!(
                &r.read("thin", c as u64 * MIB, MIB),
                d,
                "chunk {c} after {n} ops"
            );
        }
        r.engine.check_invariants().unwrap();
        // And the cache keeps working after the mount.
        ticks(&mut r, 100);
        r.read("thin", 3 * MIB, 4096);
        ticks(&mut r, 100);
        for (c, d) in data.iter().enumerate() {
            assert_eq!(
                &r.read("thin", c as u64 * MIB, MIB),
                d,
                "chunk {c} after {n} ops"
            );
        }
        r.engine.check_invariants().unwrap();
    }
    assert!(seen_evicted, "some crash points come after the eviction");
}

/// The same on a thick volume, whose slow slot is its home slot.
#[test]
fn thick_volume_cache_survives_power_loss() {
    let mut cfg = cache_config(CachePolicy::Smq, 2, 100);
    cfg.volumes[0].provisioning = Provisioning::Thick;
    let mut r = Rig::new(cfg);
    let mut data: Vec<Vec<u8>> = (0..4).map(|i| pattern(i as u8 + 7, MIB as usize)).collect();
    for (c, d) in data.iter().enumerate() {
        r.write("thin", c as u64 * MIB, d);
    }
    // smq: the write was one access, a read the second.
    for c in 0..2u64 {
        r.read("thin", c * MIB, 4096);
    }
    ticks(&mut r, 3);
    assert!(cached(&r, 0).is_some() && cached(&r, 1).is_some());
    data[1] = pattern(99, MIB as usize);
    r.write("thin", MIB, &data[1]);
    r.flush("thin");
    r.volatile = true;
    for c in 2..4u64 {
        for _ in 0..3 {
            r.read("thin", c * MIB, 4096);
        }
    }
    ticks(&mut r, 50);
    r.power_loss();
    for (c, d) in data.iter().enumerate() {
        assert_eq!(&r.read("thin", c as u64 * MIB, MIB), d, "chunk {c}");
    }
    r.engine.check_invariants().unwrap();
}

/// The FLUSH rule: a write to a chunk the cache had clean, a FLUSH, a power loss, then an
/// eviction: the new data is read (everything cached is dirty at mount, so the eviction
/// writes it back rather than dropping it).
#[test]
fn a_flushed_write_to_a_clean_cached_chunk_survives_crash_and_eviction() {
    let (mut r, mut data) = two_cached(100);
    assert!(!cached(&r, 0).unwrap().dirty);
    r.volatile = true;
    data[0][100..5000].copy_from_slice(&pattern(77, 4900));
    r.write("thin", 100, &data[0][100..5000]);
    r.flush("thin");
    r.power_loss();
    assert!(cached(&r, 0).unwrap().dirty);
    // Evict both: chunks 2 and 3 want in.
    for _ in 0..3 {
        for c in 2..4u64 {
            r.read("thin", c * MIB, 4096);
        }
        ticks(&mut r, 100);
    }
    assert_eq!(loc(&r, 0), Some(HDD), "chunk 0 was evicted");
    for (c, d) in data.iter().enumerate() {
        assert_eq!(&r.read("thin", c as u64 * MIB, MIB), d, "chunk {c}");
    }
    r.engine.check_invariants().unwrap();
}

#[test]
fn bcache_bypasses_sequential_streams_past_the_cutoff() {
    let mut r = Rig::new(cache_config(CachePolicy::Bcache, 32, 10));
    let d = pattern(3, 8 * MIB as usize);
    // One sequential stream of 8 MiB in 1 MiB writes: the first 4 MiB are admitted,
    // the rest bypasses the cache (sequential_cutoff = 4 MiB).
    for c in 0..8u64 {
        r.write("thin", c * MIB, &d[(c * MIB) as usize..][..MIB as usize]);
    }
    ticks(&mut r, 50);
    let got: Vec<bool> = (0..8).map(|c| cached(&r, c).is_some()).collect();
    assert_eq!(got, [true, true, true, true, false, false, false, false]);
    // A random read of a bypassed chunk is admitted.
    r.read("thin", 6 * MIB + 8192, 4096);
    ticks(&mut r, 50);
    assert!(cached(&r, 6).is_some());
    assert_eq!(r.read("thin", 0, 8 * MIB), d);
    r.engine.check_invariants().unwrap();
}

#[test]
fn smq_promotes_on_the_second_access_only() {
    let mut r = Rig::new(cache_config(CachePolicy::Smq, 8, 10));
    let d = pattern(5, MIB as usize);
    r.write("thin", 0, &d);
    r.write("thin", 3 * MIB, &d);
    ticks(&mut r, 20);
    // The write was one access of each: not yet.
    assert!(cached(&r, 0).is_none() && cached(&r, 3).is_none());
    r.read("thin", 4096, 4096);
    ticks(&mut r, 20);
    assert!(cached(&r, 0).is_some(), "second access");
    assert!(cached(&r, 3).is_none(), "one access");
}

/// Issue 17's bar: the mapping table (map, monitor, cache table) stays at or under 32
/// bytes per chunk with every chunk cached.
#[test]
fn a_fully_cached_volume_stays_within_32_bytes_per_chunk() {
    let mut cfg = cache_config(CachePolicy::Bcache, 40, 100);
    cfg.volumes[0].size_bytes = 16 * MIB;
    let mut r = Rig::new(cfg);
    let d = pattern(8, MIB as usize);
    for c in 0..16u64 {
        r.write("thin", c * MIB, &d);
    }
    for _ in 0..4 {
        for c in 0..16u64 {
            r.read("thin", c * MIB + 8192, 4096);
        }
        ticks(&mut r, 20);
    }
    let missing: Vec<u64> = (0..16).filter(|&c| cached(&r, c).is_none()).collect();
    assert!(missing.is_empty(), "every chunk cached: {missing:?}");
    let rep = r.engine.volume_report(vid(&r)).unwrap();
    println!(
        "map memory with all 16 chunks cached: {} bytes, {:.1} bytes per chunk",
        rep.map_memory_bytes, rep.map_bytes_per_chunk
    );
    assert!(
        rep.map_bytes_per_chunk <= 32.0,
        "{}",
        rep.map_bytes_per_chunk
    );
}

/// A 4 KiB write dirties one sixty-fourth of its chunk, and the writeback copies only
/// that part (bcache writes back dirty extents, not whole buckets); after a mount the
/// whole chunk is dirty again.
#[test]
fn a_small_write_is_written_back_alone() {
    let (mut r, mut data) = two_cached(100);
    let new = pattern(55, 4096);
    data[0][20_000..24_096].copy_from_slice(&new);
    r.write("thin", 20_000, &new);
    r.read("thin", MIB, 4096);
    r.read("thin", 2 * MIB, 4096);
    r.hold = true;
    r.tick(TICK);
    let copies: Vec<_> = r
        .held
        .iter()
        .filter(|op| op.pool == SSD && op.kind == DevKind::Read)
        .map(|op| op.len_bytes)
        .collect();
    // 20 000..24 096 spans parts 1 (16 384..32 768) only.
    assert_eq!(copies, vec![MIB / 64], "{:?}", r.held);
    while r.release_one().is_some() {}
    r.hold = false;
    assert_eq!(loc(&r, 0), Some(HDD), "evicted after its writeback");
    ticks(&mut r, 100);
    r.flush("thin");
    r.power_loss();
    for (c, d) in data.iter().enumerate() {
        assert_eq!(&r.read("thin", c as u64 * MIB, MIB), d, "chunk {c}");
    }
    r.engine.check_invariants().unwrap();
}

/// 24 chunks cached, then all of them written in full: 24 dirty chunks. The tier tick
/// runs every 3 s, so a cleaner that only starts writebacks at ticks is slow to show.
fn all_dirty(policy: CachePolicy) -> (Rig, Vec<Vec<u8>>) {
    let mut cfg = cache_config(policy, 24, 10);
    cfg.tiering.interval_ns = 3_000_000_000;
    let mut r = Rig::new(cfg);
    for c in 0..24u64 {
        r.write("thin", c * MIB, &pattern(c as u8, MIB as usize));
    }
    for c in 0..24u64 {
        r.read("thin", c * MIB + 8192, 4096);
    }
    for _ in 0..15 {
        r.tick(3_000_000_000);
    }
    let missing: Vec<u64> = (0..24).filter(|&c| cached(&r, c).is_none()).collect();
    assert!(missing.is_empty(), "every chunk cached: {missing:?}");
    let data: Vec<Vec<u8>> = (0..24)
        .map(|c| pattern(c as u8 + 100, MIB as usize))
        .collect();
    for (c, d) in data.iter().enumerate() {
        r.write("thin", c as u64 * MIB, d);
    }
    assert_eq!(dirty(&r), 24);
    (r, data)
}

fn dirty(r: &Rig) -> u64 {
    let rep = r.engine.volume_report(vid(r)).unwrap();
    rep.cache.unwrap().dirty_chunks
}

/// smq (dm-cache's `clean_target_met`): no background writeback while the volume is
/// busy, every dirty chunk once it has been idle for a second. Before, cleaning ran at
/// the tier tick only (one writeback per tick here), busy or not, and stopped at
/// `writeback_percent`.
#[test]
fn smq_cleans_everything_once_idle_and_nothing_while_busy() {
    let (mut r, data) = all_dirty(CachePolicy::Smq);
    // Busy: a read every half second for 6 s.
    for _ in 0..12 {
        r.read("thin", 8192, 4096);
        r.tick(500_000_000);
    }
    assert_eq!(dirty(&r), 24, "nothing written back while busy");
    // Idle: the next tier tick after a second without requests cleans everything.
    for _ in 0..8 {
        r.tick(500_000_000);
    }
    assert_eq!(dirty(&r), 0, "every chunk written back once idle");
    let rep = r.engine.volume_report(vid(&r)).unwrap();
    assert_eq!(rep.cache.unwrap().dirty_bytes, 0);
    for (c, d) in data.iter().enumerate() {
        let e = cached(&r, c as u64).unwrap();
        let off = (e.slow.1 * MIB) as usize + tiervisor_engine::layout::DATA_START_BYTES as usize;
        assert_eq!(
            &r.devs[1][off..off + MIB as usize],
            &d[..],
            "slow copy of {c}"
        );
    }
    r.engine.check_invariants().unwrap();
}

/// bcache (`__update_writeback_rate`): after a burst, writeback is paced by the PI
/// controller on dirty bytes over `writeback_percent` (neither all at once nor nothing),
/// and once the volume has been idle for 30 s everything is written back. Before, with
/// one writeback per 3 s tick, 33 s left about half the 24 chunks dirty.
#[test]
fn bcache_paces_writeback_then_cleans_everything_when_idle() {
    let (mut r, data) = all_dirty(CachePolicy::Bcache);
    for _ in 0..7 {
        r.tick(3_000_000_000);
    }
    let paced = dirty(&r);
    assert!(
        paced > 2 && paced < 24,
        "paced writeback after 21 s: {paced} of 24 dirty"
    );
    for _ in 0..4 {
        r.tick(3_000_000_000);
    }
    assert_eq!(dirty(&r), 0, "idle for 30 s: everything written back");
    for (c, d) in data.iter().enumerate() {
        assert_eq!(&r.read("thin", c as u64 * MIB, MIB), d, "chunk {c}");
    }
    r.engine.check_invariants().unwrap();
}

/// A write to a chunk under a background writeback waits for it, so the writeback's end
/// cannot mark the write clean. The injected `cache-writeback-ignores-writes` lets the
/// write through: the writeback marks the chunk clean over it, and the clean eviction
/// that follows maps the chunk back to a slow slot without it.
#[test]
fn a_write_during_a_background_writeback_survives_the_eviction() {
    for bug in [None, Some(InjectedBug::CacheWritebackIgnoresWrites)] {
        let mut r = Rig::with_bug(cache_config(CachePolicy::Smq, 2, 10), bug);
        let mut data: Vec<Vec<u8>> = (0..4).map(|i| pattern(i as u8 + 1, MIB as usize)).collect();
        for (c, d) in data.iter().enumerate() {
            r.write("thin", c as u64 * MIB, d);
        }
        for c in 0..2u64 {
            r.read("thin", c * MIB + 4096, 4096);
        }
        ticks(&mut r, 3);
        assert!(cached(&r, 0).is_some() && cached(&r, 1).is_some());
        data[0] = pattern(60, MIB as usize);
        r.write("thin", 0, &data[0]);
        // Idle for a second: smq starts writing chunk 0 back (held at its first read).
        r.hold = true;
        r.tick(1_100_000_000);
        assert!(
            r.held
                .iter()
                .any(|op| op.pool == SSD && op.kind == DevKind::Read && op.len_bytes == MIB),
            "{:?}",
            r.held
        );
        let new = pattern(61, 4096);
        data[0][8192..12288].copy_from_slice(&new);
        let id = r.submit("thin", ReqKind::Write, 8192, Some(&new), 4096);
        while r.release_one().is_some() {}
        r.hold = false;
        assert_eq!(r.take_done(id).unwrap().result, Ok(()));
        // Chunks 2 and 3 want in: both cached chunks are evicted.
        for _ in 0..3 {
            for c in 2..4u64 {
                r.read("thin", c * MIB, 4096);
            }
            ticks(&mut r, 100);
        }
        assert_eq!(loc(&r, 0), Some(HDD), "chunk 0 was evicted");
        let got = r.read("thin", 0, MIB);
        if bug.is_none() {
            assert_eq!(got, data[0]);
            r.engine.check_invariants().unwrap();
        } else {
            assert_ne!(got, data[0], "the bug must lose the write");
        }
    }
}
