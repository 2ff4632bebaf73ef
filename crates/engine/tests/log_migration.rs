//! Live migration of volumes with log data (issue 13; `jobs/migrate/log_drain.rs`): the
//! job writes the live log ranges back into their home chunks, migrates the plain volume
//! with the chosen scheme, and the volume logs again on its new pool. Every scheme against
//! a reference copy of the volume (reads during the job, after the pivot, after a crash),
//! a power loss at each device operation of the job, cancels in the drain and the copy,
//! writes racing the drain, and the injected bug `log-migrate-drops-live`. Before, every
//! start was refused ("migrating logged data is not supported").

mod common;

use common::*;
use tiervisor_engine::jobs::migrate::{MigrationPhase, Scheme};
use tiervisor_engine::*;

const HDD: PoolId = PoolId(1);
const HDD2: PoolId = PoolId(2);
const VOL: &str = "thin";
/// Chunks the tests write (of the volume's 40): 0-3 written whole (home), 4 and 5 only
/// by logged writes (unmapped until the drain).
const CHUNKS: u64 = 6;

/// `log_config()` (both pools log) with a third pool, `hdd2`, that logs too.
fn log3_config() -> EngineConfig {
    let mut cfg = log_config();
    let mut p = cfg.pools[1].clone();
    p.name = "hdd2".into();
    cfg.pools.push(p);
    cfg
}

fn vid(r: &Rig) -> VolumeId {
    r.engine.volume_id(VOL).unwrap()
}

/// Where the written chunks are mapped.
fn pools(r: &Rig) -> Vec<Option<PoolId>> {
    let v = vid(r);
    (0..CHUNKS)
        .map(|c| r.engine.chunk_location(v, c).map(|(p, _)| p))
        .collect()
}

/// Live log bytes of pool `p`.
fn live_log_bytes(r: &Rig, p: usize) -> u64 {
    r.engine.report().pools[p]
        .log
        .as_ref()
        .map_or(0, |l| l.live_bytes)
}

/// Chunks 0-3 written whole on the HDD (home writes), then 4 KiB logged writes over all
/// six chunks (4 and 5 have no home chunk), flushed; and the reference.
fn setup_with(bug: Option<InjectedBug>) -> (Rig, Vec<u8>) {
    let mut r = Rig::with_bug(log3_config(), bug);
    let mut reference = fill_ref(&mut r, VOL, CHUNKS, 0..4);
    for i in 0..24u64 {
        let off = (i * 61 * 4096) % (CHUNKS * MIB - 4096);
        write_ref(&mut r, VOL, &mut reference, off, 40 + i as u8, 4096);
    }
    r.flush(VOL);
    assert!(live_log_bytes(&r, 1) > 0, "the setup logs on the HDD");
    assert_eq!(
        pools(&r)[4..],
        [None, None],
        "chunks 4 and 5 are only logged"
    );
    (r, reference)
}

fn setup() -> (Rig, Vec<u8>) {
    setup_with(None)
}

/// Writes (8 KiB, small enough to be logged, all over the written chunks) while the held
/// operations go one at a time: they meet the drain and the copy.
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
    // (Writes after the job are logged again: unflushed, a crash may drop them.)
    r.flush(VOL);
    r.crash_and_mount();
    same(&mut r, &reference)
}

/// Every scheme moves a logged volume with live log data (over mapped chunks and over
/// chunks with no home chunk) to a third pool under writes; the old pool's log is empty
/// after the job, and the volume logs again on the new pool (after a restart too).
#[test]
fn a_logged_volume_migrates_with_every_scheme_and_logs_again_on_its_new_pool() {
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
        assert_eq!(live_log_bytes(&r, 1), 0, "{what}: the HDD's log is drained");
        check_ref(&mut r, VOL, &reference, &format!("{what} after the pivot"));
        r.engine.check_invariants().unwrap();
        // (Writes after the job are logged again: unflushed, a crash may drop them.)
        r.flush(VOL);
        r.crash_and_mount();
        check_ref(&mut r, VOL, &reference, &format!("{what} after a crash"));
        r.engine.check_invariants().unwrap();
        // Logging starts again, on the new pool.
        write_ref(&mut r, VOL, &mut reference, 4 * MIB + 8192, 77, 4096);
        r.write(VOL, 20 * MIB, &pattern(78, 4096));
        r.flush(VOL);
        assert!(live_log_bytes(&r, 2) > 0, "{what}: logs on hdd2 again");
        assert_eq!(live_log_bytes(&r, 1), 0, "{what}: nothing logs on the HDD");
        r.crash_and_mount();
        reference.resize(20 * MIB as usize + 4096, 0);
        reference[20 * MIB as usize..].copy_from_slice(&pattern(78, 4096));
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("{what}, logged again and crashed"),
        );
        r.engine.check_invariants().unwrap();
    }
}

/// A write to a logged range while its chunk is being written back waits for the
/// write-back and then wins; a write to a logged range of a chunk not yet drained goes
/// home and the drain does not write the older log data over it.
#[test]
fn writes_racing_the_drain_are_kept() {
    for s in Scheme::ALL {
        let what = format!("{s:?}");
        let (mut r, mut reference) = setup();
        r.hold = true;
        start_job(&mut r, VOL, job_params(s, HDD2)).unwrap();
        // The drain's first operations are chunk 0's copies: overwrite the range of the
        // first logged write (chunk 0, offset 0) and one in chunk 5 (not drained yet).
        assert!(!r.held.is_empty(), "{what}: the drain started");
        let a = pattern(200, 4096);
        let id_a = r.submit(VOL, ReqKind::Write, 0, Some(&a), 4096);
        reference[..4096].copy_from_slice(&a);
        let off_b = (23 * 61 * 4096) % (CHUNKS * MIB - 4096);
        assert_eq!(off_b / MIB, 5, "the last logged write is in chunk 5");
        let b = pattern(201, 4096);
        let id_b = r.submit(VOL, ReqKind::Write, off_b, Some(&b), 4096);
        reference[off_b as usize..off_b as usize + 4096].copy_from_slice(&b);
        assert!(
            r.take_done(id_a).is_none(),
            "{what}: waits for the write-back"
        );
        while r.take_done(id_a).is_none() || r.take_done(id_b).is_none() {
            assert!(r.release_one().is_some(), "{what}: a write is stuck");
        }
        r.hold = false;
        while r.release_one().is_some() {}
        check_ref(&mut r, VOL, &reference, &format!("{what} during the job"));
        finish_job(&mut r, VOL);
        assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done), "{what}");
        check_ref(&mut r, VOL, &reference, &format!("{what} after the pivot"));
        r.flush(VOL);
        r.crash_and_mount();
        check_ref(&mut r, VOL, &reference, &format!("{what} after a crash"));
        r.engine.check_invariants().unwrap();
    }
}

/// A cancel in the drain or in the copy leaves the volume on the HDD with every write,
/// logged or not, and it logs again.
#[test]
fn a_cancelled_job_of_a_logged_volume_leaves_it_home_and_logging() {
    for s in Scheme::ALL {
        for held_ops in [1usize, 6, 40] {
            let what = format!("{s:?} cancelled after {held_ops} ops");
            let (mut r, mut reference) = setup();
            r.hold = true;
            start_job(&mut r, VOL, job_params(s, HDD2)).unwrap();
            write_while_migrating(&mut r, &mut reference, held_ops as u64, &what);
            cancel_held_job(&mut r, VOL, &reference, &what);
            if held_ops == 1 {
                assert_eq!(
                    job_phase(&r, VOL),
                    Some(MigrationPhase::Cancelled),
                    "{what}: in the drain"
                );
            }
            let (home, log_pool) = match job_phase(&r, VOL) {
                Some(MigrationPhase::Cancelled) => (HDD, 1),
                Some(MigrationPhase::Done) => (HDD2, 2),
                p => panic!("{what}: {p:?}"),
            };
            // (A chunk the VM's first write allocated on the destination during an LR
            // job stays there after a cancel, as for any volume.)
            assert!(
                pools(&r)[..4].iter().all(|p| *p == Some(home)),
                "{what}: {:?}",
                pools(&r)
            );
            let before = live_log_bytes(&r, log_pool);
            write_ref(&mut r, VOL, &mut reference, MIB + 3 * 4096, 90, 4096);
            r.flush(VOL);
            assert!(
                live_log_bytes(&r, log_pool) > before,
                "{what}: logs on pool {log_pool} again"
            );
            r.crash_and_mount();
            check_ref(&mut r, VOL, &reference, &format!("{what}, crashed"));
            r.engine.check_invariants().unwrap();
        }
    }
}

/// Run a job of scheme `s` with devices losing their unflushed writes, and a power loss
/// `k` device operations in (writes and FLUSHes every fifth operation). `Ok(None)` once
/// the job was over before `k`; `Err` says what went wrong.
fn power_loss_at(s: Scheme, k: usize) -> Result<Option<()>, String> {
    let what = format!("{s:?} power loss after {k} ops");
    let (mut r, mut reference) = setup();
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
    if pools(&r) != vec![Some(HDD2); CHUNKS as usize] || live_log_bytes(&r, 1) != 0 {
        return Err(format!(
            "{what}: {:?}, {} live log bytes on the HDD",
            pools(&r),
            live_log_bytes(&r, 1)
        ));
    }
    r.power_loss();
    same(&mut r, &reference, "done, then a power loss")?;
    r.engine.check_invariants()?;
    Ok(Some(()))
}

/// A power loss at each device operation of the job, through the drain (write-backs,
/// the commit making them durable), the copy and the pivot: every flushed write is kept,
/// and the job resumed at mount (draining what the mount finds logged) ends with the
/// volume on the new pool.
#[test]
fn a_power_loss_at_each_step_of_a_logged_volumes_job_keeps_every_flushed_write() {
    for s in [Scheme::Lr, Scheme::Dbt] {
        let mut k = 1;
        while power_loss_at(s, k)
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some()
        {
            k += 1;
        }
        assert!(k > 20, "{s:?}: the job took {k} operations");
    }
}

/// `log-migrate-drops-live`: the drain clears a chunk's `Log` ranges without writing
/// them back, so the job copies (and reads see) stale home data. The checks catch it.
#[test]
fn the_checks_catch_log_data_dropped_by_the_drain() {
    for s in Scheme::ALL {
        assert!(a_job_keeps_every_write(s, None), "{s:?}");
        assert!(
            !a_job_keeps_every_write(s, Some(InjectedBug::LogMigrateDropsLive)),
            "{s:?}: the injected bug went unseen"
        );
    }
}

/// An LR job's `Moved` range that logged data later replaces (the job dropped at mount,
/// the volume logging again) frees its destination chunk once nothing points into it.
/// Before, the log's overlay update dropped the `Moved` entry without that check, and
/// the chunk stayed allocated with no owner (DST seed 103: "allocator has 11 chunks in
/// use, 10 are accounted for").
#[test]
fn logged_data_over_a_dropped_jobs_moved_range_frees_its_destination_chunk() {
    let (mut r, mut reference) = setup();
    let free_before = free_chunks(&r)[2];
    let params = jobs::migrate::MigrationParams {
        rate_bytes_per_s: 1 << 20,
        ..job_params(Scheme::Lr, HDD2)
    };
    start_job(&mut r, VOL, params).unwrap();
    // Chunk 5 is not copied yet: LR writes it to the destination (`Moved`).
    write_ref(&mut r, VOL, &mut reference, 5 * MIB, 91, 8192);
    r.flush(VOL);
    assert!(job_phase(&r, VOL).is_some_and(|p| !p.is_over()));
    assert!(
        free_chunks(&r)[2] < free_before,
        "a destination chunk is held"
    );
    // The job cannot resume at the next mount: hdd2 is the volume's fast pool since.
    r.cfg.volumes[0].placement = tiervisor_engine::config::Placement::Hot {
        fast_budget_bytes: 4 * MIB,
        priority: 0,
    };
    r.cfg.volumes[0].fast_pool = Some(HDD2);
    r.crash_and_mount();
    assert_eq!(job_phase(&r, VOL), None, "dropped: {:?}", r.events);
    r.engine.check_invariants().unwrap();
    // (LR's switched chunks stay on hdd2, where the map says.)
    let free_at_mount = free_chunks(&r)[2];
    // Logged again (chunk 5's home is on the HDD, which logs), over the whole range.
    write_ref(&mut r, VOL, &mut reference, 5 * MIB, 92, 8192);
    r.flush(VOL);
    for _ in 0..20 {
        r.tick(20_000_000);
    }
    r.engine.check_invariants().unwrap();
    assert_eq!(
        free_chunks(&r)[2],
        free_at_mount + 1,
        "the destination chunk is free"
    );
    check_ref(&mut r, VOL, &reference, "logged over the moved range");
    r.crash_and_mount();
    check_ref(&mut r, VOL, &reference, "and crashed");
    r.engine.check_invariants().unwrap();
}
