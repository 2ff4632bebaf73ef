//! Engine round trips on in-memory devices: format, I/O, flush, crash, mount.

mod common;

use std::collections::VecDeque;

use bytes::Bytes;
use common::*;
use tiervisor_engine::*;

#[test]
fn fresh_volumes_read_zeros_never_old_device_bytes() {
    let mut r = Rig::new(config(1 << 20));
    assert!(r.read("thin", 0, 8192).iter().all(|&b| b == 0));
    // A partial first write zero-fills the rest of the chunk, whatever the device held.
    r.write("thin", 4096, &pattern(1, 512));
    let got = r.read("thin", 0, 2 * MIB);
    assert!(got[..4096].iter().all(|&b| b == 0));
    assert_eq!(&got[4096..4608], &pattern(1, 512)[..]);
    assert!(got[4608..].iter().all(|&b| b == 0));
}

#[test]
fn unaligned_writes_across_chunks_read_back() {
    let mut r = Rig::new(config(1 << 20));
    for vol in ["thin", "thick"] {
        let data = pattern(7, 3 * MIB as usize + 1234);
        r.write(vol, MIB - 777, &data);
        assert_eq!(r.read(vol, MIB - 777, data.len() as u64), data);
        let small = pattern(9, 100);
        r.write(vol, MIB + 5, &small);
        let mut expect = data.clone();
        expect[(777 + 5) as usize..(777 + 105) as usize].copy_from_slice(&small);
        assert_eq!(r.read(vol, MIB - 777, data.len() as u64), expect);
    }
}

#[test]
fn volumes_never_see_each_other() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, &pattern(3, MIB as usize));
    r.write("thick", 0, &pattern(4, MIB as usize));
    assert_eq!(r.read("thin", 0, MIB), pattern(3, MIB as usize));
    assert_eq!(r.read("thick", 0, MIB), pattern(4, MIB as usize));
    // Trim the thin volume's chunk; the freed chunk goes to the other... a new allocation.
    assert_eq!(r.req("thin", ReqKind::Trim, 0, MIB, None).result, Ok(()));
    r.flush("thin");
    r.tick(2_000_000_000);
    r.write("thin", 5 * MIB + 10, &pattern(5, 10));
    assert!(r.read("thin", 0, MIB).iter().all(|&b| b == 0));
    let got = r.read("thin", 5 * MIB, MIB);
    assert!(
        got[..10].iter().all(|&b| b == 0),
        "a reused chunk leaked old bytes"
    );
}

#[test]
fn trim_and_write_zeroes_read_as_zeros() {
    let mut r = Rig::new(config(1 << 20));
    for vol in ["thin", "thick"] {
        r.write(vol, 0, &pattern(2, 3 * MIB as usize));
        assert_eq!(r.req(vol, ReqKind::Trim, 100, 5000, None).result, Ok(()));
        assert_eq!(
            r.req(vol, ReqKind::WriteZeroes, MIB, MIB, None).result,
            Ok(())
        );
        let mut nh = VmRequest::new(
            0,
            r.engine.volume_id(vol).unwrap(),
            ReqKind::WriteZeroes,
            2 * MIB + 1,
            999,
        );
        nh.no_hole = true;
        let mut out = Outputs::default();
        r.engine.submit(r.now, nh, &mut out);
        r.drain(out);
        let got = r.read(vol, 0, 3 * MIB);
        let mut expect = pattern(2, 3 * MIB as usize);
        expect[100..5100].fill(0);
        expect[MIB as usize..2 * MIB as usize].fill(0);
        expect[2 * MIB as usize + 1..2 * MIB as usize + 1000].fill(0);
        assert_eq!(got, expect, "volume {vol}");
        // Writing over a zeroed range brings data back.
        r.write(vol, 200, &pattern(8, 300));
        expect[200..500].copy_from_slice(&pattern(8, 300));
        assert_eq!(r.read(vol, 0, 3 * MIB), expect);
    }
}

#[test]
fn bad_requests_get_the_right_errors() {
    let mut r = Rig::new(config(1 << 20));
    let size = 40 * MIB;
    assert_eq!(
        r.req("thin", ReqKind::Read, size - 512, 1024, None).result,
        Err(Errno::Inval)
    );
    assert_eq!(
        r.req(
            "thin",
            ReqKind::Write,
            size,
            512,
            Some(Bytes::from(vec![0; 512]))
        )
        .result,
        Err(Errno::NoSpc)
    );
    assert_eq!(
        r.req("thin", ReqKind::Read, 0, 64 * MIB, None).result,
        Err(Errno::Inval)
    );
    assert_eq!(
        r.req(
            "thin",
            ReqKind::Write,
            0,
            512,
            Some(Bytes::from(vec![0; 100]))
        )
        .result,
        Err(Errno::Inval)
    );
    assert_eq!(
        r.req("thin", ReqKind::Read, u64::MAX - 10, 512, None)
            .result,
        Err(Errno::Inval)
    );
    // The engine keeps working.
    r.write("thin", 0, b"still fine");
    assert_eq!(r.read("thin", 0, 10), b"still fine");
}

#[test]
fn flushed_data_and_mappings_survive_a_crash() {
    let mut r = Rig::new(config(1 << 20));
    let mut expect_thin = vec![0u8; 40 * MIB as usize];
    for i in 0..30u64 {
        let off = (i * 1_234_567) % (39 * MIB);
        let d = pattern(i as u8, 5000 + i as usize * 100);
        r.write("thin", off, &d);
        expect_thin[off as usize..off as usize + d.len()].copy_from_slice(&d);
    }
    r.req("thin", ReqKind::Trim, 3 * MIB, 2 * MIB, None);
    expect_thin[3 * MIB as usize..5 * MIB as usize].fill(0);
    r.write("thick", 7, b"thick data");
    r.flush("thin");
    r.flush("thick");
    r.crash_and_mount();
    assert!(r.events.iter().any(|e| matches!(e, EngineEvent::Recovered { volume, records_replayed, .. } if volume == "thin" && *records_replayed > 0)), "{:?}", r.events);
    assert_eq!(r.read("thin", 0, 40 * MIB), expect_thin);
    assert_eq!(r.read("thick", 7, 10), b"thick data");
}

#[test]
fn journal_wraps_through_checkpoints_and_recovers() {
    // A tiny journal: 64 KiB chunks and a 64 KiB journal = 14 ring blocks, so
    // checkpoints happen often.
    let mut cfg = config(64 << 10);
    cfg.chunk_bytes = 64 << 10;
    let mut r = Rig::new(cfg);
    let mut expect = vec![0u8; 40 * MIB as usize];
    for round in 0..40u64 {
        for c in 0..40u64 {
            let off = c * MIB + (round * 4096) % MIB;
            let d = pattern((round + c) as u8, 700);
            r.write("thin", off, &d);
            expect[off as usize..off as usize + 700].copy_from_slice(&d);
            if (round + c) % 3 == 0 {
                r.req("thin", ReqKind::Trim, off + 100, 50, None);
                expect[off as usize + 100..off as usize + 150].fill(0);
            }
        }
        if round % 5 == 4 {
            r.req("thin", ReqKind::Trim, (round % 40) * MIB, MIB, None);
            let o = ((round % 40) * MIB) as usize;
            expect[o..o + MIB as usize].fill(0);
        }
        r.flush("thin");
    }
    let rep = r
        .engine
        .volume_report(r.engine.volume_id("thin").unwrap())
        .unwrap();
    assert!(
        rep.checkpoints >= 2,
        "expected checkpoints, got {}",
        rep.checkpoints
    );
    assert_eq!(r.read("thin", 0, 40 * MIB), expect);
    r.crash_and_mount();
    assert_eq!(r.read("thin", 0, 40 * MIB), expect);
    // And again, after more work on the recovered journal.
    r.write("thin", 11, b"after mount");
    expect[11..22].copy_from_slice(b"after mount");
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(r.read("thin", 0, 40 * MIB), expect);
}

#[test]
fn clean_shutdown_checkpoints_and_mount_replays_nothing() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, b"persist me");
    let mut out = Outputs::default();
    r.engine.begin_shutdown(r.now, &mut out);
    r.drain(out);
    assert_eq!(r.engine.state(), &EngineState::Stopped);
    r.crash_and_mount();
    assert!(r.events.iter().any(|e| matches!(e, EngineEvent::Recovered { volume, records_replayed: 0, .. } if volume == "thin")), "{:?}", r.events);
    assert_eq!(r.read("thin", 0, 10), b"persist me");
}

#[test]
fn mount_refuses_mismatched_configuration() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, b"x");
    let mut cfg = r.cfg.clone();
    // A thin volume grows to a bigger configured size (tests/resize.rs); a thick one
    // cannot.
    cfg.volumes[1].size_bytes = 40 * MIB;
    let (state, writes) = start_on_rig_devices(&r, cfg);
    match state {
        EngineState::Failed(m) => assert!(m.contains("thick volume cannot grow"), "{m}"),
        s => panic!("mount should fail, state {s:?}"),
    }
    assert_eq!(writes, 0, "a refused mount wrote to a pool");
}

/// Start a new engine on the rig's devices, serving its reads from them (writes are
/// counted, not done). Returns the state it ends in and the writes it issued.
fn start_on_rig_devices(r: &Rig, cfg: EngineConfig) -> (EngineState, usize) {
    let mut e = Engine::new(cfg).unwrap();
    let mut out = Outputs::default();
    e.start(0, StartMode::Auto, &mut out);
    let mut writes = 0;
    let mut q: VecDeque<DeviceOp> = out.ops.drain(..).collect();
    while let Some(op) = q.pop_front() {
        let dev = &r.devs[op.pool.0 as usize];
        writes += usize::from(op.kind != DevKind::Read && op.kind != DevKind::Flush);
        let data = (op.kind == DevKind::Read).then(|| {
            Bytes::copy_from_slice(
                &dev[op.offset_bytes as usize..(op.offset_bytes + op.len_bytes) as usize],
            )
        });
        let mut o2 = Outputs::default();
        e.device_done(
            0,
            DeviceCompletion {
                id: op.id,
                result: Ok(()),
                data,
            },
            &mut o2,
        );
        q.extend(o2.ops.drain(..));
    }
    (e.state().clone(), writes)
}

#[test]
fn mount_refuses_pools_of_another_format_version_and_writes_nothing() {
    use tiervisor_engine::layout::{BLOCK_BYTES, FORMAT_VERSION};
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, b"precious");
    r.flush("thin");
    // Every superblock copy, as an older release would have written it: version 1.
    for dev in &mut r.devs {
        let mut patched = 0;
        for slot in [0usize, BLOCK_BYTES as usize] {
            let b = &mut dev[slot..slot + BLOCK_BYTES as usize];
            if b[8..12] != FORMAT_VERSION.to_le_bytes() {
                continue; // no copy in this slot
            }
            patched += 1;
            b[8..12].copy_from_slice(&1u32.to_le_bytes());
            let crc = crc32c::crc32c(&b[..BLOCK_BYTES as usize - 4]);
            let n = b.len();
            b[n - 4..].copy_from_slice(&crc.to_le_bytes());
        }
        assert!(patched > 0, "a pool without a superblock");
    }
    let (state, writes) = start_on_rig_devices(&r, r.cfg.clone());
    match state {
        EngineState::Failed(m) => {
            assert!(m.contains("another format version"), "{m}");
            assert!(m.contains("version 1"), "{m}");
        }
        s => panic!("mount should refuse, state {s:?}"),
    }
    assert_eq!(writes, 0, "a refused mount wrote to a pool");
}

/// Hold device operations until the next journal block write; return it unexecuted.
fn hold_until_journal_write(r: &mut Rig) -> DeviceOp {
    loop {
        let front = r.held.front().expect("a journal write was issued");
        if front.kind == DevKind::Write && front.fua && front.class == IoClass::Metadata {
            return r.held.pop_front().expect("front exists");
        }
        r.release_one();
    }
}

/// Put sectors `keep` of a write on its device, as a torn write would.
fn land_sectors(r: &mut Rig, op: &DeviceOp, keep: std::ops::Range<usize>) {
    let data = op.payload.as_ref().expect("a write carries data");
    let dev = &mut r.devs[op.pool.0 as usize];
    for s in keep {
        let o = op.offset_bytes as usize + s * 512;
        dev[o..o + 512].copy_from_slice(&data[s * 512..(s + 1) * 512]);
    }
}

#[test]
fn a_journal_block_one_mount_dropped_stays_dead() {
    // Power fails while a journal block is written: its first and last sectors land,
    // the zero-filled middle does not, so the mount ends replay before it. After that
    // mount, a torn write at the same ring slot lands only its (also zero) middle: the
    // slot now holds the old block, whole. The next mount must not replay it, or the
    // dropped mapping comes back pointing at space the first mount freed and reused.
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, &pattern(1, 4096));
    r.flush("thin");

    r.write("thin", 4 * MIB, &pattern(2, 4096));
    r.hold = true;
    r.submit("thin", ReqKind::Flush, 0, None, 0);
    let dropped = hold_until_journal_write(&mut r);
    land_sectors(&mut r, &dropped, 0..1);
    land_sectors(&mut r, &dropped, 7..8);
    r.crash_and_mount();
    assert!(
        r.read("thin", 4 * MIB, 4096) == vec![0u8; 4096],
        "torn block replayed"
    );

    r.write("thin", 8 * MIB, &pattern(3, 4096));
    r.hold = true;
    r.submit("thin", ReqKind::Flush, 0, None, 0);
    let torn = hold_until_journal_write(&mut r);
    assert_eq!(torn.offset_bytes, dropped.offset_bytes, "same ring slot");
    land_sectors(&mut r, &torn, 1..7);
    r.crash_and_mount();
    assert!(
        r.read("thin", 0, 4096) == pattern(1, 4096),
        "flushed data lost"
    );
    let zeros = vec![0u8; 4096];
    assert!(
        r.read("thin", 4 * MIB, 4096) == zeros,
        "a mapping the first mount dropped came back"
    );
    assert!(
        r.read("thin", 8 * MIB, 4096) == zeros,
        "an unflushed mapping appeared"
    );
}

/// A slice's superblock records its shard and the shard count (issue 18): a system is
/// never mounted with another count, whichever way it changes, and the refusal writes
/// nothing and names the pool and both counts.
#[test]
fn mount_refuses_another_shard_count_and_writes_nothing() {
    use tiervisor_engine::shard::ShardPlan;
    // Formatted unsharded, started as shard 0 of 2 (whose slices begin at offset 0).
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, b"precious");
    r.flush("thin");
    let two = ShardPlan::new(&r.cfg, 2).unwrap();
    let (state, writes) = start_on_rig_devices(&r, two.shard_config(&r.cfg, 0));
    match state {
        EngineState::Failed(m) => assert!(
            m.contains("pool ssd") && m.contains("formatted for 1 shard(s), started with 2"),
            "{m}"
        ),
        s => panic!("mount should refuse, state {s:?}"),
    }
    assert_eq!(writes, 0, "a refused mount wrote to a pool");

    // Formatted as shard 0 of 2, started unsharded.
    let base = config(1 << 20);
    let shard0 = ShardPlan::new(&base, 2).unwrap().shard_config(&base, 0);
    let r = Rig::new(shard0.clone());
    let (state, writes) = start_on_rig_devices(&r, base.clone());
    match state {
        EngineState::Failed(m) => assert!(
            m.contains("pool ssd") && m.contains("formatted for 2 shard(s), started with 1"),
            "{m}"
        ),
        s => panic!("mount should refuse, state {s:?}"),
    }
    assert_eq!(writes, 0, "a refused mount wrote to a pool");
    // Same count, another index: the slice is someone else's.
    let mut other = shard0.clone();
    other.shard.index = 1;
    let (state, writes) = start_on_rig_devices(&r, other);
    match state {
        EngineState::Failed(m) => assert!(m.contains("shard 0 of 2, not shard 1"), "{m}"),
        s => panic!("mount should refuse, state {s:?}"),
    }
    assert_eq!(writes, 0);
    // And the right shard mounts.
    let (state, _) = start_on_rig_devices(&r, shard0);
    assert_eq!(state, EngineState::Ready);
}
