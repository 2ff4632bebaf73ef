//! Live migration of thick volumes: the home region moves (`jobs/migrate/thick.rs`).
//! Every scheme against a reference copy of the volume (reads during the job, after the
//! pivot and after a crash), crashes after N device operations, a power loss at each
//! operation from the pivot's commit through the table write naming the new region, a
//! cancel, a refusal for a fragmented destination, the injected bug
//! `thick-old-region-freed-early`, and a job that cannot resume at mount (cancelled, or
//! completed after a durable pivot; a power loss at each operation of the mount's cancel).

mod common;

use common::*;
use tiervisor_engine::jobs::migrate::{MigrationParams, MigrationPhase, Scheme};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const VOL: &str = "thick";
/// The thick volume's chunks (20 MiB at 1 MiB chunks).
const CHUNKS: u64 = 20;
/// Chunks the tests write before the job (the rest read as the region's zeros).
const WRITTEN: u64 = 6;

/// A rig with the thick volume's first chunks written (on its SSD home region), and the
/// whole volume's reference.
fn setup_with(cfg: EngineConfig, bug: Option<InjectedBug>) -> (Rig, Vec<u8>) {
    let mut r = Rig::with_bug(cfg, bug);
    let mut reference = vec![0u8; (CHUNKS * MIB) as usize];
    for c in 0..WRITTEN {
        let d = pattern(c as u8 + 1, MIB as usize);
        r.write(VOL, c * MIB, &d);
        reference[(c * MIB) as usize..((c + 1) * MIB) as usize].copy_from_slice(&d);
    }
    r.flush(VOL);
    (r, reference)
}

fn setup() -> (Rig, Vec<u8>) {
    setup_with(config(1 << 20), None)
}

fn vid(r: &Rig) -> VolumeId {
    r.engine.volume_id(VOL).unwrap()
}

/// The job over, then the table write naming the new region, the records turning the
/// chunks back into `Home`, and the frees they wait for.
fn finish(r: &mut Rig) {
    finish_job(r, VOL);
    for _ in 0..25 {
        r.tick(100_000_000);
        while r.release_one().is_some() {}
    }
}

/// Where each chunk lives: (pool, physical chunk).
fn locations(r: &Rig) -> Vec<(PoolId, u64)> {
    let v = vid(r);
    (0..CHUNKS)
        .map(|c| r.engine.chunk_location(v, c).unwrap())
        .collect()
}

/// Every chunk in one contiguous region on `pool`, in order: its home region.
fn in_one_region_on(r: &Rig, pool: PoolId) -> bool {
    let l = locations(r);
    l.iter()
        .enumerate()
        .all(|(c, &(p, pc))| p == pool && pc == l[0].1 + c as u64)
}

/// Writes of 8 KiB all over the volume, each waited for, releasing one held operation
/// before each: into copied, being-copied and uncopied chunks.
fn write_while_copying(r: &mut Rig, reference: &mut [u8], steps: u64, what: &str) {
    for step in 0..steps {
        r.release_one();
        let off = (step * 389 * 4096 * 3) % (CHUNKS * MIB - 8192);
        let d = pattern(100 + step as u8, 8192);
        let id = r.submit(VOL, ReqKind::Write, off, Some(&d), 8192);
        reference[off as usize..off as usize + 8192].copy_from_slice(&d);
        while r.take_done(id).is_none() {
            assert!(r.release_one().is_some(), "{what}: write {step} stuck");
        }
    }
}

#[test]
fn every_scheme_moves_a_thick_volumes_home_region_and_back() {
    for s in Scheme::ALL {
        let (mut r, mut reference) = setup();
        let free0 = free_chunks(&r);
        assert!(in_one_region_on(&r, SSD));
        r.hold = true;
        start_job(&mut r, VOL, job_params(s, HDD)).unwrap();
        write_while_copying(&mut r, &mut reference, 40, &format!("{s:?}"));
        r.hold = false;
        while r.release_one().is_some() {}
        check_ref(&mut r, VOL, &reference, &format!("{s:?} during the copy"));
        r.engine.check_invariants().unwrap();
        finish(&mut r);
        assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done), "{s:?}");
        assert!(in_one_region_on(&r, HDD), "{s:?}: {:?}", locations(&r));
        check_ref(&mut r, VOL, &reference, &format!("{s:?} after the pivot"));
        r.engine.check_invariants().unwrap();
        // The old region is free again, the new one taken.
        let free1 = free_chunks(&r);
        assert_eq!(
            free1[0],
            free0[0] + CHUNKS,
            "{s:?}: SSD {free0:?} -> {free1:?}"
        );
        assert_eq!(
            free1[1],
            free0[1] - CHUNKS,
            "{s:?}: HDD {free0:?} -> {free1:?}"
        );
        r.crash_and_mount();
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("{s:?} after a crash past the pivot"),
        );
        r.engine.check_invariants().unwrap();
        assert!(in_one_region_on(&r, HDD), "{s:?} after a crash");
        assert_eq!(
            free_chunks(&r),
            free1,
            "{s:?}: the mount claims the new home"
        );

        // And back, with writes during the job again.
        r.hold = true;
        start_job(&mut r, VOL, job_params(s, SSD)).unwrap();
        write_while_copying(&mut r, &mut reference, 30, &format!("{s:?} back"));
        r.hold = false;
        while r.release_one().is_some() {}
        finish(&mut r);
        assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done), "{s:?} back");
        assert!(in_one_region_on(&r, SSD), "{s:?} back: {:?}", locations(&r));
        check_ref(&mut r, VOL, &reference, &format!("{s:?} back"));
        assert_eq!(free_chunks(&r), free0, "{s:?}: back where it started");
        r.engine.check_invariants().unwrap();
        r.crash_and_mount();
        check_ref(&mut r, VOL, &reference, &format!("{s:?} back, crashed"));
        r.engine.check_invariants().unwrap();
    }
}

/// A crash after N device operations of a job (over a range of N) keeps every flushed
/// write; the mount resumes the job (or it is started again, if its start was not
/// durable), and it ends with the volume in one region on the destination.
#[test]
fn a_crash_at_any_point_of_a_thick_volumes_job_keeps_every_flushed_write() {
    for s in Scheme::ALL {
        for cut in [2usize, 5, 10, 25, 60, 120, 250, 400] {
            let what = format!("{s:?} crash after {cut} ops");
            let (mut r, mut reference) = setup();
            let free0 = free_chunks(&r);
            r.hold = true;
            start_job(&mut r, VOL, job_params(s, HDD)).unwrap();
            r.release_with_flushed_writes(VOL, &mut reference, cut, CHUNKS * MIB, &what);
            r.engine.check_invariants().unwrap();
            r.crash_and_mount();
            check_ref(&mut r, VOL, &reference, &what);
            r.engine.check_invariants().unwrap();
            match job_phase(&r, VOL) {
                Some(p) if !p.is_over() => {}
                _ if in_one_region_on(&r, HDD) => {}
                _ => start_job(&mut r, VOL, job_params(s, HDD)).unwrap(),
            }
            if job_phase(&r, VOL).is_some() {
                finish(&mut r);
            }
            assert!(in_one_region_on(&r, HDD), "{what}: {:?}", locations(&r));
            check_ref(&mut r, VOL, &reference, &format!("{what}, then done"));
            r.engine.check_invariants().unwrap();
            let free1 = free_chunks(&r);
            assert_eq!(
                (free1[0], free1[1]),
                (free0[0] + CHUNKS, free0[1] - CHUNKS),
                "{what}: nothing leaked"
            );
            r.crash_and_mount();
            check_ref(
                &mut r,
                VOL,
                &reference,
                &format!("{what}, done and crashed"),
            );
            r.engine.check_invariants().unwrap();
        }
    }
}

/// Run a job to its pivot with power loss `k` operations after the pivot's commit is
/// durable (the job then done in memory): through the table write naming the new region,
/// the records turning the chunks back into `Home`, and the old region's free. Devices
/// have volatile caches. `Ok(None)` once `k` is past every operation; `Err` says what
/// went wrong (the invariants, the mount, or data).
fn power_loss_after_the_pivot(
    s: Scheme,
    k: usize,
    bug: Option<InjectedBug>,
    refused_at_mount: bool,
) -> Result<Option<()>, String> {
    let (mut r, mut reference) = setup_with(config(1 << 20), bug);
    let free0 = free_chunks(&r);
    r.volatile = true;
    r.hold = true;
    start_job(&mut r, VOL, job_params(s, HDD)).map_err(|e| e.to_string())?;
    write_while_copying(&mut r, &mut reference, 20, &format!("{s:?}"));
    let f = r.submit(VOL, ReqKind::Flush, 0, None, 0);
    while r.take_done(f).is_none() {
        if r.release_one().is_none() {
            return Err("flush stuck".into());
        }
    }
    while !job_phase(&r, VOL).is_some_and(|p| p.is_over()) {
        if r.release_one().is_none() {
            return Err("stuck before the pivot was durable".into());
        }
    }
    for _ in 0..k {
        r.engine.check_invariants()?;
        if r.release_one().is_none() {
            return Ok(None);
        }
    }
    r.engine.check_invariants()?;
    if refused_at_mount {
        refuse_resume(&mut r);
    }
    r.power_loss();
    r.engine.check_invariants()?;
    let got = r.read(VOL, 0, reference.len() as u64);
    // Every write was flushed before the pivot.
    for (i, sector) in got.chunks(512).enumerate() {
        if sector != &reference[i * 512..(i + 1) * 512] {
            return Err(format!(
                "power loss {k} ops after the pivot: sector {i} differs"
            ));
        }
    }
    if job_phase(&r, VOL).is_some() {
        finish(&mut r);
    }
    r.engine.check_invariants()?;
    if !in_one_region_on(&r, HDD) {
        return Err(format!("not in one region on the HDD: {:?}", locations(&r)));
    }
    let free1 = free_chunks(&r);
    if (free1[0], free1[1]) != (free0[0] + CHUNKS, free0[1] - CHUNKS) {
        return Err(format!("free chunks {free0:?} -> {free1:?}"));
    }
    Ok(Some(()))
}

/// A power loss at each operation from the pivot's commit on: first in the window
/// between that commit and the volume table write (the mount finds the job recorded with
/// every chunk switched, and records the new home), then between the table write and the
/// records turning the chunks back into `Home` (the mount accepts chunks claimed by the
/// home region and by their `At` entries), then after.
#[test]
fn a_power_loss_between_the_pivot_and_the_table_write_keeps_the_volume() {
    for s in Scheme::ALL {
        let mut k = 0;
        while power_loss_after_the_pivot(s, k, None, false)
            .unwrap_or_else(|e| panic!("{s:?}: {e}"))
            .is_some()
        {
            k += 1;
        }
        assert!(k > 1, "{s:?}: {k} operations after the pivot");
    }
}

/// `thick-old-region-freed-early`: the old home region goes back to the allocator before
/// the table naming the new one is durable. The invariants see a region the durable
/// table names free; a power loss in the window mounts the old table.
#[test]
fn the_thick_checks_catch_the_old_region_freed_before_the_table_write() {
    assert!(power_loss_after_the_pivot(Scheme::Lr, 0, None, false).is_ok());
    let caught = power_loss_after_the_pivot(
        Scheme::Lr,
        0,
        Some(InjectedBug::ThickOldRegionFreedEarly),
        false,
    );
    assert!(
        caught.as_ref().is_err_and(|e| e.contains("names a region")),
        "{caught:?}"
    );
}

/// A cancel (before and after the copy is done) leaves the volume in its old region with
/// every write, and frees the new one.
#[test]
fn a_cancelled_thick_job_frees_its_new_region() {
    for s in Scheme::ALL {
        for after_copy in [false, true] {
            let what = format!("{s:?} after_copy={after_copy}");
            let (mut r, mut reference) = setup();
            let free0 = free_chunks(&r);
            let home = locations(&r);
            let mut p = job_params(s, HDD);
            if !after_copy {
                p.rate_bytes_per_s = 8 << 20;
            }
            r.hold = after_copy;
            start_job(&mut r, VOL, p).unwrap();
            if after_copy {
                while r.release_one().is_some() {
                    if matches!(
                        job_phase(&r, VOL),
                        Some(MigrationPhase::Draining | MigrationPhase::Committing { .. })
                    ) {
                        break;
                    }
                }
            } else {
                r.tick(250_000_000);
                write_ref(&mut r, VOL, &mut reference, 4096, 70, 8192);
                write_ref(&mut r, VOL, &mut reference, 5 * MIB - 4096, 71, 8192);
            }
            let st = r.engine.migration_status(vid(&r)).unwrap();
            // (LR copies and pivots with nothing to drain: the job may be done already.)
            assert!(after_copy || !st.phase.is_over(), "{what}: {st:?}");
            let v = vid(&r);
            let res = control(&mut r, Control::CancelMigration { volume: v });
            r.hold = false;
            while r.release_one().is_some() {}
            write_ref(&mut r, VOL, &mut reference, 2 * MIB + 4096, 72, 8192);
            finish(&mut r);
            if res.is_err() {
                assert_eq!(job_phase(&r, VOL), Some(MigrationPhase::Done), "{what}");
                continue;
            }
            assert_eq!(
                job_phase(&r, VOL),
                Some(MigrationPhase::Cancelled),
                "{what}"
            );
            assert_eq!(locations(&r), home, "{what}");
            check_ref(&mut r, VOL, &reference, &format!("{what} cancelled"));
            r.engine.check_invariants().unwrap();
            assert_eq!(free_chunks(&r), free0, "{what}: the new region is free");
            r.flush(VOL);
            r.crash_and_mount();
            check_ref(
                &mut r,
                VOL,
                &reference,
                &format!("{what} cancelled, crashed"),
            );
            r.engine.check_invariants().unwrap();
            assert_eq!(free_chunks(&r), free0, "{what}: after a crash");
        }
    }
}

/// A destination with enough free chunks but no run as long as the volume refuses the
/// start, naming the longest run; nothing changes.
#[test]
fn a_fragmented_destination_refuses_a_thick_volume_naming_its_longest_run() {
    let mut cfg = config(1 << 20);
    cfg.pools[1].capacity_bytes = 43 * MIB; // 42 chunks
    let (mut r, reference) = setup_with(cfg, None);
    // Every other chunk of the thin volume (its 40 chunks at the start of the HDD).
    for c in (1..40).step_by(2) {
        r.write("thin", c * MIB, &pattern(c as u8, 4096));
    }
    r.flush("thin");
    let free0 = free_chunks(&r);
    assert!(free0[1] >= CHUNKS, "{free0:?}");
    match start_job(&mut r, VOL, job_params(Scheme::Lr, HDD)) {
        Err(ControlError::NoContiguousSpace {
            pool,
            largest_free_run_chunks,
            needed_chunks,
        }) => {
            assert_eq!(pool, "hdd");
            assert_eq!(needed_chunks, CHUNKS);
            assert!(
                largest_free_run_chunks < CHUNKS,
                "{largest_free_run_chunks}"
            );
            let msg = ControlError::NoContiguousSpace {
                pool,
                largest_free_run_chunks,
                needed_chunks,
            }
            .to_string();
            assert!(
                msg.contains("contiguous") && msg.contains("longest"),
                "{msg}"
            );
        }
        other => panic!("a fragmented destination: {other:?}"),
    }
    assert!(job_phase(&r, VOL).is_none(), "nothing started");
    assert_eq!(free_chunks(&r), free0);
    check_ref(&mut r, VOL, &reference, "after the refusal");
    r.engine.check_invariants().unwrap();
}

/// Until the table recording the new region is durable, nothing is written into it: a
/// crash then mounts a table that does not claim it (a `Moved` entry or copy into it would
/// be data of no recorded region). Then the copy and LR's writes go there.
#[test]
fn nothing_goes_into_the_new_region_before_its_record_is_durable() {
    for crash in [false, true] {
        let (mut r, mut reference) = setup();
        r.hold = true;
        start_job(&mut r, VOL, job_params(Scheme::Lr, HDD)).unwrap();
        // An LR write to an uncopied chunk goes to the source meanwhile.
        let d = pattern(55, 4096);
        let off = 12 * MIB + 4096;
        let id = r.submit(VOL, ReqKind::Write, off, Some(&d), 4096);
        reference[off as usize..off as usize + 4096].copy_from_slice(&d);
        let to_hdd: Vec<(DevKind, u64)> = (r.held.iter())
            .filter(|o| o.pool == HDD)
            .map(|o| (o.kind, o.offset_bytes))
            .collect();
        assert!(to_hdd.is_empty(), "before the table write: {to_hdd:?}");
        // The table write is the first operation held; the write the second.
        r.release_one();
        r.release_one();
        assert!(r.take_done(id).is_some());
        if crash {
            r.crash_and_mount();
            check_ref(
                &mut r,
                VOL,
                &reference,
                "crashed as the record became durable",
            );
            r.engine.check_invariants().unwrap();
            assert!(job_phase(&r, VOL).is_some(), "the job resumed at mount");
        } else {
            assert!(
                (r.held.iter()).any(|o| o.kind == DevKind::Read && o.len_bytes == 256 << 10),
                "the copy goes on once the record is durable"
            );
            r.hold = false;
        }
        while r.release_one().is_some() {}
        finish(&mut r);
        assert!(in_one_region_on(&r, HDD));
        check_ref(&mut r, VOL, &reference, "done");
        r.engine.check_invariants().unwrap();
    }
}

/// Between the pivot and the durable table naming the new region, the chunks point at it
/// with `At` entries: a new job or a deletion of the volume is refused as busy meanwhile.
#[test]
fn a_thick_volume_recording_its_new_home_is_busy() {
    let (mut r, reference) = setup();
    r.hold = true;
    start_job(&mut r, VOL, job_params(Scheme::Mirror, HDD)).unwrap();
    while !job_phase(&r, VOL).is_some_and(|p| p.is_over()) {
        assert!(r.release_one().is_some(), "stuck before the pivot");
    }
    let again = start_job(&mut r, VOL, job_params(Scheme::Mirror, SSD));
    assert!(matches!(again, Err(ControlError::Busy(_))), "{again:?}");
    let v = vid(&r);
    let del = control(&mut r, Control::DeleteVolume { volume: v });
    assert!(matches!(del, Err(ControlError::Busy(_))), "{del:?}");
    r.hold = false;
    while r.release_one().is_some() {}
    finish(&mut r);
    start_job(&mut r, VOL, job_params(Scheme::Mirror, SSD)).unwrap();
    finish(&mut r);
    assert!(in_one_region_on(&r, SSD));
    check_ref(&mut r, VOL, &reference, "back");
    r.engine.check_invariants().unwrap();
}

/// A job that cannot resume at mount after its pivot was durable (every chunk in the new
/// region; the HDD its fast pool since): it completes, the table naming the new
/// region, and the old one is freed. A power loss at each operation from the pivot's
/// commit on, as above.
#[test]
fn a_job_that_cannot_resume_after_its_pivot_completes() {
    for s in Scheme::ALL {
        let mut k = 0;
        while power_loss_after_the_pivot(s, k, None, true)
            .unwrap_or_else(|e| panic!("{s:?}: {e}"))
            .is_some()
        {
            k += 1;
        }
        assert!(k > 1, "{s:?}: {k} operations after the pivot");
    }
}

/// A rig whose thick volume's job (to the HDD, at 8 MB/s) has copied a few chunks and,
/// for LR and SLR, put writes into its new region, all flushed; then the HDD becomes the
/// volume's fast pool, so the job cannot resume at the next mount. The reference, the free
/// chunks before the job and the chunks' home.
/// The rig, the reference, the free chunks before the job and the chunks' home.
type Interrupted = (Rig, Vec<u8>, Vec<u64>, Vec<(PoolId, u64)>);

fn interrupted_job_then_refused(s: Scheme) -> Interrupted {
    let (mut r, mut reference) = setup();
    let free0 = free_chunks(&r);
    let home = locations(&r);
    start_job(
        &mut r,
        VOL,
        MigrationParams {
            rate_bytes_per_s: 8 << 20,
            ..job_params(s, HDD)
        },
    )
    .unwrap();
    r.tick(250_000_000);
    // Into a copied chunk and two uncopied ones (written or not before).
    write_ref(&mut r, VOL, &mut reference, 4096, 80, 8192);
    write_ref(&mut r, VOL, &mut reference, 5 * MIB - 4096, 81, 8192);
    write_ref(&mut r, VOL, &mut reference, 15 * MIB + 4096, 82, 8192);
    r.flush(VOL);
    assert!(
        job_phase(&r, VOL).is_some_and(|p| !p.is_over()),
        "{s:?}: {:?}",
        job_phase(&r, VOL)
    );
    refuse_resume(&mut r);
    (r, reference, free0, home)
}

/// Make the thick volume's job to the HDD unresumable at the next mount: the HDD becomes
/// its fast pool (a `hot` placement since), where a tiered volume cannot move. (Before
/// logged volumes could migrate, the log enabled on the volume since was the reason.)
fn refuse_resume(r: &mut Rig) {
    r.cfg.volumes[1].placement = tiervisor_engine::config::Placement::Hot {
        fast_budget_bytes: 4 * MIB,
        priority: 0,
    };
    r.cfg.volumes[1].fast_pool = Some(HDD);
}

/// Tick until the mount's cancel is over and what it frees is free.
fn settle(r: &mut Rig) {
    if job_phase(r, VOL).is_some() {
        finish(r);
    } else {
        for _ in 0..25 {
            r.tick(100_000_000);
            while r.release_one().is_some() {}
        }
    }
}

/// Issue 13: a thick volume's job that cannot resume at mount (its destination its fast
/// pool since) is cancelled there: the volume stays in its home region with every
/// flushed write (LR's and SLR's writes into the new region copied back), the record
/// is cleared and the reserved region freed, with a warning naming the volume, the pool
/// and why. Before, the region stayed reserved (20 chunks of the HDD not free) and no
/// `cancel` could free it (no job running).
#[test]
fn a_thick_job_that_cannot_resume_is_cancelled_and_frees_its_region() {
    for s in Scheme::ALL {
        let (mut r, reference, free0, home) = interrupted_job_then_refused(s);
        r.crash_and_mount();
        let events = std::mem::take(&mut r.events);
        settle(&mut r);
        // No job runs, so no cancel can free anything: it must be free already.
        let v = vid(&r);
        let cancel = control(&mut r, Control::CancelMigration { volume: v });
        assert!(cancel.is_err(), "{s:?}: {cancel:?}");
        settle(&mut r);
        assert_eq!(free_chunks(&r), free0, "{s:?}: the reserved region is free");
        r.engine.check_invariants().unwrap();
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("{s:?} cancelled at mount"),
        );
        assert_eq!(locations(&r), home, "{s:?}");
        let warned = events.iter().any(|e| {
            matches!(e, EngineEvent::Warning { message }
                if message.contains("volume thick: its migration to pool hdd cannot resume")
                    && message.contains("fast pool")
                    && message.contains("cancelled"))
        });
        assert!(warned, "{s:?}: {events:?}");
        r.crash_and_mount();
        let again = r.events.iter().any(
            |e| matches!(e, EngineEvent::Warning { message } if message.contains("migration")),
        );
        assert!(!again, "{s:?}: the record is cleared: {:?}", r.events);
        r.engine.check_invariants().unwrap();
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("{s:?} cancelled, crashed"),
        );
        assert_eq!(free_chunks(&r), free0, "{s:?}: after a crash");
    }
}

/// The mount's cancel with a power loss at each of its device operations (volatile
/// caches): the next mount cancels again, and in the end the volume is home with every
/// flushed write and the region free; the invariants hold at every step.
#[test]
fn a_power_loss_at_each_step_of_the_mounts_cancel_keeps_the_volume() {
    for s in [Scheme::Lr, Scheme::Slr, Scheme::Dbt] {
        let mut k = 0;
        loop {
            let what = format!("{s:?} power loss {k} ops into the mount's cancel");
            let (mut r, reference, free0, home) = interrupted_job_then_refused(s);
            r.volatile = true;
            r.hold_once_ready = true;
            r.crash_and_mount();
            let mut released = 0;
            let mut idle_ticks = 0;
            while released < k && idle_ticks < 10_000 {
                r.engine
                    .check_invariants()
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                if r.release_one().is_some() {
                    released += 1;
                } else {
                    // The copy back waits for its rate's tokens.
                    r.tick(1_000_000);
                    idle_ticks += 1;
                }
            }
            let past_the_end = released < k;
            r.engine
                .check_invariants()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            r.hold_once_ready = false;
            r.power_loss();
            r.engine
                .check_invariants()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            check_ref(&mut r, VOL, &reference, &what);
            settle(&mut r);
            r.engine
                .check_invariants()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            check_ref(&mut r, VOL, &reference, &format!("{what}, settled"));
            assert_eq!(locations(&r), home, "{what}");
            assert_eq!(free_chunks(&r), free0, "{what}: the region is free");
            if past_the_end {
                // DBT's cancel copies nothing back (its table write); LR copies back
                // its switched chunks and `Moved` ranges, SLR its `Moved` range.
                let least = if s == Scheme::Lr { 10 } else { 1 };
                assert!(k > least, "{what}: the cancel made {} operations", k - 1);
                eprintln!("{s:?}: power loss at each of {} operations", k - 1);
                break;
            }
            k += 1;
        }
    }
}
