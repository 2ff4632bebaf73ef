//! Live storage migration (seed 004) on in-memory devices: each scheme's routing rules
//! against a reference copy of the volume, writes to the chunk being copied, cancel before
//! and after the copy, and crashes at every phase.

mod common;

use bytes::Bytes;
use common::*;
use tiervisor_engine::jobs::migrate::{
    AUTO_SCHEMES, MigrationParams, MigrationPhase, Scheme, SchemeChoice, predict_cost,
};
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const VOL: &str = "thin";
/// Chunks the tests write (of the volume's 40).
const CHUNKS: u64 = 6;

fn params(s: Scheme) -> MigrationParams {
    MigrationParams {
        scheme: SchemeChoice::Fixed(s),
        rate_bytes_per_s: 1 << 40,
        granularity_bytes: 64 << 10,
        buffer_bytes: 256 << 10,
        ..MigrationParams::new(SSD)
    }
}

/// A rig with the thin volume's first chunks written on the HDD, and its reference.
fn setup() -> (Rig, Vec<u8>) {
    let mut r = Rig::new(config(1 << 20));
    let mut reference = vec![0u8; (CHUNKS * MIB) as usize];
    for c in 0..CHUNKS {
        let d = pattern(c as u8 + 1, MIB as usize);
        r.write(VOL, c * MIB, &d);
        reference[(c * MIB) as usize..((c + 1) * MIB) as usize].copy_from_slice(&d);
    }
    r.flush(VOL);
    (r, reference)
}

fn vid(r: &Rig) -> VolumeId {
    r.engine.volume_id(VOL).unwrap()
}

fn start(r: &mut Rig, p: MigrationParams) {
    let mut out = Outputs::default();
    let v = vid(r);
    r.engine.start_migration(r.now, v, p, &mut out).unwrap();
    r.drain(out);
}

fn phase(r: &Rig) -> MigrationPhase {
    r.engine.migration_status(vid(r)).unwrap().phase
}

/// Where the chunks live now.
fn pools(r: &Rig) -> Vec<Option<PoolId>> {
    let v = vid(r);
    (0..CHUNKS)
        .map(|c| r.engine.chunk_location(v, c).map(|(p, _)| p))
        .collect()
}

/// Run until the job is over (ticks let rate-limited copies and the pivot commit go).
fn finish(r: &mut Rig) {
    for _ in 0..10_000 {
        if matches!(
            phase(r),
            MigrationPhase::Done | MigrationPhase::Cancelled | MigrationPhase::Failed
        ) {
            return;
        }
        r.tick(1_000_000);
    }
    panic!("migration did not finish: {:?}", phase(r));
}

#[test]
fn every_scheme_moves_the_volume_and_keeps_every_write() {
    for s in Scheme::ALL {
        let (mut r, mut reference) = setup();
        r.hold = true;
        start(&mut r, params(s));
        // Let the copy get part way, writing into copied, being-copied and uncopied chunks.
        for step in 0..40u64 {
            r.release_one();
            let off = (step * 389 * 4096) % (CHUNKS * MIB - 8192);
            let d = pattern(100 + step as u8, 8192);
            let id = r.submit(VOL, ReqKind::Write, off, Some(&d), 8192);
            reference[off as usize..off as usize + 8192].copy_from_slice(&d);
            while r.take_done(id).is_none() {
                assert!(r.release_one().is_some(), "{s:?}: write {step} stuck");
            }
        }
        r.hold = false;
        while r.release_one().is_some() {}
        check_ref(&mut r, VOL, &reference, &format!("{s:?} during the copy"));
        finish(&mut r);
        assert_eq!(phase(&r), MigrationPhase::Done, "{s:?}");
        // The switch is durable after the pause ended (the volume resumed before).
        let st = r.engine.migration_status(vid(&r)).unwrap().stats;
        assert!(st.pivot_durable_ns >= st.downtime_ns, "{s:?}: {st:?}");
        assert!(
            pools(&r).iter().all(|p| *p == Some(SSD)),
            "{s:?}: {:?}",
            pools(&r)
        );
        check_ref(&mut r, VOL, &reference, &format!("{s:?} after the pivot"));
        r.crash_and_mount();
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("{s:?} after a crash past the pivot"),
        );
        r.engine.check_invariants().unwrap();
    }
}

#[test]
fn writes_to_the_chunk_being_copied_wait_for_it_except_under_dbt() {
    for s in Scheme::ALL {
        let (mut r, mut reference) = setup();
        r.hold = true;
        start(&mut r, params(s));
        // The first copy read of chunk 0 is held: chunk 0 is being copied.
        assert!(!r.held.is_empty());
        let d = pattern(200, 4096);
        let ops = r.engine.ops_in_flight();
        let id = r.submit(VOL, ReqKind::Write, 4096, Some(&d), 4096);
        reference[4096..8192].copy_from_slice(&d);
        // A waiting write has no device operation yet.
        let waits = r.engine.ops_in_flight() == ops;
        assert_eq!(
            waits,
            s != Scheme::Dbt,
            "{s:?}: the write waits for the copy"
        );
        r.hold = false;
        while r.release_one().is_some() {}
        assert_eq!(r.take_done(id).unwrap().result, Ok(()));
        finish(&mut r);
        check_ref(&mut r, VOL, &reference, &format!("{s:?}"));
        let st = r.engine.migration_status(vid(&r)).unwrap();
        if s == Scheme::Dbt {
            assert!(st.stats.pass >= 2, "dbt recopies the dirty block: {st:?}");
        }
    }
}

#[test]
fn lr_writes_go_to_the_destination_and_reads_follow_them() {
    let (mut r, mut reference) = setup();
    r.hold = true;
    start(&mut r, params(Scheme::Lr));
    // Chunk 4 is uncopied: the write goes to the SSD, the HDD copy stays as it was.
    let before = pools(&r);
    let d = pattern(77, 4096);
    let id = r.submit(VOL, ReqKind::Write, 4 * MIB + 8192, Some(&d), 4096);
    reference[(4 * MIB + 8192) as usize..(4 * MIB + 12288) as usize].copy_from_slice(&d);
    let w = r
        .held
        .iter()
        .find(|op| op.class == IoClass::Foreground)
        .cloned();
    assert_eq!(
        w.map(|op| op.pool),
        Some(SSD),
        "lr writes to the destination"
    );
    r.hold = false;
    while r.release_one().is_some() {}
    assert_eq!(r.take_done(id).unwrap().result, Ok(()));
    assert_eq!(before[4], Some(HDD));
    check_ref(&mut r, VOL, &reference, "lr read by the bitmap");
    finish(&mut r);
    let st = r.engine.migration_status(vid(&r)).unwrap();
    // The copy skipped the block written to the destination.
    assert!(st.stats.copied_bytes < CHUNKS * MIB, "{st:?}");
    assert_eq!(st.stats.redundant_bytes, 0);
    check_ref(&mut r, VOL, &reference, "lr after pivot");
}

#[test]
fn mirror_writes_to_copied_chunks_reach_both_pools_before_completing() {
    let (mut r, mut reference) = setup();
    start(&mut r, params(Scheme::Mirror));
    // Rate-free copy finished at once; the pivot has happened or is near: restart with a
    // slow rate to catch it mid-copy.
    finish(&mut r);
    let (mut r, _) = setup();
    let mut p = params(Scheme::Mirror);
    p.rate_bytes_per_s = 4 << 20; // 2 chunks of burst, then 4 MiB/s
    start(&mut r, p);
    r.hold = true;
    let d = pattern(55, 4096);
    let id = r.submit(VOL, ReqKind::Write, 0, Some(&d), 4096);
    reference[..4096].copy_from_slice(&d);
    let mut targets: Vec<PoolId> = r.held.iter().map(|op| op.pool).collect();
    targets.sort_by_key(|p| p.0);
    assert_eq!(targets, vec![SSD, HDD], "both pools");
    release_source_first(&mut r);
    assert!(r.take_done(id).is_none(), "not complete on one write");
    r.release_one();
    assert_eq!(r.take_done(id).unwrap().result, Ok(()));
    r.hold = false;
    finish(&mut r);
    check_ref(&mut r, VOL, &reference, "mirror");
    assert!(
        r.engine
            .migration_status(vid(&r))
            .unwrap()
            .stats
            .mirrored_bytes
            >= 4096
    );
}

/// Put the held source (HDD) write first, then complete it.
fn release_source_first(r: &mut Rig) {
    let i = r
        .held
        .iter()
        .position(|op| op.pool == HDD)
        .expect("a held source write");
    let op = r.held.remove(i).expect("exists");
    r.held.push_front(op);
    r.release_one();
}

/// Under mirror, a VM write to a copied chunk with its source write done and its
/// destination duplicate still held: true if the VM's write is (rightly) not yet done.
fn mirror_ack_waits_for_the_duplicate(bug: Option<InjectedBug>) -> bool {
    let mut r = Rig::with_bug(config(1 << 20), bug);
    for c in 0..CHUNKS {
        r.write(VOL, c * MIB, &pattern(c as u8 + 1, MIB as usize));
    }
    r.flush(VOL);
    let mut p = params(Scheme::Mirror);
    p.rate_bytes_per_s = 4 << 20; // chunk 0 copied at once, the rest later
    start(&mut r, p);
    r.hold = true;
    let id = r.submit(VOL, ReqKind::Write, 0, Some(&pattern(55, 4096)), 4096);
    release_source_first(&mut r);
    let waited = r.take_done(id).is_none();
    r.hold = false;
    while r.release_one().is_some() {}
    waited
}

/// DST caught `mirror-acks-early` only where a read or a crash fell inside one duplicate's
/// flight (seed 243 of the CI set until the throttle's timing moved it out): the
/// acknowledgement itself is checked here, on every run.
#[test]
fn a_mirrored_write_is_acknowledged_only_after_its_duplicate() {
    assert!(mirror_ack_waits_for_the_duplicate(None));
    assert!(
        !mirror_ack_waits_for_the_duplicate(Some(InjectedBug::MirrorAcksEarly)),
        "mirror-acks-early not caught"
    );
}

/// DBT's bitmap goes down to the paper's sector (512 bytes): a 4 KiB write into a copied
/// chunk recopies the blocks it touched, not a 64 KiB block around it. Before the finer
/// bitmap (one 64-bit word a chunk) 512 and 4096 were refused on 1 MiB chunks.
#[test]
fn dbt_recopies_only_the_blocks_a_write_touched() {
    // (granularity, bytes recopied for a 4 KiB write at 4,608: blocks it touches).
    for (g, recopied) in [(512, 4096), (4096, 8192), (64 << 10, 64 << 10)] {
        let (mut r, mut reference) = setup();
        r.hold = true;
        start(
            &mut r,
            MigrationParams {
                granularity_bytes: g,
                ..params(Scheme::Dbt)
            },
        );
        // Chunk 0's copy is under way: the write marks its blocks dirty.
        assert!(!r.held.is_empty());
        held_write(&mut r, &mut reference, 4608, 90, 4096);
        r.hold = false;
        while r.release_one().is_some() {}
        finish(&mut r);
        assert_eq!(phase(&r), MigrationPhase::Done, "granularity {g}");
        let st = r.engine.migration_status(vid(&r)).unwrap().stats;
        assert_eq!(st.redundant_bytes, recopied, "granularity {g}: {st:?}");
        assert_eq!(st.dirty_bytes, 0, "granularity {g}");
        check_ref(&mut r, VOL, &reference, &format!("granularity {g}"));
        r.crash_and_mount();
        check_ref(&mut r, VOL, &reference, &format!("granularity {g}, crash"));
        r.engine.check_invariants().unwrap();
    }
}

#[test]
fn cancel_before_and_after_the_copy_leaves_the_source_complete() {
    for s in Scheme::ALL {
        for after_copy in [false, true] {
            let (mut r, mut reference) = setup();
            let mut p = params(s);
            if !after_copy {
                p.rate_bytes_per_s = 4 << 20;
            }
            r.hold = after_copy;
            start(&mut r, p);
            if after_copy {
                // Copy everything but hold the pivot's commit: cancel lands in Draining
                // or just before.
                while r.release_one().is_some() {
                    if matches!(
                        phase(&r),
                        MigrationPhase::Draining | MigrationPhase::Committing { .. }
                    ) {
                        break;
                    }
                }
            }
            let v = vid(&r);
            let mut out = Outputs::default();
            let res = r.engine.cancel_migration(r.now, v, &mut out);
            r.drain(out);
            r.hold = false;
            while r.release_one().is_some() {}
            for i in 0..4u64 {
                write_ref(
                    &mut r,
                    VOL,
                    &mut reference,
                    i * MIB + 4096 * (i + 1),
                    150 + i as u8,
                    4096,
                );
            }
            finish(&mut r);
            let ph = phase(&r);
            if res.is_err() {
                assert_eq!(
                    ph,
                    MigrationPhase::Done,
                    "{s:?}: too late to cancel means done"
                );
                continue;
            }
            assert_eq!(
                ph,
                MigrationPhase::Cancelled,
                "{s:?} after_copy={after_copy}"
            );
            assert!(
                pools(&r).iter().all(|p| *p == Some(HDD)),
                "{s:?}: {:?}",
                pools(&r)
            );
            check_ref(&mut r, VOL, &reference, &format!("{s:?} cancelled"));
            r.flush(VOL);
            r.crash_and_mount();
            check_ref(
                &mut r,
                VOL,
                &reference,
                &format!("{s:?} cancelled, crashed"),
            );
            r.engine.check_invariants().unwrap();
        }
    }
}

#[test]
fn a_crash_at_any_point_keeps_every_flushed_write() {
    for s in Scheme::ALL {
        for cut in [3usize, 10, 25, 60, 120] {
            let (mut r, mut reference) = setup();
            r.hold = true;
            start(&mut r, params(s));
            r.release_with_flushed_writes(
                VOL,
                &mut reference,
                cut,
                CHUNKS * MIB,
                &format!("{s:?}"),
            );
            r.engine.check_invariants().unwrap();
            r.crash_and_mount();
            check_ref(
                &mut r,
                VOL,
                &reference,
                &format!("{s:?} crash after {cut} ops"),
            );
            r.engine.check_invariants().unwrap();
            // The job can be started again and finishes.
            start(&mut r, params(s));
            finish(&mut r);
            check_ref(
                &mut r,
                VOL,
                &reference,
                &format!("{s:?} restarted after {cut}"),
            );
            assert!(pools(&r).iter().all(|p| *p == Some(SSD)));
        }
    }
}

#[test]
fn auto_picks_by_predicted_cost_and_says_why() {
    let (mut r, _) = setup();
    // A read-mostly volume (the paper's Iometer runs: 75 % reads).
    for _ in 0..3 {
        r.read(VOL, 0, CHUNKS * MIB);
    }
    let mut p = params(Scheme::Lr);
    p.scheme = SchemeChoice::Auto;
    let mut out = Outputs::default();
    let v = vid(&r);
    let st = r.engine.start_migration(r.now, v, p, &mut out).unwrap();
    r.drain(out);
    // The choice is the cheapest prediction of seed 004's three designs (its Mix), and
    // the reason lists each one's; DBT and mirror are not candidates.
    let best = AUTO_SCHEMES
        .into_iter()
        .min_by(|&a, &b| {
            let c = |s| predict_cost(s, Medium::Hdd, Medium::Ssd, 0.25, 0.5).mc;
            c(a).total_cmp(&c(b))
        })
        .unwrap();
    assert_eq!(st.scheme, best, "{}", st.why);
    for s in AUTO_SCHEMES {
        assert!(st.why.contains(s.name()), "{}", st.why);
    }
    assert!(
        !st.why.contains("dbt") && !st.why.contains("mirror"),
        "{}",
        st.why
    );
    assert!(st.why.contains("write share 25 %"), "{}", st.why);
}

#[test]
fn bad_requests_are_refused_with_a_reason() {
    let (mut r, _) = setup();
    let mut out = Outputs::default();
    let v = vid(&r);
    let mut p = params(Scheme::Lr);
    p.granularity_bytes = 3000;
    assert!(
        r.engine
            .start_migration(r.now, v, p, &mut out)
            .unwrap_err()
            .contains("granularity")
    );
    // A thick volume to the pool its home region is on (tests/thick_migration.rs moves
    // one elsewhere).
    let thick = r.engine.volume_id("thick").unwrap();
    assert!(
        r.engine
            .start_migration(r.now, thick, params(Scheme::Lr), &mut out)
            .unwrap_err()
            .contains("already lives on pool ssd")
    );
    let mut big = params(Scheme::Lr);
    big.to = PoolId(7);
    assert!(r.engine.start_migration(r.now, v, big, &mut out).is_err());
    let _ = Bytes::new();
}

/// Admin commands reach the job through `Engine::control`: every refusal is typed and
/// changes nothing, and a started job takes a new rate and a cancel.
#[test]
fn control_routes_migrations_and_refuses_each_bad_request() {
    let (mut r, reference) = setup();
    let v = vid(&r);
    let thick = r.engine.volume_id("thick").unwrap();
    let mut slow = params(Scheme::Slr);
    slow.rate_bytes_per_s = 1 << 20;
    let start = |volume, to| Control::StartMigration {
        volume,
        params: MigrationParams { to, ..slow.clone() },
    };
    let mut out = Outputs::default();
    let mut ctl = |r: &mut Rig, c: Control| {
        let res = r.engine.control(r.now, c, &mut out);
        r.drain(std::mem::take(&mut out));
        res
    };
    let refused = [
        (
            start(VolumeId(99), SSD),
            ControlError::UnknownVolume(VolumeId(99)),
        ),
        (start(v, PoolId(7)), ControlError::UnknownPool(PoolId(7))),
        (
            start(v, HDD),
            ControlError::SamePool {
                volume: VOL.into(),
                pool: "hdd".into(),
            },
        ),
        (
            Control::CancelMigration { volume: v },
            ControlError::NotMigrating { volume: VOL.into() },
        ),
        (
            Control::SetMigrationRate {
                volume: v,
                rate_bytes_per_s: 5,
            },
            ControlError::NotMigrating { volume: VOL.into() },
        ),
    ];
    for (c, want) in refused {
        assert_eq!(ctl(&mut r, c.clone()), Err(want), "{c:?}");
    }
    assert_eq!(
        ctl(&mut r, start(thick, SSD)),
        Err(ControlError::SamePool {
            volume: "thick".into(),
            pool: "ssd".into(),
        }),
        "a thick volume to the pool of its home region"
    );
    assert!(r.engine.migration_status(v).is_none(), "nothing started");

    ctl(&mut r, start(v, SSD)).unwrap();
    assert_eq!(phase(&r), MigrationPhase::Copying { pass: 1 });
    assert_eq!(
        ctl(&mut r, start(v, SSD)),
        Err(ControlError::AlreadyMigrating { volume: VOL.into() })
    );
    let zero = Control::SetMigrationRate {
        volume: v,
        rate_bytes_per_s: 0,
    };
    assert!(matches!(ctl(&mut r, zero), Err(ControlError::Invalid(_))));
    let rate = Control::SetMigrationRate {
        volume: v,
        rate_bytes_per_s: 3 << 20,
    };
    ctl(&mut r, rate).unwrap();
    let st = r.engine.migration_status(v).unwrap();
    assert_eq!(st.rate_bytes_per_s, 3 << 20);
    assert!(st.chunks_done < st.chunks, "still copying: {st:?}");
    ctl(&mut r, Control::CancelMigration { volume: v }).unwrap();
    finish(&mut r);
    assert_eq!(phase(&r), MigrationPhase::Cancelled);
    assert!(pools(&r).iter().all(|&p| p == Some(HDD)), "{:?}", pools(&r));
    check_ref(&mut r, VOL, &reference, "after the cancel");
    r.engine.check_invariants().unwrap();
}

/// Run a job with writes all over the volume while it copies; true if every read (during
/// the job, after the pivot, after a crash) matched the reference.
fn scenario_holds(s: Scheme, bug: Option<InjectedBug>) -> bool {
    let mut r = Rig::with_bug(config(1 << 20), bug);
    let mut reference = fill_ref(&mut r, VOL, CHUNKS, 0..CHUNKS);
    r.flush(VOL);
    r.hold = true;
    start(&mut r, params(s));
    for step in 0..40u64 {
        r.release_one();
        let off = (step * 389 * 4096) % (CHUNKS * MIB - 8192);
        let d = pattern(100 + step as u8, 8192);
        let id = r.submit(VOL, ReqKind::Write, off, Some(&d), 8192);
        reference[off as usize..off as usize + 8192].copy_from_slice(&d);
        while r.take_done(id).is_none() {
            if r.release_one().is_none() {
                return false;
            }
        }
        // Read it back while the job still routes.
        let rd = r.submit(VOL, ReqKind::Read, off, None, 8192);
        let got = loop {
            if let Some(c) = r.take_done(rd) {
                break c;
            }
            if r.release_one().is_none() {
                return false;
            }
        };
        if got.data.as_deref() != Some(&reference[off as usize..off as usize + 8192]) {
            return false;
        }
    }
    r.hold = false;
    while r.release_one().is_some() {}
    let same = |r: &mut Rig, reference: &[u8]| r.read(VOL, 0, reference.len() as u64) == reference;
    if !same(&mut r, &reference) {
        return false;
    }
    finish(&mut r);
    if !same(&mut r, &reference) {
        return false;
    }
    r.flush(VOL);
    r.crash_and_mount();
    same(&mut r, &reference)
}

#[test]
fn the_routing_checks_catch_each_schemes_injected_bug() {
    // In-order devices cannot reorder AIO's duplicates or race mirror's acknowledgement:
    // the tests of those two bugs reorder the held operations themselves
    // (`a_mirrored_write_is_acknowledged_only_after_its_duplicate`,
    // `aio_duplicates_of_a_chunk_land_in_order`).
    for (s, bug) in [
        (Scheme::Dbt, InjectedBug::DbtMissesDirty),
        (Scheme::Lr, InjectedBug::LrReadsSource),
        (Scheme::Slr, InjectedBug::SlrWritesSource),
    ] {
        assert!(scenario_holds(s, None), "{s:?} without the bug");
        assert!(!scenario_holds(s, Some(bug)), "{} not caught", bug.name());
    }
}

/// A volume with chunks on both pools (here: chunk 0, which LR allocated on the
/// destination and a cancel kept there). DBT to that pool skips the chunk already there; a
/// write to it must not mark it dirty, or a later pass copies it to a second destination
/// chunk that the pivot never frees (DST seed 47 with migrations: an SSD chunk leaked).
#[test]
fn dbt_leaves_a_chunk_already_on_the_destination_alone() {
    let mut r = Rig::new(config(1 << 20));
    let mut reference = vec![0u8; (CHUNKS * MIB) as usize];
    for c in 1..CHUNKS {
        write_ref(
            &mut r,
            VOL,
            &mut reference,
            c * MIB,
            c as u8 + 1,
            MIB as usize,
        );
    }
    r.flush(VOL);
    let v = vid(&r);
    r.hold = true;
    start(&mut r, params(Scheme::Lr));
    held_write(&mut r, &mut reference, 0, 31, 8192);
    let mut out = Outputs::default();
    r.engine.cancel_migration(r.now, v, &mut out).unwrap();
    r.drain(out);
    r.hold = false;
    while r.release_one().is_some() {}
    finish(&mut r);
    assert_eq!(phase(&r), MigrationPhase::Cancelled);
    assert_eq!(pools(&r)[..2], [Some(SSD), Some(HDD)]);
    r.engine.check_invariants().unwrap();
    // DBT, writing to the chunk already on the SSD while the others copy.
    r.hold = true;
    start(&mut r, params(Scheme::Dbt));
    for step in 0..6u8 {
        r.release_one();
        held_write(&mut r, &mut reference, 4096, 40 + step, 4096);
    }
    r.hold = false;
    while r.release_one().is_some() {}
    finish(&mut r);
    assert_eq!(phase(&r), MigrationPhase::Done);
    r.engine.check_invariants().unwrap();
    check_ref(&mut r, VOL, &reference, "after the pivot");
    r.crash_and_mount();
    r.engine.check_invariants().unwrap();
    check_ref(&mut r, VOL, &reference, "after a crash");
}

/// A write while device operations are held: release them until it completes.
fn held_write(r: &mut Rig, reference: &mut [u8], off: u64, seed: u8, len: usize) {
    let d = pattern(seed, len);
    let id = r.submit(VOL, ReqKind::Write, off, Some(&d), len as u64);
    reference[off as usize..off as usize + len].copy_from_slice(&d);
    while r.take_done(id).is_none() {
        assert!(r.release_one().is_some(), "write at {off} stuck");
    }
}

/// A write already on its way to the source when the job starts (or when the chunk was
/// still uncopied) is not marked dirty: the chunk's copy must wait for it, under DBT too,
/// or the copy reads the old data and the pivot switches to it (DST seed 151).
#[test]
fn a_write_in_flight_when_the_copy_starts_is_not_lost() {
    for s in Scheme::ALL {
        let (mut r, mut reference) = setup();
        r.hold = true;
        let d = pattern(77, 8192);
        let id = r.submit(VOL, ReqKind::Write, 4096, Some(&d), 8192);
        reference[4096..4096 + 8192].copy_from_slice(&d);
        let write_ops = r.held.len();
        start(&mut r, params(s));
        // The write lands after the copy read of its chunk would have gone.
        r.held.rotate_left(write_ops);
        r.hold = false;
        while r.release_one().is_some() {}
        assert!(r.take_done(id).is_some_and(|c| c.result.is_ok()), "{s:?}");
        finish(&mut r);
        assert_eq!(phase(&r), MigrationPhase::Done, "{s:?}");
        check_ref(&mut r, VOL, &reference, &format!("{s:?} after the pivot"));
        r.engine.check_invariants().unwrap();
    }
}

/// Cancel copies LR's and SLR's destination data back to the source and then drops the
/// `Moved` entries: the source pool must be flushed before the records that drop them are
/// durable, or a power loss reads the old data there (DST seed 38: a copy back, then an
/// FUA commit of the clear without a flush of the HDD).
#[test]
fn a_cancel_flushes_the_copied_back_data_before_dropping_the_entries() {
    for s in [Scheme::Lr, Scheme::Slr] {
        let (mut r, mut reference) = setup();
        let v = vid(&r);
        r.hold = true;
        start(&mut r, params(s));
        if s == Scheme::Slr {
            // SLR writes to the destination only in the copied region: let chunk 0 copy.
            while r.engine.migration_status(v).unwrap().chunks_done == 0 {
                assert!(r.release_one().is_some(), "the copy stalled");
            }
            held_write(&mut r, &mut reference, 4096, 61, 4096);
        } else {
            held_write(&mut r, &mut reference, 5 * MIB + 4096, 61, 4096);
        }
        let mut out = Outputs::default();
        r.engine.cancel_migration(r.now, v, &mut out).unwrap();
        r.drain(out);
        let mut ops = Vec::new();
        for _ in 0..10_000 {
            match r.release_one() {
                Some(op) => ops.push(op),
                None if matches!(phase(&r), MigrationPhase::Cancelled) => break,
                None => r.tick(1_000_000),
            }
        }
        // Let the last commit go.
        for _ in 0..100 {
            r.tick(30_000_000);
            while let Some(op) = r.release_one() {
                ops.push(op);
            }
        }
        assert_eq!(phase(&r), MigrationPhase::Cancelled, "{s:?}");
        let back = ops
            .iter()
            .rposition(|o| {
                o.pool == HDD && o.kind == DevKind::Write && o.class == IoClass::Migration
            })
            .unwrap_or_else(|| panic!("{s:?}: nothing was copied back"));
        assert!(
            ops[back..]
                .iter()
                .any(|o| o.pool == HDD && o.kind == DevKind::Flush),
            "{s:?}: the copied-back data was never flushed"
        );
        r.hold = false;
        check_ref(&mut r, VOL, &reference, &format!("{s:?} cancelled"));
    }
}

/// After the pivot the volume's new chunks go to its new pool, after a restart too: the
/// volume table records the new home pool (it used to keep the old one).
#[test]
fn the_new_home_pool_survives_a_restart() {
    let (mut r, mut reference) = setup();
    reference.resize(8 * MIB as usize, 0);
    let v = vid(&r);
    start(&mut r, params(Scheme::Dbt));
    finish(&mut r);
    assert_eq!(phase(&r), MigrationPhase::Done);
    r.crash_and_mount();
    write_ref(&mut r, VOL, &mut reference, 7 * MIB, 90, 4096);
    assert_eq!(r.engine.chunk_location(v, 7).map(|l| l.0), Some(SSD));
    r.engine.check_invariants().unwrap();
    check_ref(&mut r, VOL, &reference, "after the restart");
}

/// DST seed 187: an LR job wrote to the destination, power was lost, and a DBT job to the
/// same pool copied the source over that newer data. Every scheme started again to that
/// pool adopts the interrupted job's `Moved` ranges: its copy, and DBT's recopies of dirty
/// blocks written beside those ranges, skip them, so the newer data stays. (A refusal is
/// accepted only from a scheme other than LR or SLR, and only naming the interrupted job;
/// to the same pool none is refused today.)
#[test]
fn a_job_after_an_interrupted_lr_or_slr_job_never_copies_the_source_over_its_moved_ranges() {
    for first in [Scheme::Lr, Scheme::Slr] {
        for again in Scheme::ALL {
            let what = format!("{first:?} interrupted, then {again:?}");
            let (mut r, mut reference) = setup();
            r.hold = true;
            start(&mut r, params(first));
            // Copy the first chunk or two, then write both behind and ahead of the copy.
            for _ in 0..12 {
                if r.release_one().is_none() {
                    break;
                }
            }
            for (i, off) in [4096u64, 3 * MIB + 8192, 5 * MIB + 512]
                .into_iter()
                .enumerate()
            {
                let d = pattern(90 + i as u8, 4096);
                let id = r.submit(VOL, ReqKind::Write, off, Some(&d), 4096);
                reference[off as usize..off as usize + 4096].copy_from_slice(&d);
                while r.take_done(id).is_none() {
                    assert!(r.release_one().is_some(), "{what}: write stuck");
                }
            }
            let f = r.submit(VOL, ReqKind::Flush, 0, None, 0);
            while r.take_done(f).is_none() {
                assert!(r.release_one().is_some(), "{what}: flush stuck");
            }
            r.crash_and_mount();
            r.hold = false;
            check_ref(&mut r, VOL, &reference, &format!("{what}: after the crash"));
            // Resume; once the chunks with the first job's writes are copied, write
            // beside those writes (same dirty block), so DBT recopies the block.
            r.hold = true;
            let mut out = Outputs::default();
            let v = vid(&r);
            let started = r.engine.start_migration(r.now, v, params(again), &mut out);
            r.drain(out);
            if let Err(e) = &started {
                assert!(
                    !matches!(again, Scheme::Lr | Scheme::Slr) && e.contains("interrupted"),
                    "{what}: refused: {e}"
                );
                r.hold = false;
                while r.release_one().is_some() {}
                check_ref(&mut r, VOL, &reference, &format!("{what}: refused"));
                continue;
            }
            while r
                .engine
                .migration_status(vid(&r))
                .is_some_and(|s| s.chunks_done < 4)
            {
                if r.release_one().is_none() {
                    break;
                }
            }
            for (i, off) in [16384u64, 3 * MIB + 16384, 5 * MIB + 8192]
                .into_iter()
                .enumerate()
            {
                let d = pattern(110 + i as u8, 4096);
                let id = r.submit(VOL, ReqKind::Write, off, Some(&d), 4096);
                reference[off as usize..off as usize + 4096].copy_from_slice(&d);
                while r.take_done(id).is_none() {
                    assert!(r.release_one().is_some(), "{what}: write stuck");
                }
            }
            r.hold = false;
            while r.release_one().is_some() {}
            finish(&mut r);
            assert_eq!(phase(&r), MigrationPhase::Done, "{what}");
            assert!(pools(&r).iter().all(|p| *p == Some(SSD)), "{what}");
            check_ref(&mut r, VOL, &reference, &format!("{what}: finished"));
            r.crash_and_mount();
            check_ref(
                &mut r,
                VOL,
                &reference,
                &format!("{what}: finished, crashed"),
            );
        }
    }
}

/// `chunks_copied` counts chunks whose data was copied, not the unmapped ones the copy
/// passed; the job's cost (equations 1-4) is there for its gamma once the volume had I/O.
#[test]
fn a_job_counts_only_chunks_it_copied_and_reports_its_cost() {
    let (mut r, mut reference) = setup();
    let v = vid(&r);
    r.tick(1_000_000_000);
    start(
        &mut r,
        MigrationParams {
            gamma: 0.25,
            rate_bytes_per_s: 4 << 20,
            ..params(Scheme::Mirror)
        },
    );
    // During the copy (it takes 1.5 s at 4 MiB/s).
    write_ref(&mut r, VOL, &mut reference, 5 * MIB + 4096, 77, 8192);
    finish(&mut r);
    assert_eq!(phase(&r), MigrationPhase::Done);
    let st = r.engine.migration_status(v).unwrap();
    // The volume has 40 chunks, 6 of them written: the copy passed all, copied 6.
    assert_eq!((st.chunks, st.chunks_done), (40, 40), "{st:?}");
    assert_eq!(st.stats.chunks_copied, CHUNKS, "{st:?}");
    assert_eq!(st.stats.image_bytes, CHUNKS * MIB, "{st:?}");
    let cost = st.cost().expect("the volume had requests before the job");
    assert_eq!(cost.gamma, 0.25);
    // Wear is SSD-bound bytes per VM byte written during the job.
    assert_eq!(st.stats.vm_write_bytes, 8192, "{st:?}");
    let wear = st.stats.ssd_write_bytes as f64 / st.stats.vm_write_bytes as f64;
    assert_eq!(cost.lambda_wear, wear);
    assert!(
        cost.lambda_migration_time > 0.0 && cost.lambda_io >= 0.0,
        "{cost:?}"
    );
    let mc = cost.lambda_migration_time * (0.25 * cost.lambda_wear + 0.75 * cost.lambda_io);
    assert!((cost.mc - mc).abs() < 1e-12, "{cost:?}");
    check_ref(&mut r, VOL, &reference, "after the pivot");
}

/// A job is recorded in the volume table: after a crash mid-copy the mount starts it
/// again with its scheme and parameters, every flushed write intact, and it finishes.
#[test]
fn a_job_interrupted_by_a_crash_resumes_at_mount() {
    for s in Scheme::ALL {
        let (mut r, mut reference) = setup();
        start(
            &mut r,
            MigrationParams {
                rate_bytes_per_s: 4 << 20,
                gamma: 0.75,
                ..params(s)
            },
        );
        r.tick(300_000_000);
        write_ref(&mut r, VOL, &mut reference, 4 * MIB + 4096, 60, 8192);
        write_ref(&mut r, VOL, &mut reference, 4096, 61, 4096);
        r.flush(VOL);
        let before = r.engine.migration_status(vid(&r)).unwrap();
        assert!(!before.phase.is_over(), "{s:?}: over before the crash");
        r.crash_and_mount();
        let st = r.engine.migration_status(vid(&r));
        let st = st.unwrap_or_else(|| panic!("{s:?}: no job after the mount"));
        assert!(!st.phase.is_over(), "{s:?}: {:?}", st.phase);
        assert_eq!(
            (st.scheme, st.gamma, st.rate_bytes_per_s),
            (s, 0.75, 4 << 20),
            "{s:?}"
        );
        assert!(
            r.events.iter().any(
                |e| matches!(e, EngineEvent::Warning { message } if message.contains("resumed"))
            ),
            "{s:?}: {:?}",
            r.events
        );
        check_ref(&mut r, VOL, &reference, &format!("{s:?} after the crash"));
        finish(&mut r);
        assert_eq!(phase(&r), MigrationPhase::Done, "{s:?}");
        assert!(pools(&r).iter().all(|p| *p == Some(SSD)), "{s:?}");
        check_ref(&mut r, VOL, &reference, &format!("{s:?} resumed and done"));
        // The finished job is no longer recorded: nothing resumes at the next mount.
        r.crash_and_mount();
        assert!(r.engine.migration_status(vid(&r)).is_none(), "{s:?}");
        check_ref(&mut r, VOL, &reference, &format!("{s:?} done, crashed"));
    }
}

/// Under AIO, two writes to the same block of a copied chunk, each acknowledged once its
/// source write is done; the destination may complete duplicates in any order, so the
/// device here completes the held ones newest first. True if the volume (read from the
/// destination after the pivot) holds the second write, as it must: the duplicates of a
/// chunk go one at a time, in order.
fn aio_keeps_the_newest_write_on_the_destination(bug: Option<InjectedBug>) -> bool {
    let mut r = Rig::with_bug(config(1 << 20), bug);
    let mut reference = fill_ref(&mut r, VOL, CHUNKS, 0..CHUNKS);
    r.flush(VOL);
    let mut p = params(Scheme::Aio);
    p.rate_bytes_per_s = 4 << 20; // chunk 0 copied at once, the rest later
    start(&mut r, p);
    r.hold = true;
    let is_dup = |op: &DeviceOp| {
        op.pool == SSD && op.kind == DevKind::Write && op.class == IoClass::Foreground
    };
    for seed in [71u8, 72] {
        let d = pattern(seed, 4096);
        let id = r.submit(VOL, ReqKind::Write, 8192, Some(&d), 4096);
        reference[8192..8192 + 4096].copy_from_slice(&d);
        // Complete everything but the duplicates until the VM's write is done.
        while r.take_done(id).is_none() {
            let i = r
                .held
                .iter()
                .position(|op| !is_dup(op))
                .expect("the write is stuck");
            let op = r.held.remove(i).expect("exists");
            r.held.push_front(op);
            r.release_one();
        }
    }
    // The destination completes the held duplicates newest first.
    let mut dups: Vec<DeviceOp> = Vec::new();
    r.held.retain(|op| {
        let d = is_dup(op);
        if d {
            dups.push(op.clone());
        }
        !d
    });
    for op in dups {
        r.held.push_front(op);
    }
    r.hold = false;
    while r.release_one().is_some() {}
    finish(&mut r);
    assert_eq!(phase(&r), MigrationPhase::Done);
    let got = r.read(VOL, 0, reference.len() as u64);
    got == reference
}

/// DST does not draw two overlapping writes within one duplicate's flight: the order of
/// AIO's duplicates per chunk is checked here.
#[test]
fn aio_duplicates_of_a_chunk_land_in_order() {
    assert!(aio_keeps_the_newest_write_on_the_destination(None));
    assert!(
        !aio_keeps_the_newest_write_on_the_destination(Some(InjectedBug::AioUnorderedDups)),
        "aio-unordered-dups not caught"
    );
}

/// A job started on a volume whose first writes are still allocating their chunks on the
/// source finds nothing to copy and pauses at once; the allocation then lands in the
/// region it counted as copied, and an LR write waiting behind it goes to the destination
/// with the rest of the chunk never copied. The pivot must copy what the drain made
/// uncopied, or the chunk reads the destination's leftovers (DST seed 91 at faults 2 with
/// creations in migrating seeds: garbage at sector 0 after an LR pivot).
#[test]
fn a_chunk_allocated_on_the_source_while_the_pivot_drains_is_copied() {
    for s in [
        Scheme::Lr,
        Scheme::Dbt,
        Scheme::Mirror,
        Scheme::Slr,
        Scheme::Aio,
    ] {
        let mut r = Rig::new(config(1 << 20));
        let mut reference = vec![0u8; (CHUNKS * MIB) as usize];
        r.hold = true;
        // Three chunks, not in address order: the pause's sweep must find each.
        let mut ids = vec![];
        for (i, c) in [4u64, 1, 3].into_iter().enumerate() {
            let writes = [
                (c * MIB + 300 * 1024, 300 * 1024, 51u8 + 2 * i as u8),
                (c * MIB + 40 * 1024, 800 * 1024, 52 + 2 * i as u8),
            ];
            for (off, len, seed) in writes {
                let d = pattern(seed, len);
                ids.push(r.submit(VOL, ReqKind::Write, off, Some(&d), len as u64));
                reference[off as usize..off as usize + len].copy_from_slice(&d);
            }
        }
        let write_ops = r.held.len();
        start(&mut r, params(s));
        // The job's pre-pivot flush lands first: the volume pauses with the allocation
        // still in flight.
        r.held.rotate_left(write_ops);
        r.hold = false;
        while r.release_one().is_some() {}
        for id in ids {
            assert!(r.take_done(id).is_some_and(|c| c.result.is_ok()), "{s:?}");
        }
        finish(&mut r);
        assert_eq!(phase(&r), MigrationPhase::Done, "{s:?}");
        check_ref(&mut r, VOL, &reference, &format!("{s:?} after the pivot"));
        let p = pools(&r);
        assert!([1, 3, 4].iter().all(|&c| p[c] == Some(SSD)), "{s:?}: {p:?}");
        r.engine.check_invariants().unwrap();
        r.crash_and_mount();
        check_ref(&mut r, VOL, &reference, &format!("{s:?} after a crash"));
    }
}

/// The pivot's commit fails for space (a full metadata pool): the volume's requests must
/// not wait for space without bound (DST seed 1058 with creations in migrating seeds:
/// requests parked by the pause never completed while a space spell lasted). They run on
/// the switched map meanwhile; once space returns the pivot completes, and a power loss
/// before or after finds every flushed write.
#[test]
fn a_pivot_whose_commit_fails_for_space_lets_the_volume_run() {
    for s in Scheme::ALL {
        let (mut r, mut reference) = setup();
        r.hold = true;
        start(&mut r, params(s));
        while !matches!(
            phase(&r),
            MigrationPhase::Committing { .. } | MigrationPhase::Done
        ) {
            assert!(
                r.release_one().is_some(),
                "{s:?}: no pivot: {:?}",
                phase(&r)
            );
        }
        if phase(&r) == MigrationPhase::Done {
            // LR switched every chunk as it copied: its pivot had nothing left to commit.
            assert_eq!(s, Scheme::Lr);
            continue;
        }
        r.fail_writes = Some(Errno::NoSpc);
        r.hold = false;
        while r.release_one().is_some() {}
        r.tick(1_000_000);
        assert!(
            matches!(phase(&r), MigrationPhase::Committing { .. }),
            "{s:?}"
        );
        // A read and a write of the paused volume complete while space is missing.
        let id = r.submit(VOL, ReqKind::Read, 0, None, 8192);
        let c = r.take_done(id).expect("a read waits for space");
        assert_eq!(c.result, Ok(()), "{s:?}");
        assert_eq!(&c.data.unwrap()[..], &reference[..8192], "{s:?}");
        r.tick(1_000_000);
        let d = pattern(99, 4096);
        let id = r.submit(VOL, ReqKind::Write, 2 * MIB, Some(&d), 4096);
        assert!(r.take_done(id).is_some(), "{s:?}: a write waits for space");
        // Power fails with the switch not durable (mount needs space: it comes back).
        r.fail_writes = None;
        r.crash_and_mount();
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("{s:?} after a crash without space"),
        );
        r.engine.check_invariants().unwrap();
        // Space is back: the resumed job pivots and the volume is on the destination.
        write_ref(&mut r, VOL, &mut reference, 3 * MIB + 512, 98, 4096);
        finish(&mut r);
        assert_eq!(phase(&r), MigrationPhase::Done, "{s:?}");
        assert!(
            pools(&r).iter().all(|p| *p == Some(SSD)),
            "{s:?}: {:?}",
            pools(&r)
        );
        r.flush(VOL);
        check_ref(&mut r, VOL, &reference, &format!("{s:?} after the pivot"));
        r.crash_and_mount();
        check_ref(
            &mut r,
            VOL,
            &reference,
            &format!("{s:?} after a crash past the pivot"),
        );
        r.engine.check_invariants().unwrap();
    }
}

/// The VM's writes (distinct 4 KiB blocks) and FLUSHes in a pivot test: a block written
/// before a FLUSH that completed must read back new after a power loss, any other old or
/// new.
#[derive(Default)]
struct Flushed {
    /// Assert that a FLUSH made in the pivot waits for the durable switch (off: only the
    /// data after a power loss is checked).
    check_wait: bool,
    /// (request id, offset, completed, covered by a completed FLUSH).
    blocks: Vec<(u64, u64, bool, bool)>,
    /// FLUSHes in flight: id, the blocks completed when it was submitted, and whether it
    /// was submitted from the pause on (it must then wait for the durable switch).
    flushes: Vec<(u64, Vec<usize>, bool)>,
    /// FLUSHes made from the pause on that completed.
    pivot_flushes_done: u32,
}

impl Flushed {
    fn write(&mut self, r: &mut Rig, reference: &mut [u8]) {
        let n = self.blocks.len() as u64 + 1;
        // 37 is prime to the 1536 blocks of CHUNKS MiB: every block is written once.
        let off = (n * 37 % (CHUNKS * MIB / 4096)) * 4096;
        let d = pattern(200u8.wrapping_add(n as u8), 4096);
        let id = r.submit(VOL, ReqKind::Write, off, Some(&d), 4096);
        reference[off as usize..off as usize + 4096].copy_from_slice(&d);
        self.blocks.push((id, off, false, false));
    }

    /// A FLUSH covering the writes completed now (before the pause, unless one is in
    /// flight).
    fn flush(&mut self, r: &mut Rig, in_pivot: bool) {
        if !in_pivot && !self.flushes.is_empty() {
            return;
        }
        for b in self.blocks.iter_mut().filter(|b| !b.2) {
            b.2 = r.take_done(b.0).is_some();
        }
        let covered = (0..self.blocks.len())
            .filter(|&i| self.blocks[i].2)
            .collect();
        let id = r.submit(VOL, ReqKind::Flush, 0, None, 0);
        self.flushes.push((id, covered, in_pivot));
    }

    /// Note completed FLUSHes. One submitted from the pause on completes only once the
    /// pivot's switch is durable (the job is then done).
    fn check(&mut self, r: &mut Rig, s: Scheme) {
        for (id, covered, in_pivot) in std::mem::take(&mut self.flushes) {
            let Some(c) = r.take_done(id) else {
                self.flushes.push((id, covered, in_pivot));
                continue;
            };
            if c.result.is_err() {
                continue;
            }
            let st = r.engine.migration_status(vid(r)).unwrap();
            assert!(
                !self.check_wait || !in_pivot || st.phase.is_over(),
                "{s:?}: a FLUSH made in the pivot completed before the switch was durable ({:?})",
                st.phase
            );
            for i in covered {
                self.blocks[i].3 = true;
            }
            self.pivot_flushes_done += in_pivot as u32;
        }
    }
}

/// A run of `s` whose devices lose every unflushed write at a power loss `k` device
/// operations into the pivot: its pause, and the window after it (the volume runs on the
/// switched map until the switch is durable). Before the pause and in that window the VM
/// writes and flushes now and then (`Flushed`). Returns None when the job was over before
/// `k` operations, else how many FLUSHes made from the pause on had completed.
fn power_loss_in_the_pivot(
    s: Scheme,
    k: usize,
    bug: Option<InjectedBug>,
    check_wait: bool,
) -> Option<u32> {
    let (mut r, mut reference) = setup();
    r.bug = bug;
    r.engine.inject_bug(bug);
    r.volatile = true;
    r.hold = true;
    start(&mut r, params(s));
    let old = reference.clone();
    let mut vm = Flushed {
        check_wait,
        ..Flushed::default()
    };
    let mut released = 0u64;
    while matches!(phase(&r), MigrationPhase::Copying { .. }) {
        if released.is_multiple_of(3) && vm.blocks.len() < 300 {
            vm.write(&mut r, &mut reference);
        }
        if released.is_multiple_of(7) {
            vm.flush(&mut r, false);
        }
        vm.check(&mut r, s);
        assert!(r.release_one().is_some(), "{s:?}: stuck before the pause");
        released += 1;
    }
    // From the pause on: a write, then a FLUSH, at every other operation (parked while
    // the volume is paused, served by the switched map once it runs again).
    let in_pivot = !phase(&r).is_over();
    for i in 0..k {
        if in_pivot && !phase(&r).is_over() && i.is_multiple_of(2) && vm.blocks.len() < 330 {
            vm.write(&mut r, &mut reference);
            vm.flush(&mut r, true);
        }
        let op = r.release_one();
        vm.check(&mut r, s);
        op?;
    }
    r.power_loss();
    let got = r.read(VOL, 0, reference.len() as u64);
    let must: Vec<u64> = vm.blocks.iter().filter(|b| b.3).map(|b| b.1).collect();
    for (i, sector) in got.chunks(512).enumerate() {
        let at = i * 512..(i + 1) * 512;
        let block = (i as u64 * 512) / 4096 * 4096;
        let new_ok = sector == &reference[at.clone()];
        let old_ok = sector == &old[at] && !must.contains(&block);
        assert!(
            new_ok || old_ok,
            "{s:?}: power loss {k} operations into the pivot: sector {i} holds neither a version it may hold (flushed new data: {})",
            must.contains(&block)
        );
    }
    r.engine.check_invariants().unwrap();
    // The job resumes and completes; everything read back is then there for good.
    let now = r.read(VOL, 0, reference.len() as u64);
    if r.engine.migration_status(vid(&r)).is_some() {
        finish(&mut r);
    }
    check_ref(&mut r, VOL, &now, &format!("{s:?} after resuming"));
    Some(vm.pivot_flushes_done)
}

/// The pivot's commit flushes only the destination: the source no longer matters once
/// the records switching every chunk are durable, and until then it keeps every write
/// flushed before (its chunks stay allocated). The volume runs again once the switch is
/// made in memory; a FLUSH made from the pause on completes only once the switch is
/// durable. A power loss at each step of the pivot (the drain, DBT's last copy, the
/// destination flush, the journal write, and the next commit round, which carries the
/// FLUSHes made meanwhile) keeps every flushed write readable.
#[test]
fn a_power_loss_at_each_step_of_the_pivot_keeps_every_flushed_write() {
    for s in Scheme::ALL {
        let (mut k, mut most) = (0, 0);
        while let Some(n) = power_loss_in_the_pivot(s, k, None, true) {
            most = most.max(n);
            k += 1;
        }
        assert!(k > 1, "{s:?}: the pause had {k} operations");
        // Power was lost after FLUSHes made in the pivot had completed.
        assert!(most > 0, "{s:?}: no FLUSH made in the pivot completed");
    }
}

/// `pivot-flush-early`: a FLUSH made while the volume runs on the switched map completes
/// before the switch is durable. The pivot test sees the FLUSH complete too early and,
/// without that check, a power loss in the window losing the writes the FLUSH covered.
#[test]
fn the_pivot_test_catches_a_flush_completed_before_the_switch_is_durable() {
    let bug = InjectedBug::PivotFlushEarly;
    for check_wait in [true, false] {
        let caught = std::panic::catch_unwind(|| {
            let mut k = 0;
            while power_loss_in_the_pivot(Scheme::Mirror, k, Some(bug), check_wait).is_some() {
                k += 1;
            }
        });
        let Err(e) = caught else {
            panic!("{} not caught (check_wait {check_wait})", bug.name());
        };
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        let want = if check_wait {
            "completed before the switch was durable"
        } else {
            "flushed new data: true"
        };
        assert!(msg.contains(want), "check_wait {check_wait}: {msg}");
    }
}

/// A cancel's copy back to a source pool that stays full is retried once per commit
/// interval, not at once: DST seed 3736 (faults 3, a lasting ENOSPC spell on the HDD)
/// retried an SLR cancel's copy back as fast as the devices answered, and grew past 6 GB.
#[test]
fn a_copy_back_that_fails_for_space_is_retried_after_the_commit_interval() {
    let (mut r, mut reference) = setup();
    let v = vid(&r);
    r.hold = true;
    start(&mut r, params(Scheme::Slr));
    while r.engine.migration_status(v).unwrap().chunks_done == 0 {
        assert!(r.release_one().is_some(), "the copy stalled");
    }
    // A write to the copied region lands on the destination only: the cancel must copy
    // it back to the HDD, which is now full.
    held_write(&mut r, &mut reference, 4096, 61, 4096);
    r.fail_writes = Some(Errno::NoSpc);
    let mut out = Outputs::default();
    r.engine.cancel_migration(r.now, v, &mut out).unwrap();
    r.drain(out);
    let from = r.now;
    let span_ns = 3_500_000_000;
    let mut copy_backs = 0;
    for _ in 0..20_000 {
        if r.now >= from + span_ns {
            break;
        }
        match r.release_one() {
            Some(op) => {
                copy_backs += u32::from(
                    op.pool == HDD && op.kind == DevKind::Write && op.class == IoClass::Migration,
                );
            }
            None => r.tick(1_000_000),
        }
    }
    let elapsed = r.now - from;
    let interval = config(1 << 20).commit_interval_ns;
    assert!(
        u64::from(copy_backs) <= elapsed / interval + 2,
        "{copy_backs} copy backs in {elapsed} ns of virtual time (commit interval {interval} ns)"
    );
    assert!(copy_backs >= 2, "retried: {copy_backs}");
    // Space returns: the cancel completes (failed, as a copy back failed) and the volume
    // holds every write.
    r.fail_writes = None;
    r.hold = false;
    while r.release_one().is_some() {}
    finish(&mut r);
    assert_eq!(phase(&r), MigrationPhase::Failed);
    assert_eq!(pools(&r), vec![Some(HDD); CHUNKS as usize]);
    check_ref(&mut r, VOL, &reference, "after the cancel");
    r.engine.check_invariants().unwrap();
}

/// DBT's later passes copy dirty blocks; a write to a copied chunk marks its blocks dirty
/// when it is routed, but may sit in the pool's queue for a while. The dirty copy must wait
/// for it: copying first clears the bits and reads the old data, the write lands behind the
/// copy, and the pivot switches to the old data (DST seed 8423: a write queued behind BFQ
/// on the HDD during the second pass).
#[test]
fn a_dbt_dirty_copy_waits_for_a_queued_write_to_its_chunk() {
    let (mut r, mut reference) = setup();
    let v = vid(&r);
    r.hold = true;
    start(&mut r, params(Scheme::Dbt));
    while r.engine.migration_status(v).unwrap().chunks_done == 0 {
        assert!(r.release_one().is_some(), "the copy stalled");
    }
    // A write to the copied chunk 0, its device write held back.
    let d = pattern(91, 8192);
    let id = r.submit(VOL, ReqKind::Write, 4096, Some(&d), 8192);
    reference[4096..4096 + 8192].copy_from_slice(&d);
    let is_ours =
        |o: &DeviceOp| o.pool == HDD && o.kind == DevKind::Write && o.class == IoClass::Foreground;
    while !r.held.iter().any(is_ours) {
        assert!(r.release_one().is_some(), "the write was never issued");
    }
    let at = r.held.iter().position(is_ours).expect("found");
    let write_op = r.held.remove(at).expect("found");
    // Everything else goes: the first pass ends and the second would copy chunk 0.
    for _ in 0..1000 {
        while r.release_one().is_some() {}
        r.tick(1_000_000);
    }
    r.held.push_back(write_op);
    r.hold = false;
    while r.release_one().is_some() {}
    assert!(r.take_done(id).is_some_and(|c| c.result.is_ok()));
    finish(&mut r);
    assert_eq!(phase(&r), MigrationPhase::Done);
    check_ref(&mut r, VOL, &reference, "after the pivot");
    r.engine.check_invariants().unwrap();
}

/// A start to the pool every chunk already is on, while the home pool is another (here an
/// empty volume on the HDD): the job copies nothing and does not pause the volume; it
/// records the new home pool, so new chunks go there, after a restart too. A second start
/// there is refused as the same pool. (Such a start used to run a whole job that paused
/// the volume through the pivot's drain to switch nothing.)
#[test]
fn a_start_to_where_every_chunk_already_is_records_the_new_home_without_pausing() {
    let mut r = Rig::new(config(1 << 20));
    let v = vid(&r);
    let mut reference = vec![0u8; 2 * MIB as usize];
    r.hold = true;
    let start_to_ssd = Control::StartMigration {
        volume: v,
        params: params(Scheme::Dbt),
    };
    assert_eq!(control(&mut r, start_to_ssd.clone()), Ok(()));
    let st = r.engine.migration_status(v).unwrap();
    assert_eq!(st.phase, MigrationPhase::Done, "{st:?}");
    assert_eq!((st.stats.downtime_ns, st.stats.copied_bytes), (0, 0));
    assert!(
        !r.events
            .iter()
            .any(|e| matches!(e, EngineEvent::MigrationPhase { paused: true, .. })),
        "{:?}",
        r.events
    );
    r.hold = false;
    while r.release_one().is_some() {}
    write_ref(&mut r, VOL, &mut reference, 4096, 7, 8192);
    assert_eq!(r.engine.chunk_location(v, 0).map(|l| l.0), Some(SSD));
    r.flush(VOL);
    r.crash_and_mount();
    write_ref(&mut r, VOL, &mut reference, MIB, 8, 4096);
    assert_eq!(r.engine.chunk_location(v, 1).map(|l| l.0), Some(SSD));
    check_ref(&mut r, VOL, &reference, "after the restart");
    assert_eq!(
        control(&mut r, start_to_ssd),
        Err(ControlError::SamePool {
            volume: VOL.into(),
            pool: "ssd".into(),
        })
    );
    r.engine.check_invariants().unwrap();
}

// Tiered volumes: a `hot` volume with chunks on both the fast pool (SSD) and its home
// pool (HDD) moves to its home pool (draining the fast pool) or to a third pool (its new
// home); tiering resumes after the pivot relative to the new home.

const HDD2: PoolId = PoolId(2);
const TIERED: &str = "tiered";

/// `config` with a third pool (`hdd2`) and a `hot` volume whose fast budget is 3 chunks.
fn tiered_config() -> EngineConfig {
    let mut cfg = config(1 << 20);
    let mut p = cfg.pools[1].clone();
    p.name = "hdd2".into();
    cfg.pools.push(p);
    cfg.volumes.push(VolumeConfig {
        name: TIERED.into(),
        size_bytes: 16 * MIB,
        home_pool: HDD,
        fast_pool: Some(SSD),
        provisioning: Provisioning::Thin,
        placement: Placement::Hot {
            fast_budget_bytes: 3 * MIB,
            priority: 0,
        },
        log: None,
        qos: Default::default(),
    });
    cfg
}

/// The tiered volume with chunks 0-2 on the SSD (new chunks start on the fast pool while
/// the budget has room) and 3-5 on the HDD, flushed; and its reference.
fn tiered_setup() -> (Rig, Vec<u8>) {
    let mut r = Rig::new(tiered_config());
    let mut reference = vec![0u8; 16 * MIB as usize];
    for c in 0..CHUNKS {
        let d = pattern(c as u8 + 41, MIB as usize);
        r.write(TIERED, c * MIB, &d);
        reference[(c * MIB) as usize..((c + 1) * MIB) as usize].copy_from_slice(&d);
    }
    r.flush(TIERED);
    let on = tiered_pools(&r);
    assert_eq!(on[..3], [Some(SSD); 3]);
    assert_eq!(on[3..6], [Some(HDD); 3]);
    (r, reference)
}

fn tvid(r: &Rig) -> VolumeId {
    r.engine.volume_id(TIERED).unwrap()
}

fn tiered_pools(r: &Rig) -> Vec<Option<PoolId>> {
    let v = tvid(r);
    (0..CHUNKS)
        .map(|c| r.engine.chunk_location(v, c).map(|(p, _)| p))
        .collect()
}

/// Heat chunk `c` with random reads and let the tier tick run: true if it reached the SSD.
fn promoted_after_heat(r: &mut Rig, c: u64) -> bool {
    let v = tvid(r);
    for round in 0..20u64 {
        for i in 0..16u64 {
            let off = c * MIB + ((i * 37 + round * 11) % 250) * 4096;
            r.read(TIERED, off, 4096);
        }
        r.tick(100_000_000);
        while r.release_one().is_some() {}
        if r.engine.chunk_location(v, c).map(|l| l.0) == Some(SSD) {
            return true;
        }
    }
    false
}

#[test]
fn a_tiered_volume_on_both_pools_migrates_with_every_scheme_and_tiering_resumes() {
    for to in [HDD, HDD2] {
        for s in Scheme::ALL {
            let what = format!("{s:?} to {to:?}");
            let (mut r, mut reference) = tiered_setup();
            r.hold = true;
            start_job(&mut r, TIERED, MigrationParams { to, ..params(s) }).unwrap();
            for step in 0..40u64 {
                r.release_one();
                let off = (step * 389 * 4096) % (CHUNKS * MIB - 8192);
                let d = pattern(100 + step as u8, 8192);
                let id = r.submit(TIERED, ReqKind::Write, off, Some(&d), 8192);
                reference[off as usize..off as usize + 8192].copy_from_slice(&d);
                while r.take_done(id).is_none() {
                    assert!(r.release_one().is_some(), "{what}: write {step} stuck");
                }
            }
            r.hold = false;
            while r.release_one().is_some() {}
            check_ref(
                &mut r,
                TIERED,
                &reference,
                &format!("{what} during the copy"),
            );
            r.engine.check_invariants().unwrap();
            finish_job(&mut r, TIERED);
            assert_eq!(job_phase(&r, TIERED), Some(MigrationPhase::Done), "{what}");
            assert_eq!(tiered_pools(&r), vec![Some(to); CHUNKS as usize], "{what}");
            assert_eq!(
                r.engine.volume_report(tvid(&r)).unwrap().promotions,
                0,
                "{what}: no tier move while the job ran"
            );
            check_ref(
                &mut r,
                TIERED,
                &reference,
                &format!("{what} after the pivot"),
            );
            r.engine.check_invariants().unwrap();
            r.crash_and_mount();
            check_ref(&mut r, TIERED, &reference, &format!("{what} after a crash"));
            r.engine.check_invariants().unwrap();
            // Tiering resumes relative to the new home: a hot chunk goes to the SSD again,
            // and once the fast budget is full, new chunks go to the new home.
            assert!(
                promoted_after_heat(&mut r, 4),
                "{what}: chunk 4 not promoted"
            );
            for c in [10, 11, 12] {
                write_ref(&mut r, TIERED, &mut reference, c * MIB, c as u8, 4096);
            }
            let v = tvid(&r);
            let at = |r: &Rig, c| r.engine.chunk_location(v, c).map(|l| l.0);
            assert_eq!((at(&r, 10), at(&r, 11)), (Some(SSD), Some(SSD)), "{what}");
            assert_eq!(at(&r, 12), Some(to), "{what}: the new home after a restart");
            check_ref(&mut r, TIERED, &reference, &format!("{what} after tiering"));
            r.engine.check_invariants().unwrap();
        }
    }
}

/// A crash at any point of a tiered volume's job keeps every flushed write; the mount
/// resumes the job (or it is started again, if its start was not durable) and it ends
/// with every chunk on the destination.
#[test]
fn a_crash_at_any_point_of_a_tiered_volumes_job_keeps_every_flushed_write() {
    for s in Scheme::ALL {
        for cut in [3usize, 10, 25, 60, 120, 400] {
            let what = format!("{s:?} crash after {cut} ops");
            let (mut r, mut reference) = tiered_setup();
            r.hold = true;
            start_job(
                &mut r,
                TIERED,
                MigrationParams {
                    to: HDD2,
                    ..params(s)
                },
            )
            .unwrap();
            r.release_with_flushed_writes(TIERED, &mut reference, cut, CHUNKS * MIB, &what);
            r.engine.check_invariants().unwrap();
            r.crash_and_mount();
            check_ref(&mut r, TIERED, &reference, &what);
            r.engine.check_invariants().unwrap();
            match job_phase(&r, TIERED) {
                Some(p) if !p.is_over() => {}
                _ if tiered_pools(&r) == vec![Some(HDD2); CHUNKS as usize] => {}
                _ => start_job(
                    &mut r,
                    TIERED,
                    MigrationParams {
                        to: HDD2,
                        ..params(s)
                    },
                )
                .unwrap(),
            }
            if job_phase(&r, TIERED).is_some() {
                finish_job(&mut r, TIERED);
            }
            assert_eq!(
                tiered_pools(&r),
                vec![Some(HDD2); CHUNKS as usize],
                "{what}"
            );
            check_ref(&mut r, TIERED, &reference, &format!("{what}, then done"));
            r.engine.check_invariants().unwrap();
            r.crash_and_mount();
            check_ref(
                &mut r,
                TIERED,
                &reference,
                &format!("{what}, done and crashed"),
            );
            assert!(promoted_after_heat(&mut r, 1), "{what}: no promotion after");
        }
    }
}

/// A cancel leaves every chunk where it was (on either pool), with every write.
#[test]
fn a_cancelled_tiered_job_leaves_the_chunks_where_they_were() {
    for s in Scheme::ALL {
        let (mut r, mut reference) = tiered_setup();
        let before = tiered_pools(&r);
        start_job(
            &mut r,
            TIERED,
            MigrationParams {
                to: HDD2,
                rate_bytes_per_s: 8 << 20,
                ..params(s)
            },
        )
        .unwrap();
        r.tick(250_000_000);
        write_ref(&mut r, TIERED, &mut reference, 4096, 70, 8192);
        write_ref(&mut r, TIERED, &mut reference, 5 * MIB - 4096, 71, 8192);
        let st = r.engine.migration_status(tvid(&r)).unwrap();
        assert!(st.chunks_done > 0 && !st.phase.is_over(), "{s:?}: {st:?}");
        let v = tvid(&r);
        control(&mut r, Control::CancelMigration { volume: v }).unwrap();
        finish_job(&mut r, TIERED);
        assert_eq!(
            job_phase(&r, TIERED),
            Some(MigrationPhase::Cancelled),
            "{s:?}"
        );
        assert_eq!(tiered_pools(&r), before, "{s:?}");
        check_ref(&mut r, TIERED, &reference, &format!("{s:?} cancelled"));
        r.engine.check_invariants().unwrap();
        r.crash_and_mount();
        check_ref(
            &mut r,
            TIERED,
            &reference,
            &format!("{s:?} cancelled, crashed"),
        );
    }
}

/// Tier moves of a volume in flight refuse its start (`Busy`: a move is one chunk copy,
/// try again); while its job runs, no tier move of it starts; a start to its fast pool is
/// refused (its home cannot be its fast pool).
#[test]
fn tier_moves_and_a_tiered_job_exclude_each_other() {
    let (mut r, _) = tiered_setup();
    let v = tvid(&r);
    let refused = control(
        &mut r,
        Control::StartMigration {
            volume: v,
            params: params(Scheme::Lr),
        },
    );
    match refused {
        Err(ControlError::Unsupported(why)) => assert!(why.contains("fast pool"), "{why}"),
        other => panic!("a start to the fast pool: {other:?}"),
    }
    // A tier move in flight (its chunk copy held): the start is refused as busy.
    let mut moving = false;
    for round in 0..20u64 {
        for i in 0..16u64 {
            r.read(TIERED, 4 * MIB + ((i * 37 + round * 11) % 250) * 4096, 4096);
        }
        r.hold = true;
        r.tick(100_000_000);
        if r.held
            .iter()
            .any(|o| o.kind == DevKind::Read && o.len_bytes == MIB)
        {
            moving = true;
            break;
        }
        r.hold = false;
        while r.release_one().is_some() {}
    }
    assert!(moving, "no tier move started");
    let busy = control(
        &mut r,
        Control::StartMigration {
            volume: v,
            params: MigrationParams {
                to: HDD2,
                ..params(Scheme::Lr)
            },
        },
    );
    assert!(matches!(busy, Err(ControlError::Busy(_))), "{busy:?}");
    r.hold = false;
    while r.release_one().is_some() {}
    let promotions = r.engine.volume_report(v).unwrap().promotions;
    // A slow job: hot chunks are not promoted while it runs.
    start_job(
        &mut r,
        TIERED,
        MigrationParams {
            to: HDD2,
            rate_bytes_per_s: 1 << 20,
            ..params(Scheme::Dbt)
        },
    )
    .unwrap();
    for round in 0..20u64 {
        for i in 0..16u64 {
            r.read(TIERED, 5 * MIB + ((i * 37 + round * 11) % 250) * 4096, 4096);
        }
        r.tick(100_000_000);
    }
    assert!(!job_phase(&r, TIERED).unwrap().is_over());
    assert_eq!(r.engine.volume_report(v).unwrap().promotions, promotions);
    r.engine.check_invariants().unwrap();
    finish_job(&mut r, TIERED);
    assert_eq!(job_phase(&r, TIERED), Some(MigrationPhase::Done));
    assert!(
        promoted_after_heat(&mut r, 5),
        "tiering resumes after the pivot"
    );
    r.engine.check_invariants().unwrap();
}

/// An LR job drains a tiered volume's fast chunks to its home pool at 1 MiB/s while the VM
/// heats and rewrites chunk 0 (copied and switched to the destination first). True if
/// every read matched and the invariants held: a tier move of the migrating volume
/// (`tier-moves-while-migrating`) promotes chunk 0 off the job's destination copy and frees
/// it, and the pivot switches the chunk back to that stale copy.
fn a_hot_chunk_during_an_lr_job_keeps_its_writes(bug: Option<InjectedBug>) -> bool {
    let mut r = Rig::with_bug(tiered_config(), bug);
    let mut reference = vec![0u8; 16 * MIB as usize];
    for c in 0..CHUNKS {
        write_ref(
            &mut r,
            TIERED,
            &mut reference,
            c * MIB,
            c as u8 + 41,
            MIB as usize,
        );
    }
    r.flush(TIERED);
    start_job(
        &mut r,
        TIERED,
        MigrationParams {
            to: HDD,
            rate_bytes_per_s: 1 << 20,
            ..params(Scheme::Lr)
        },
    )
    .unwrap();
    for round in 0..20u64 {
        if job_phase(&r, TIERED).is_some_and(|p| p.is_over()) {
            break;
        }
        for i in 0..16u64 {
            r.read(TIERED, ((i * 37 + round * 11) % 250) * 4096, 4096);
        }
        write_ref(
            &mut r,
            TIERED,
            &mut reference,
            round * 8192,
            90 + round as u8,
            4096,
        );
        r.tick(100_000_000);
    }
    finish_job(&mut r, TIERED);
    let got = r.read(TIERED, 0, reference.len() as u64);
    got == reference && r.engine.check_invariants().is_ok()
}

#[test]
fn the_tiered_checks_catch_tier_moves_while_migrating() {
    assert!(a_hot_chunk_during_an_lr_job_keeps_its_writes(None));
    assert!(!a_hot_chunk_during_an_lr_job_keeps_its_writes(Some(
        InjectedBug::TierMovesWhileMigrating
    )));
}
