//! Running out of space: a write or commit that fails for space reports ENOSPC (not EIO),
//! is not done, and the volume works again once space returns.

mod common;

use bytes::Bytes;
use common::*;
use tiervisor_engine::*;

#[test]
fn writes_and_commits_that_fail_for_space_report_enospc_and_recover() {
    let mut r = Rig::new(config(1 << 20));
    let (a, c, d) = (pattern(1, 4096), pattern(2, 4096), pattern(3, 8192));
    r.write("thin", 0, &a);
    r.flush("thin");
    // Allocated, its map record not yet committed.
    r.write("thin", 4 * MIB, &c);
    r.fail_writes = Some(Errno::NoSpc);
    let w = r.req(
        "thin",
        ReqKind::Write,
        8 * MIB,
        d.len() as u64,
        Some(Bytes::copy_from_slice(&d)),
    );
    assert_eq!(w.result, Err(Errno::NoSpc), "a new chunk without space");
    let f = r.req("thin", ReqKind::Flush, 0, 0, None);
    assert_eq!(f.result, Err(Errno::NoSpc), "a commit without space");
    // The write that failed is not done: it reads as it was (never written: zeros).
    assert_eq!(r.read("thin", 8 * MIB, d.len() as u64), vec![0; d.len()]);
    // A device failure outranks lack of space (Errno::worse).
    r.fail_writes = Some(Errno::Io);
    assert_eq!(
        r.req("thin", ReqKind::Flush, 0, 0, None).result,
        Err(Errno::Io)
    );
    // Space returns: the commit is retried and succeeds, new writes succeed.
    r.fail_writes = None;
    r.flush("thin");
    r.write("thin", 8 * MIB, &d);
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(r.read("thin", 0, 4096), a);
    assert_eq!(r.read("thin", 4 * MIB, 4096), c);
    assert_eq!(r.read("thin", 8 * MIB, d.len() as u64), d);
}

#[test]
fn worse_prefers_a_device_error_to_enospc() {
    use Errno::*;
    assert_eq!(Errno::worse(None, None), None);
    assert_eq!(Errno::worse(Some(NoSpc), None), Some(NoSpc));
    assert_eq!(Errno::worse(None, Some(NoSpc)), Some(NoSpc));
    assert_eq!(Errno::worse(Some(NoSpc), Some(Io)), Some(Io));
    assert_eq!(Errno::worse(Some(Io), Some(NoSpc)), Some(Io));
}

/// A lasting ENOSPC under the log: appends that failed for space wait for it, but the
/// writes behind them must not wait without end. Before the fix, once the appends in
/// flight had parked, later write pieces queued for buffer room that never came: their
/// requests never completed. Now they go home and end (here in ENOSPC); the writes that
/// were acknowledged from RAM land once space returns.
#[test]
fn writes_behind_appends_waiting_for_space_end_instead_of_waiting_forever() {
    let cfg = log_config();
    let mut r = Rig::new(cfg);
    r.fail_writes = Some(Errno::NoSpc);
    let mut acked = Vec::new();
    let mut nospc = 0;
    for i in 0..96u64 {
        // Scattered 4 KiB writes (logged, not a sequential run).
        let off = (i * 37 % 96) * 64 * 1024;
        let d = pattern(i as u8, 4096);
        let id = r.submit("thin", ReqKind::Write, off, Some(&d), 4096);
        let c = r
            .take_done(id)
            .unwrap_or_else(|| panic!("write {i} still waits while space never returns"));
        match c.result {
            Ok(()) => acked.push((off, d)),
            Err(Errno::NoSpc) => nospc += 1,
            Err(e) => panic!("write {i}: {e:?}, not ENOSPC"),
        }
    }
    assert!(
        acked.len() >= 16,
        "{} writes logged before the log filled",
        acked.len()
    );
    assert!(nospc > 0, "no write ended in ENOSPC");
    assert_eq!(
        r.req("thin", ReqKind::Flush, 0, 0, None).result,
        Err(Errno::NoSpc)
    );
    // Space returns: the parked appends land at the next retry, FLUSH succeeds, and
    // every acknowledged write survives a crash.
    r.fail_writes = None;
    r.tick(2 * r.cfg.commit_interval_ns);
    r.flush("thin");
    r.crash_and_mount();
    for (off, d) in &acked {
        assert_eq!(&r.read("thin", *off, 4096), d, "write at {off}");
    }
    r.engine
        .check_invariants()
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The metadata pool has no room for a checkpoint a volume must write (here another
/// volume's chains, whose header writes failed, stay claimed until none fits): the round
/// fails at once with ENOSPC and counts as a failed round, so the volume backs off like
/// after any other. Before the fix it did not count, so a migration's pre-sync and then
/// its commit step started the round again at every tick, each time encoding the whole
/// map and warning: 3003 attempts in 3 virtual seconds of 1 ms ticks. Now the commit timer
/// retries once a commit interval (the migration's pre-sync waits for it), the warning
/// comes once per spell, FLUSH still fails while there is no room, and once there is,
/// the checkpoints land and the migration ends.
#[test]
fn a_checkpoint_without_room_backs_off_instead_of_retrying_at_every_event() {
    use tiervisor_engine::jobs::migrate::{MigrationParams, MigrationPhase};
    const NO_ROOM: &str = "no room on the metadata pool for a checkpoint";
    let no_room_for = |e: &EngineEvent, vol: &str| {
        matches!(e, EngineEvent::Warning { message }
            if message.contains(NO_ROOM) && message.starts_with(&format!("volume {vol}:")))
    };

    // A small ring (checkpoints are soon wanted); on the metadata pool thick data and a
    // thin volume "c" that fill its data room, a small volume "b", and a second HDD pool
    // for the thin volume to migrate to.
    let mut cfg = config(64 << 10);
    cfg.chunk_bytes = 64 << 10;
    cfg.volumes[1].size_bytes = 40 * MIB;
    let mut b = cfg.volumes[0].clone();
    b.name = "b".into();
    b.size_bytes = MIB;
    let mut c = cfg.volumes[0].clone();
    c.name = "c".into();
    c.size_bytes = 30 * MIB;
    c.home_pool = PoolId(0);
    cfg.volumes.extend([b, c]);
    let mut hdd2 = cfg.pools[1].clone();
    hdd2.name = "hdd2".into();
    cfg.pools.push(hdd2);
    let mut r = Rig::new(cfg);
    let cb = r.cfg.chunk_bytes;
    let mut c_chunks = 0;
    for i in 0..30 * MIB / cb {
        let d = Bytes::from(pattern(i as u8, 4096));
        if r.req("c", ReqKind::Write, i * cb, 4096, Some(d))
            .result
            .is_ok()
        {
            c_chunks += 1;
        }
    }
    r.flush("c");
    assert!(c_chunks < 30 * MIB / cb, "c did not fill the data room");

    // The rest goes to volumes a mount adds: each takes a journal chunk from what is
    // free, the checkpoint reserve included, as volumes created by builds before the
    // reserve was checked did (the mount warns). Repeatedly failing header writes filled
    // it before, but they no longer keep more than one chain each (the test below).
    let free = free_chunks(&r)[0];
    for k in 0..free {
        let mut d = r.cfg.volumes[2].clone();
        d.name = format!("d{k}");
        r.cfg.volumes.push(d);
    }
    r.crash_and_mount();
    assert_eq!(free_chunks(&r)[0], 0, "{:?}", r.events);

    // The thin volume commits (its records fit) until it wants a checkpoint, which it
    // tries at once after that commit: there is no room for it.
    let mut rounds = 0;
    while !r.events.iter().any(|e| no_room_for(e, "thin")) {
        rounds += 1;
        assert!(rounds < 100, "the thin volume never wanted a checkpoint");
        r.write("thin", rounds * MIB, &pattern(rounds as u8, 4096));
        r.flush("thin");
    }
    // A FLUSH now fails: nothing is acknowledged that is not durable.
    assert_eq!(
        r.req("thin", ReqKind::Flush, 0, 0, None).result,
        Err(Errno::NoSpc)
    );

    // Migrate it: the copy needs no metadata room, the pre-sync and pivot commits do.
    let v = r.engine.volume_id("thin").unwrap();
    let params = MigrationParams {
        rate_bytes_per_s: 1 << 40,
        ..MigrationParams::new(PoolId(2))
    };
    let mut out = Outputs::default();
    r.engine
        .start_migration(r.now, v, params, &mut out)
        .unwrap();
    r.drain(out);
    r.events.clear();
    for _ in 0..3000 {
        r.tick(1_000_000);
    }
    let warnings = r.events.iter().filter(|e| no_room_for(e, "thin")).count();
    let failed_rounds = r
        .events
        .iter()
        .filter(|e| matches!(e, EngineEvent::CommitFailed { volume, .. } if volume == "thin"))
        .count();
    let attempts = warnings + failed_rounds;
    // One round per commit interval (1 s) over 3 s, and maybe one for the migration.
    assert!(
        attempts <= 5,
        "{attempts} checkpoint attempts in 3 virtual seconds ({warnings} warnings)"
    );
    assert!(
        warnings == 0,
        "{warnings} more no-room warnings in one spell"
    );
    assert_eq!(
        r.req("thin", ReqKind::Flush, 0, 0, None).result,
        Err(Errno::NoSpc)
    );

    // Room returns (c gives chunks back): the timer's retries checkpoint, the migration
    // ends, and every flushed write survives a crash.
    r.req("c", ReqKind::Trim, 0, 4 * MIB, None);
    r.flush("c");
    for _ in 0..1000 {
        if r.engine.migration_status(v).unwrap().phase == MigrationPhase::Done {
            break;
        }
        r.tick(10_000_000);
    }
    assert_eq!(
        r.engine.migration_status(v).unwrap().phase,
        MigrationPhase::Done
    );
    r.flush("thin");
    r.flush("b");
    r.crash_and_mount();
    for i in 1..=rounds {
        assert_eq!(r.read("thin", i * MIB, 4096), pattern(i as u8, 4096));
    }
    r.engine
        .check_invariants()
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Issue 15: a mount whose metadata writes fail for space (the filesystem under the
/// metadata pool is full) waits for space, serving nothing, and mounts once it returns.
/// Before, each write was retried three times at once and the mount failed ("a metadata
/// write failed"), so a full filesystem kept a server from coming up at all.
#[test]
fn a_mount_that_finds_no_space_waits_for_it_and_then_mounts() {
    let mut cfg = config(1 << 20);
    cfg.commit_interval_ns = 10_000_000;
    let mut r = Rig::new(cfg);
    let a = pattern(4, 8192);
    r.write("thin", 3 * MIB, &a);
    r.flush("thin");
    // Killed; the metadata pool's filesystem is full when the engine comes back.
    r.engine = Engine::new(r.cfg.clone()).unwrap();
    r.events.clear();
    r.fail_write_if = Some(Box::new(|op: &DeviceOp| {
        (op.pool == PoolId(0)).then_some(Errno::NoSpc)
    }));
    let mut out = Outputs::default();
    r.engine.start(r.now, StartMode::Auto, &mut out);
    r.drain(out);
    let mut waits = Vec::new();
    for _ in 0..12 {
        let t = r
            .engine
            .next_deadline()
            .expect("the mount retries from its timer");
        waits.push(t.saturating_sub(r.now));
        r.tick(t.saturating_sub(r.now));
        assert_eq!(r.engine.state(), &EngineState::Starting, "{:?}", r.events);
    }
    // Backing off: the waits double up to a second, not a retry at every event.
    let interval = r.cfg.commit_interval_ns;
    assert!(waits[1] >= 2 * interval - 10_000, "{waits:?}");
    assert!(waits.iter().all(|&w| w <= 1_000_000_000), "{waits:?}");
    assert!(waits[11] >= 500_000_000, "{waits:?}");
    // Nothing is served meanwhile.
    let v = r.engine.volume_id("thin").unwrap();
    let mut out = Outputs::default();
    r.engine.submit(
        r.now,
        VmRequest::new(99, v, ReqKind::Read, 0, 4096),
        &mut out,
    );
    assert_eq!(out.completions[0].result, Err(Errno::Shutdown));
    let warned = |r: &Rig, what: &str| {
        r.events
            .iter()
            .filter(|e| matches!(e, EngineEvent::Warning { message } if message.contains(what)))
            .count()
    };
    // Said once, not at every attempt.
    assert_eq!(
        warned(&r, "mount: no space left on pool ssd"),
        1,
        "{:?}",
        r.events
    );
    assert!(
        !r.events
            .iter()
            .any(|e| matches!(e, EngineEvent::Failed { .. }))
    );
    // Space returns: the mount goes on at its next attempt and finds every flushed write.
    r.fail_write_if = None;
    let mut n = 0;
    while r.engine.state() != &EngineState::Ready {
        let t = r
            .engine
            .next_deadline()
            .expect("a mount waiting for space has a timer");
        r.tick(t.saturating_sub(r.now));
        n += 1;
        assert!(n < 10, "{:?}", r.events);
    }
    assert_eq!(
        warned(&r, "mount: there is room again"),
        1,
        "{:?}",
        r.events
    );
    assert_eq!(r.read("thin", 3 * MIB, a.len() as u64), a);
    r.write("thin", 0, &a);
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(r.read("thin", 0, a.len() as u64), a);
}

/// A format whose metadata writes find no space waits the same way.
#[test]
fn a_format_that_finds_no_space_waits_for_it() {
    let mut cfg = config(1 << 20);
    // An hour between commits (as serve_space's configurations have): the start must
    // still try again within a second, not wait an interval.
    cfg.commit_interval_ns = 3_600_000_000_000;
    let mut r = Rig::new(cfg.clone());
    r.devs = cfg
        .pools
        .iter()
        .map(|p| vec![0xEE; p.capacity_bytes as usize])
        .collect();
    r.engine = Engine::new(cfg).unwrap();
    r.events.clear();
    r.fail_write_if = Some(Box::new(|op: &DeviceOp| {
        (op.pool == PoolId(0) && op.offset_bytes < MIB).then_some(Errno::NoSpc)
    }));
    let mut out = Outputs::default();
    r.engine.start(r.now, StartMode::Auto, &mut out);
    r.drain(out);
    for _ in 0..6 {
        let t = r
            .engine
            .next_deadline()
            .expect("the format retries from its timer");
        assert!(t - r.now <= 1_000_000_000, "next try in {} ns", t - r.now);
        r.tick(t.saturating_sub(r.now));
        assert_eq!(r.engine.state(), &EngineState::Starting, "{:?}", r.events);
    }
    // Nothing is formatted yet, so nothing says so (`serve` printed "formatted" before
    // its "no space" warning).
    let formatted = |ev: &[EngineEvent]| {
        (ev.iter())
            .filter(|e| matches!(e, EngineEvent::Formatted { .. }))
            .count()
    };
    assert_eq!(formatted(&r.events), 0, "{:?}", r.events);
    r.fail_write_if = None;
    let mut n = 0;
    while r.engine.state() != &EngineState::Ready {
        let t = r
            .engine
            .next_deadline()
            .expect("a format waiting for space has a timer");
        r.tick(t.saturating_sub(r.now));
        n += 1;
        assert!(n < 10, "{:?}", r.events);
    }
    assert!(r.events.iter().any(
        |e| matches!(e, EngineEvent::Warning { message } if message.starts_with("format: no space"))
    ));
    assert_eq!(formatted(&r.events), 1, "{:?}", r.events);
    let a = pattern(5, 4096);
    r.write("thin", 0, &a);
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(r.read("thin", 0, 4096), a);
}

/// Issue 15: a volume whose checkpoint header writes keep failing kept every chain it
/// wrote claimed (the slot may name it if the write landed), one more per failed round,
/// until the metadata pool's reserve (which holds one such chain) was used up. A round
/// now first makes the slot name the durable checkpoint again (a copy of the header as
/// last written) and frees the earlier chains: at most one is claimed at a time.
#[test]
fn failed_checkpoint_header_writes_keep_at_most_one_orphan_chain() {
    use std::cell::Cell;
    use std::rc::Rc;
    use tiervisor_engine::layout::JournalHeader;
    let mut cfg = config(64 << 10);
    cfg.chunk_bytes = 64 << 10;
    let mut r = Rig::new(cfg);
    let cb = r.cfg.chunk_bytes;
    // The thin volume's journal region: where its FLUSH writes a record block.
    r.write("thin", 0, &pattern(1, 4096));
    r.hold = true;
    let f = r.submit("thin", ReqKind::Flush, 0, None, 0);
    let mut ring_write = None;
    while let Some(op) = r.release_one() {
        if op.pool == PoolId(0) && op.kind == DevKind::Write {
            ring_write = Some(op.offset_bytes);
        }
    }
    r.hold = false;
    assert_eq!(r.take_done(f).unwrap().result, Ok(()));
    let ring = ring_write.expect("the flush wrote a record block on the metadata pool");
    let region = ring - (ring - MIB) % cb;
    // New headers fail (the generation the first failed one had, or later); a copy of
    // the durable header (one generation older) goes through.
    let on = Rc::new(Cell::new(true));
    let first_failed = Rc::new(Cell::new(None::<u64>));
    let (on2, first2) = (on.clone(), first_failed.clone());
    r.fail_write_if = Some(Box::new(move |op: &DeviceOp| {
        let slot = op.pool == PoolId(0)
            && (op.offset_bytes == region || op.offset_bytes == region + 4096)
            && op.len_bytes == 4096;
        let h = op.payload.as_deref().and_then(JournalHeader::decode)?;
        if !on2.get() || !slot {
            return None;
        }
        let g = *first2.get().get_or_insert(h.generation);
        first2.set(Some(g));
        (h.generation >= g).then_some(Errno::NoSpc)
    }));
    let orphans = |r: &Rig| {
        r.engine.chunk_owners()[0]
            .get("orphan checkpoint")
            .copied()
            .unwrap_or(0)
    };
    let (mut most, mut failed) = (0, 0);
    for i in 1..=40u64 {
        r.write("thin", (i % 40) * MIB, &pattern(i as u8, 4096));
        if r.req("thin", ReqKind::Flush, 0, 0, None).result.is_err() {
            failed += 1;
        }
        most = most.max(orphans(&r));
        r.engine.check_invariants().unwrap();
    }
    assert!(failed >= 20, "only {failed} rounds failed");
    assert!(first_failed.get().is_some(), "no header write failed");
    // One chain of a 40 MiB volume at 64 KiB chunks is one chunk. Before: one per failed
    // round (34 here).
    assert!(most <= 1, "{most} orphan checkpoint chunks claimed at once");
    // A crash now mounts on the durable checkpoint (the slot names it again).
    on.set(false);
    r.crash_and_mount();
    r.engine.check_invariants().unwrap();
    assert_eq!(orphans(&r), 0);
    // Headers fail again for a while, then land: the next checkpoint frees the orphan.
    on.set(true);
    first_failed.set(None);
    for i in 41..=50u64 {
        r.write("thin", (i % 40) * MIB, &pattern(i as u8, 4096));
        let _ = r.req("thin", ReqKind::Flush, 0, 0, None);
        assert!(orphans(&r) <= 1);
    }
    on.set(false);
    r.write("thin", 11 * MIB, &pattern(51, 4096));
    r.flush("thin");
    r.tick(2_000_000_000);
    r.flush("thin");
    assert_eq!(orphans(&r), 0);
    r.engine.check_invariants().unwrap();
    r.crash_and_mount();
    for i in 41..=50u64 {
        assert_eq!(r.read("thin", (i % 40) * MIB, 4096), pattern(i as u8, 4096));
    }
}

/// Issue 15: a volume that backs off (its last commit failed for space) with nothing to
/// commit but a wanted checkpoint had no commit timer (the timer looked only at pending
/// records, FLUSHes and frees), so nothing retried the checkpoint: a migration's
/// pre-sync, which waits for the back-off, stalled until a guest wrote. Once space
/// returns, the pre-sync must end within one commit interval, without a guest write.
#[test]
fn a_presync_behind_a_wanted_checkpoint_ends_once_space_returns() {
    use std::cell::Cell;
    use std::rc::Rc;
    use tiervisor_engine::jobs::migrate::{MigrationParams, MigrationPhase};
    let mut cfg = config(64 << 10);
    cfg.chunk_bytes = 64 << 10;
    let mut hdd2 = cfg.pools[1].clone();
    hdd2.name = "hdd2".into();
    cfg.pools.push(hdd2);
    let mut r = Rig::new(cfg);
    let cb = r.cfg.chunk_bytes;
    let interval = r.cfg.commit_interval_ns;
    // The thin volume's journal region: where its FLUSH writes a record block.
    r.write("thin", 0, &pattern(1, 4096));
    r.hold = true;
    let f = r.submit("thin", ReqKind::Flush, 0, None, 0);
    let mut ring_write = None;
    while let Some(op) = r.release_one() {
        if op.pool == PoolId(0) && op.kind == DevKind::Write {
            ring_write = Some(op.offset_bytes);
        }
    }
    r.hold = false;
    assert_eq!(r.take_done(f).unwrap().result, Ok(()));
    let ring = ring_write.expect("the flush wrote a record block on the metadata pool");
    let region = ring - (ring - MIB) % cb;
    // No room for checkpoint chains (written outside the journal region); the ring's
    // record blocks still land.
    let full = Rc::new(Cell::new(true));
    let on = full.clone();
    r.fail_write_if = Some(Box::new(move |op: &DeviceOp| {
        let chain = op.pool == PoolId(0) && !(region..region + cb).contains(&op.offset_bytes);
        (on.get() && chain).then_some(Errno::NoSpc)
    }));
    // FLUSHes succeed (record blocks) until the ring is half full; the checkpoint round
    // started right after that one, with nothing else to commit, fails.
    let failed = |r: &Rig| {
        r.events
            .iter()
            .any(|e| matches!(e, EngineEvent::CommitFailed { volume, .. } if volume == "thin"))
    };
    let mut i = 1;
    while !failed(&r) {
        i += 1;
        assert!(i < 100, "no checkpoint was wanted");
        r.write("thin", i * MIB, &pattern(i as u8, 4096));
        r.flush("thin");
    }
    // Migrate the volume while it backs off: the copy goes on, the pre-sync waits.
    let v = r.engine.volume_id("thin").unwrap();
    let params = MigrationParams {
        rate_bytes_per_s: 1 << 40,
        ..MigrationParams::new(PoolId(2))
    };
    let mut out = Outputs::default();
    r.engine
        .start_migration(r.now, v, params, &mut out)
        .unwrap();
    r.drain(out);
    for _ in 0..200 {
        r.tick(1_000_000);
    }
    let phase = |r: &Rig| r.engine.migration_status(v).unwrap().phase;
    assert!(
        matches!(phase(&r), MigrationPhase::Copying { .. }),
        "{:?}",
        phase(&r)
    );
    // Space returns; no guest request from here on.
    full.set(false);
    let back = r.now;
    while matches!(phase(&r), MigrationPhase::Copying { .. }) {
        assert!(
            r.now < back + interval + 50_000_000,
            "the pre-sync did not end within a commit interval of space returning"
        );
        r.tick(1_000_000);
    }
    for _ in 0..2000 {
        if phase(&r) == MigrationPhase::Done {
            break;
        }
        r.tick(1_000_000);
    }
    assert_eq!(phase(&r), MigrationPhase::Done);
    r.crash_and_mount();
    for k in 2..=i {
        assert_eq!(r.read("thin", k * MIB, 4096), pattern(k as u8, 4096));
    }
}

/// The same with the migration started first: its job record is committed, the copy
/// runs, and then a checkpoint round with nothing else to commit fails for space. The
/// pre-sync then waits for the volume's back-off with no record pending.
#[test]
fn a_presync_reached_while_only_a_checkpoint_is_wanted_ends_once_space_returns() {
    use std::cell::Cell;
    use std::rc::Rc;
    use tiervisor_engine::jobs::migrate::{MigrationParams, MigrationPhase, Scheme, SchemeChoice};
    let mut cfg = config(64 << 10);
    cfg.chunk_bytes = 64 << 10;
    let mut hdd2 = cfg.pools[1].clone();
    hdd2.name = "hdd2".into();
    cfg.pools.push(hdd2);
    let mut r = Rig::new(cfg);
    let cb = r.cfg.chunk_bytes;
    let interval = r.cfg.commit_interval_ns;
    r.write("thin", 0, &pattern(1, 4096));
    r.hold = true;
    let f = r.submit("thin", ReqKind::Flush, 0, None, 0);
    let mut ring_write = None;
    while let Some(op) = r.release_one() {
        if op.pool == PoolId(0) && op.kind == DevKind::Write {
            ring_write = Some(op.offset_bytes);
        }
    }
    r.hold = false;
    assert_eq!(r.take_done(f).unwrap().result, Ok(()));
    let ring = ring_write.expect("the flush wrote a record block on the metadata pool");
    let region = ring - (ring - MIB) % cb;
    for k in 2..12u64 {
        r.write("thin", k * MIB, &pattern(k as u8, 4096));
    }
    r.flush("thin");
    // A slow copy: about 5 s for its ten chunks.
    let v = r.engine.volume_id("thin").unwrap();
    // DBT: the copy itself adds no journal records.
    let params = MigrationParams {
        scheme: SchemeChoice::Fixed(Scheme::Dbt),
        rate_bytes_per_s: 128 << 10,
        ..MigrationParams::new(PoolId(2))
    };
    let mut out = Outputs::default();
    r.engine
        .start_migration(r.now, v, params, &mut out)
        .unwrap();
    r.drain(out);
    let full = Rc::new(Cell::new(true));
    let on = full.clone();
    r.fail_write_if = Some(Box::new(move |op: &DeviceOp| {
        let chain = op.pool == PoolId(0) && !(region..region + cb).contains(&op.offset_bytes);
        (on.get() && chain).then_some(Errno::NoSpc)
    }));
    let failed = |r: &Rig| {
        r.events
            .iter()
            .any(|e| matches!(e, EngineEvent::CommitFailed { volume, .. } if volume == "thin"))
    };
    let mut i = 1;
    while !failed(&r) {
        i += 1;
        assert!(i < 100, "no checkpoint was wanted");
        r.write("thin", (i % 40) * MIB, &pattern(i as u8, 4096));
        r.flush("thin");
    }
    let phase = |r: &Rig| r.engine.migration_status(v).unwrap().phase;
    // The copy (two passes, the second over what the FLUSHes above dirtied) ends; the
    // pre-sync waits for the volume's back-off.
    for _ in 0..12_000 {
        r.tick(1_000_000);
    }
    let st = r.engine.migration_status(v).unwrap();
    assert!(
        st.stats.image_copied_ns.is_some() && st.stats.dirty_bytes == 0,
        "{st:?}"
    );
    assert!(
        matches!(phase(&r), MigrationPhase::Copying { .. }),
        "{:?}",
        phase(&r)
    );
    full.set(false);
    let back = r.now;
    while matches!(phase(&r), MigrationPhase::Copying { .. }) {
        assert!(
            r.now < back + interval + 50_000_000,
            "the pre-sync did not end within a commit interval of space returning"
        );
        r.tick(1_000_000);
    }
    for _ in 0..2000 {
        if phase(&r) == MigrationPhase::Done {
            break;
        }
        r.tick(1_000_000);
    }
    assert_eq!(phase(&r), MigrationPhase::Done);
}
