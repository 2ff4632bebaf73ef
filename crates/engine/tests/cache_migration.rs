//! Live migration of `cache` volumes (issue 13; `jobs/migrate/cache_drain.rs`): the job
//! cleans and drops the cache, migrates the home copy with the chosen scheme, and caching
//! starts again on the new home. Every scheme against a reference copy of the volume
//! (reads during the job, after the pivot, after a crash), a power loss at each device
//! operation of the job, a thick cache volume, a cancel, the refusals, and the injected
//! bug `cache-migrate-drops-dirty`.

mod common;

use common::*;
use tiervisor_engine::config::{CachePolicy, Placement, TieringConfig};
use tiervisor_engine::jobs::migrate::{MigrationPhase, Scheme};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const HDD2: PoolId = PoolId(2);
const VOL: &str = "thin";
/// Chunks the tests write (of the volume's 40).
const CHUNKS: u64 = 6;
const TICK: u64 = 20_000_000;

/// The "thin" volume on the HDD, cached (bcache) on the SSD with a budget of 4 chunks,
/// dirty chunks kept dirty (`writeback_percent = 100`); and a third pool, `hdd2`.
fn cache_config() -> EngineConfig {
    let mut cfg = config(1 << 20);
    let mut p = cfg.pools[1].clone();
    p.name = "hdd2".into();
    cfg.pools.push(p);
    cfg.volumes[0].placement = Placement::Cache {
        cache_policy: CachePolicy::Bcache,
        fast_budget_bytes: 4 * MIB,
    };
    cfg.volumes[0].fast_pool = Some(SSD);
    cfg.tiering = TieringConfig {
        interval_ns: 10_000_000,
        max_moves: 2,
        bytes_per_s: 1 << 30,
        writeback_percent: 100,
        ..TieringConfig::default()
    };
    cfg
}

fn vid(r: &Rig) -> VolumeId {
    r.engine.volume_id(VOL).unwrap()
}

fn ticks(r: &mut Rig, n: usize) {
    for _ in 0..n {
        r.tick(TICK);
    }
}

fn cached(r: &Rig) -> Vec<u64> {
    let v = vid(r);
    (0..40)
        .filter(|&c| r.engine.cached_chunk(v, c).is_some())
        .collect()
}

fn dirty(r: &Rig) -> Vec<u64> {
    let v = vid(r);
    (0..40)
        .filter(|&c| r.engine.cached_chunk(v, c).is_some_and(|e| e.dirty))
        .collect()
}

/// Where the written chunks are mapped.
fn pools(r: &Rig) -> Vec<Option<PoolId>> {
    let v = vid(r);
    (0..CHUNKS)
        .map(|c| r.engine.chunk_location(v, c).map(|(p, _)| p))
        .collect()
}

/// The volume's first chunks written on the HDD, four of them cached on the SSD and two
/// of those dirty (written since their fill), flushed; and the reference.
fn setup_with(bug: Option<InjectedBug>) -> (Rig, Vec<u8>) {
    let mut r = Rig::with_bug(cache_config(), bug);
    let mut reference = fill_ref(&mut r, VOL, CHUNKS, 0..CHUNKS);
    r.flush(VOL);
    ticks(&mut r, 20);
    for c in 0..4u64 {
        r.read(VOL, c * MIB + 4096, 4096);
    }
    ticks(&mut r, 20);
    assert_eq!(cached(&r), vec![0, 1, 2, 3], "the setup caches chunks 0-3");
    write_ref(&mut r, VOL, &mut reference, 8192, 60, 8192);
    write_ref(&mut r, VOL, &mut reference, 2 * MIB + 300 * 1024, 61, 4096);
    r.flush(VOL);
    assert_eq!(dirty(&r), vec![0, 2], "chunks 0 and 2 are dirty");
    (r, reference)
}

fn setup() -> (Rig, Vec<u8>) {
    setup_with(None)
}

/// Writes (8 KiB, all over the written chunks) while the held operations go one at a
/// time: they meet the drain (cached chunks, clean and dirty, and writebacks) and the
/// copy.
fn write_while_migrating(r: &mut Rig, reference: &mut [u8], n: u64, what: &str) {
    for step in 0..n {
        r.release_one();
        let off = (step * 389 * 4096) % (CHUNKS * MIB - 8192);
        let d = pattern(100 + step as u8, 8192);
        let id = r.submit(VOL, ReqKind::Write, off, Some(&d), 8192);
        reference[off as usize..off as usize + 8192].copy_from_slice(&d);
        while r.take_done(id).is_none() {
            assert!(r.release_one().is_some(), "{what}: write {step} stuck");
        }
    }
}

/// Heat chunk `c` with reads and let the tier tick run: its cache entry, if it was filled.
fn cached_after_reads(r: &mut Rig, c: u64) -> Option<cache::CachedChunk> {
    for _ in 0..20 {
        r.read(VOL, c * MIB, 4096);
        ticks(r, 2);
        while r.release_one().is_some() {}
        if let Some(e) = r.engine.cached_chunk(vid(r), c) {
            return Some(e);
        }
    }
    None
}

/// One job of scheme `s` to `hdd2` with writes throughout; true if every read matched
/// the reference and the invariants held, during the job, after it and after a crash.
fn a_job_keeps_every_write(s: Scheme, bug: Option<InjectedBug>) -> bool {
    let what = format!("{s:?}");
    let (mut r, mut reference) = setup_with(bug);
    r.hold = true;
    start_job(&mut r, VOL, job_params(s, HDD2)).unwrap();
    write_while_migrating(&mut r, &mut reference, 40, &what);
    r.hold = false;
    while r.release_one().is_some() {}
    let same = |r: &mut Rig, reference: &[u8]| {
        r.read(VOL, 0, reference.len() as u64) == reference && r.engine.check_invariants().is_ok()
    };
    if !same(&mut r, &reference) {
        return false;
    }
    finish_job(&mut r, VOL);
    if !same(&mut r, &reference) {
        return false;
    }
    r.crash_and_mount();
    same(&mut r, &reference)
}

/// Every scheme moves a cache volume with cached clean and dirty chunks to a third pool;
/// the cache is empty after the job, and caching starts again with slow slots on the new
/// home (after a restart too, whose mount replays the old home's `Cache` records before
/// the evictions that ended them). Before issue 13's cache support, the start was refused
/// ("two copies of its cached chunks").
#[test]
fn a_cache_volume_migrates_with_every_scheme_and_caches_again_on_its_new_home() {
    for s in Scheme::ALL {
        let what = format!("{s:?}");
        let (mut r, mut reference) = setup();
        r.hold = true;
        start_job(&mut r, VOL, job_params(s, HDD2)).unwrap_or_else(|e| panic!("{what}: {e}"));
        write_while_migrating(&mut r, &mut reference, 40, &what);
        r.hold = false;
        while r.release_one().is_some() {}
        check_ref(&mut r, VOL, &reference, &format!("{what} during the job"));
        r.engine.check_invariants().unwrap();
        finish_job(&mut r, VOL);
        assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done), "{what}");
        assert_eq!(pools(&r), vec![Some(HDD2); CHUNKS as usize], "{what}");
        assert!(cached(&r).is_empty(), "{what}: {:?} cached", cached(&r));
        check_ref(&mut r, VOL, &reference, &format!("{what} after the pivot"));
        r.engine.check_invariants().unwrap();
        let rep = r.engine.volume_report(vid(&r)).unwrap();
        assert!(
            rep.cache.as_ref().is_some_and(|c| c.counts.writebacks >= 2),
            "{what}: the dirty chunks were written back: {:?}",
            rep.cache
        );
        r.crash_and_mount();
        check_ref(&mut r, VOL, &reference, &format!("{what} after a crash"));
        r.engine.check_invariants().unwrap();
        // Caching starts again, from the new home.
        let e = cached_after_reads(&mut r, 4).unwrap_or_else(|| panic!("{what}: no fill"));
        assert_eq!(e.slow.0, HDD2, "{what}");
        write_ref(&mut r, VOL, &mut reference, 4 * MIB + 4096, 77, 4096);
        r.flush(VOL);
        r.crash_and_mount();
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("{what}, cached again and crashed"),
        );
        r.engine.check_invariants().unwrap();
    }
}

/// A start to the pool holding every chunk's home copy is refused as `SamePool` (the
/// cached copies are copies); started directly (as DST does), the job drains the cache
/// and caching starts again on the same home.
#[test]
fn a_start_to_the_home_pool_is_refused_but_a_direct_one_drains_the_cache() {
    let (mut r, reference) = setup();
    let refused = start_job(&mut r, VOL, job_params(Scheme::Lr, HDD));
    assert!(
        matches!(refused, Err(ControlError::SamePool { .. })),
        "{refused:?}"
    );
    let refused = start_job(&mut r, VOL, job_params(Scheme::Lr, SSD));
    match refused {
        Err(ControlError::Unsupported(why)) => assert!(why.contains("fast pool"), "{why}"),
        other => panic!("a start to the fast pool: {other:?}"),
    }
    let mut out = Outputs::default();
    let v = vid(&r);
    r.engine
        .start_migration(r.now, v, job_params(Scheme::Dbt, HDD), &mut out)
        .unwrap();
    r.drain(out);
    finish_job(&mut r, VOL);
    assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done));
    assert!(cached(&r).is_empty());
    assert_eq!(pools(&r), vec![Some(HDD); CHUNKS as usize]);
    check_ref(&mut r, VOL, &reference, "drained to its home");
    r.engine.check_invariants().unwrap();
    assert_eq!(cached_after_reads(&mut r, 1).map(|e| e.slow.0), Some(HDD));
    check_ref(&mut r, VOL, &reference, "cached again");
}

/// A cancel in the drain or in the copy leaves every chunk's home copy on the HDD with
/// every write, and caching starts again.
#[test]
fn a_cancelled_cache_job_leaves_the_volume_home_and_caching() {
    for s in Scheme::ALL {
        for held_ops in [1usize, 6, 30] {
            let what = format!("{s:?} cancelled after {held_ops} ops");
            let (mut r, mut reference) = setup();
            r.hold = true;
            start_job(&mut r, VOL, job_params(s, HDD2)).unwrap();
            write_while_migrating(&mut r, &mut reference, held_ops as u64, &what);
            let v = vid(&r);
            cancel_held_job(&mut r, VOL, &reference, &what);
            if held_ops == 1 {
                assert_eq!(
                    job_phase(&r, VOL),
                    Some(MigrationPhase::Cancelled),
                    "{what}: in the drain"
                );
            }
            let home = match job_phase(&r, VOL) {
                Some(MigrationPhase::Cancelled) => HDD,
                Some(MigrationPhase::Done) => HDD2,
                p => panic!("{what}: {p:?}"),
            };
            let on: Vec<_> = (0..CHUNKS)
                .map(|c| {
                    let e = r.engine.cached_chunk(v, c).map(|e| e.slow.0);
                    e.or_else(|| r.engine.chunk_location(v, c).map(|l| l.0))
                })
                .collect();
            assert_eq!(on, vec![Some(home); CHUNKS as usize], "{what}");
            // (The cancel's records need not be durable yet: a crash may drop writes
            // made since the last FLUSH, as always.)
            r.flush(VOL);
            r.crash_and_mount();
            check_ref(&mut r, VOL, &reference, &format!("{what}, crashed"));
            let e = cached_after_reads(&mut r, 5).unwrap_or_else(|| panic!("{what}: no fill"));
            assert_eq!(e.slow.0, home, "{what}");
            r.engine.check_invariants().unwrap();
        }
    }
}

/// Run a job of scheme `s` with devices losing their unflushed writes, and a power loss
/// `k` device operations in (writes and FLUSHes every fifth operation). `Ok(None)` once
/// the job was over before `k`; `Err` says what went wrong (data, the invariants, or a
/// job that does not end with every chunk on `hdd2`).
fn power_loss_at(s: Scheme, k: usize, bug: Option<InjectedBug>) -> Result<Option<()>, String> {
    let what = format!("{s:?} power loss after {k} ops");
    let (mut r, mut reference) = setup_with(bug);
    r.volatile = true;
    r.hold = true;
    start_job(&mut r, VOL, job_params(s, HDD2)).map_err(|e| e.to_string())?;
    r.release_with_flushed_writes(VOL, &mut reference, k, CHUNKS * MIB, &what);
    if job_phase(&r, VOL).is_some_and(|p| p.is_over()) {
        return Ok(None);
    }
    r.engine.check_invariants()?;
    r.power_loss();
    r.engine.check_invariants()?;
    let same = |r: &mut Rig, reference: &[u8], when: &str| {
        let got = r.read(VOL, 0, reference.len() as u64);
        match got.iter().zip(reference).position(|(a, b)| a != b) {
            Some(b) => Err(format!("{what}, {when}: byte {b} differs")),
            None => Ok(()),
        }
    };
    same(&mut r, &reference, "at mount")?;
    match job_phase(&r, VOL) {
        Some(p) if !p.is_over() => {}
        // The job's start was not durable: ask again.
        _ if pools(&r) != vec![Some(HDD2); CHUNKS as usize] => {
            start_job(&mut r, VOL, job_params(s, HDD2))
                .map_err(|e| format!("{what}: restart: {e}"))?
        }
        _ => {}
    }
    finish_job(&mut r, VOL);
    same(&mut r, &reference, "once done")?;
    r.engine.check_invariants()?;
    if pools(&r) != vec![Some(HDD2); CHUNKS as usize] || !cached(&r).is_empty() {
        return Err(format!("{what}: {:?}, cached {:?}", pools(&r), cached(&r)));
    }
    r.power_loss();
    same(&mut r, &reference, "done, then a power loss")?;
    r.engine.check_invariants()?;
    Ok(Some(()))
}

/// A power loss at each device operation of the job, through the drain (evictions,
/// writebacks, the commit making them durable), the copy and the pivot, for every
/// scheme: every flushed write is kept, and the job resumed at mount (draining the
/// cache the mount finds, all dirty, again) ends with the volume on the new pool.
#[test]
fn a_power_loss_at_each_step_of_a_cache_volumes_job_keeps_every_flushed_write() {
    for s in Scheme::ALL {
        let mut k = 1;
        while power_loss_at(s, k, None)
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some()
        {
            k += 1;
        }
        assert!(k > 20, "{s:?}: the job took {k} operations");
    }
}

/// `cache-migrate-drops-dirty`: the drain evicts a dirty chunk without writing it back,
/// so the job copies (and reads see) its stale slow slot. The checks above catch it.
#[test]
fn the_checks_catch_a_dirty_chunk_dropped_by_the_drain() {
    for s in Scheme::ALL {
        assert!(a_job_keeps_every_write(s, None), "{s:?}");
        assert!(
            !a_job_keeps_every_write(s, Some(InjectedBug::CacheMigrateDropsDirty)),
            "{s:?}: the injected bug went unseen"
        );
    }
}

/// A thick `cache` volume (its slow slots are its home slots) moves its home region to
/// `hdd2` after the drain, with every scheme, and caches again from the new region.
#[test]
fn a_thick_cache_volume_moves_its_home_region() {
    const THICK: &str = "thick";
    for s in Scheme::ALL {
        let what = format!("{s:?}");
        let mut cfg = cache_config();
        cfg.volumes[1].home_pool = HDD;
        cfg.volumes[1].placement = cfg.volumes[0].placement.clone();
        cfg.volumes[1].fast_pool = Some(SSD);
        cfg.volumes[0].placement = Placement::Pinned;
        cfg.volumes[0].fast_pool = None;
        let mut r = Rig::new(cfg);
        let v = r.engine.volume_id(THICK).unwrap();
        let mut reference = vec![0u8; (CHUNKS * MIB) as usize];
        let mut write = |r: &mut Rig, off: u64, seed: u8, len: usize| {
            let d = pattern(seed, len);
            r.write(THICK, off, &d);
            reference[off as usize..off as usize + len].copy_from_slice(&d);
        };
        for c in 0..CHUNKS {
            write(&mut r, c * MIB, c as u8 + 1, MIB as usize);
        }
        r.flush(THICK);
        ticks(&mut r, 20);
        for c in 0..4u64 {
            r.read(THICK, c * MIB + 4096, 4096);
        }
        ticks(&mut r, 20);
        let cached: Vec<u64> = (0..CHUNKS)
            .filter(|&c| r.engine.cached_chunk(v, c).is_some())
            .collect();
        assert!(cached.len() >= 2, "{what}: cached {cached:?}");
        write(&mut r, cached[0] * MIB + 8192, 60, 8192);
        assert!(r.engine.cached_chunk(v, cached[0]).unwrap().dirty, "{what}");
        control(
            &mut r,
            Control::StartMigration {
                volume: v,
                params: job_params(s, HDD2),
            },
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        for step in 0..10u64 {
            write(
                &mut r,
                (step * 389 * 4096) % (CHUNKS * MIB - 8192),
                100 + step as u8,
                8192,
            );
            r.tick(1_000_000);
        }
        for _ in 0..10_000 {
            if r.engine
                .migration_status(v)
                .is_some_and(|s| s.phase.is_over())
            {
                break;
            }
            r.tick(1_000_000);
        }
        let st = r.engine.migration_status(v).unwrap();
        assert_eq!(st.phase, MigrationPhase::Done, "{what}: {st:?}");
        // Every chunk's home copy is in the new region (caching may have started again
        // once the table naming it was durable).
        let on: Vec<_> = (0..20)
            .map(|c| match r.engine.cached_chunk(v, c) {
                Some(e) => Some(e.slow.0),
                None => r.engine.chunk_location(v, c).map(|l| l.0),
            })
            .collect();
        assert_eq!(on, vec![Some(HDD2); 20], "{what}");
        let got = r.read(THICK, 0, reference.len() as u64);
        assert!(got == reference, "{what}: after the pivot");
        r.engine.check_invariants().unwrap();
        r.crash_and_mount();
        let got = r.read(THICK, 0, reference.len() as u64);
        assert!(got == reference, "{what}: after a crash");
        r.engine.check_invariants().unwrap();
        let mut again = None;
        for _ in 0..20 {
            r.read(THICK, 5 * MIB, 4096);
            ticks(&mut r, 2);
            again = again.or(r.engine.cached_chunk(v, 5));
        }
        assert_eq!(again.map(|e| e.slow.0), Some(HDD2), "{what}: cached again");
        r.engine.check_invariants().unwrap();
    }
}

/// After the pivot, no fill starts until the volume table naming the new home is
/// durable: a fill's `Cache` record names its slow slot's pool, and a mount of the old
/// table (home `hdd`) would refuse a slot on `hdd2`. (Without the guard,
/// `Migrations::cache_rehoming`, the first tick starts a fill from `hdd2`.)
#[test]
fn no_fill_starts_before_the_table_naming_the_new_home_is_durable() {
    let (mut r, mut reference) = setup();
    r.hold = true;
    start_job(&mut r, VOL, job_params(Scheme::Mirror, HDD2)).unwrap();
    write_while_migrating(&mut r, &mut reference, 3, "mirror");
    assert!(
        !job_phase(&r, VOL).unwrap().is_over(),
        "the job is still running"
    );
    while !job_phase(&r, VOL).is_some_and(|p| p.is_over()) {
        assert!(r.release_one().is_some(), "stuck before the pivot");
    }
    // The table write naming `hdd2` is held; the tier tick runs with candidates waiting
    // (the job's writes touched every chunk).
    let fill_read = |r: &Rig| {
        r.held
            .iter()
            .any(|o| o.kind == DevKind::Read && o.pool == HDD2 && o.len_bytes == MIB)
    };
    for _ in 0..5 {
        r.tick(TICK);
        assert!(
            !fill_read(&r),
            "a fill started before the table was durable"
        );
    }
    r.hold = false;
    while r.release_one().is_some() {}
    let e = cached_after_reads(&mut r, 3).expect("caching starts again");
    assert_eq!(e.slow.0, HDD2);
    check_ref(&mut r, VOL, &reference, "cached again");
    r.engine.check_invariants().unwrap();
}

/// A fill in flight does not refuse a start (it would refuse a tiered volume's: `Busy`):
/// the drain waits for it and evicts the chunk it filled.
#[test]
fn a_fill_in_flight_at_the_start_is_drained_too() {
    let (mut r, reference) = setup();
    r.read(VOL, 4 * MIB, 4096);
    r.read(VOL, 5 * MIB, 4096);
    // The cache is full: the tick evicts (a dirty victim is written back first), then
    // fills. Hold the first fill's copy.
    r.hold = true;
    let fill_held = |r: &Rig| {
        r.held
            .iter()
            .any(|o| o.kind == DevKind::Read && o.pool == HDD && o.len_bytes == MIB)
    };
    for _ in 0..50 {
        r.tick(TICK);
        if fill_held(&r) {
            break;
        }
        while r.release_one().is_some() {}
    }
    assert!(fill_held(&r), "a fill is in flight: {:?}", r.held);
    start_job(&mut r, VOL, job_params(Scheme::Lr, HDD2)).unwrap();
    r.hold = false;
    while r.release_one().is_some() {}
    finish_job(&mut r, VOL);
    assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done));
    assert_eq!(pools(&r), vec![Some(HDD2); CHUNKS as usize]);
    check_ref(&mut r, VOL, &reference, "after the job");
    r.engine.check_invariants().unwrap();
    r.crash_and_mount();
    check_ref(&mut r, VOL, &reference, "after a crash");
}
