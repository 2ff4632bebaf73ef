//! Engine round trips on in-memory devices: format, I/O, flush, crash, mount.

use std::collections::VecDeque;

use bytes::Bytes;
use tiervisor_engine::*;

const MIB: u64 = 1 << 20;

struct Rig {
    engine: Engine,
    cfg: EngineConfig,
    devs: Vec<Vec<u8>>,
    now: u64,
    done: Vec<VmCompletion>,
    events: Vec<EngineEvent>,
    next_id: u64,
}

fn config(journal_bytes: u64) -> EngineConfig {
    EngineConfig {
        system_uuid: [9; 16],
        journal_bytes,
        pools: vec![
            PoolConfig {
                name: "ssd".into(),
                medium: Medium::Ssd,
                capacity_bytes: 64 * MIB,
                queue_depth: 8,
                scheduler: SchedulerKind::Fifo,
            },
            PoolConfig {
                name: "hdd".into(),
                medium: Medium::Hdd,
                capacity_bytes: 96 * MIB,
                queue_depth: 2,
                scheduler: SchedulerKind::Fifo,
            },
        ],
        volumes: vec![
            VolumeConfig {
                name: "thin".into(),
                size_bytes: 40 * MIB,
                home_pool: PoolId(1),
                fast_pool: None,
                provisioning: Provisioning::Thin,
                placement: Placement::Pinned,
            },
            VolumeConfig {
                name: "thick".into(),
                size_bytes: 20 * MIB,
                home_pool: PoolId(0),
                fast_pool: None,
                provisioning: Provisioning::Thick,
                placement: Placement::Pinned,
            },
        ],
        ..EngineConfig::default()
    }
}

impl Rig {
    fn new(cfg: EngineConfig) -> Rig {
        let devs = cfg
            .pools
            .iter()
            .map(|p| vec![0xEE; p.capacity_bytes as usize])
            .collect();
        let mut r = Rig {
            engine: Engine::new(cfg.clone()).unwrap(),
            cfg,
            devs,
            now: 0,
            done: vec![],
            events: vec![],
            next_id: 1,
        };
        r.start();
        r
    }

    fn start(&mut self) {
        let mut out = Outputs::default();
        self.engine.start(self.now, StartMode::Auto, &mut out);
        self.drain(out);
        assert_eq!(
            self.engine.state(),
            &EngineState::Ready,
            "events: {:?}",
            self.events
        );
    }

    /// Lose the engine (as in kill -9); devices keep what was written.
    fn crash_and_mount(&mut self) {
        self.engine = Engine::new(self.cfg.clone()).unwrap();
        self.events.clear();
        self.start();
    }

    fn drain(&mut self, mut out: Outputs) {
        let mut q: VecDeque<DeviceOp> = VecDeque::new();
        loop {
            q.extend(out.ops.drain(..));
            self.done.append(&mut out.completions);
            self.events.append(&mut out.events);
            let Some(op) = q.pop_front() else { break };
            self.now += 1000;
            let dev = &mut self.devs[op.pool.0 as usize];
            let (o, l) = (op.offset_bytes as usize, op.len_bytes as usize);
            let mut data = None;
            match op.kind {
                DevKind::Read => data = Some(Bytes::copy_from_slice(&dev[o..o + l])),
                DevKind::Write => dev[o..o + l].copy_from_slice(op.payload.as_ref().unwrap()),
                DevKind::WriteZeroes | DevKind::Discard => dev[o..o + l].fill(0),
                DevKind::Flush => {}
            }
            self.engine.device_done(
                self.now,
                DeviceCompletion {
                    id: op.id,
                    result: Ok(()),
                    data,
                },
                &mut out,
            );
        }
    }

    fn req(
        &mut self,
        vol: &str,
        kind: ReqKind,
        off: u64,
        len: u64,
        payload: Option<Bytes>,
    ) -> VmCompletion {
        let v = self.engine.volume_id(vol).unwrap();
        let id = self.next_id;
        self.next_id += 1;
        let mut r = VmRequest::new(id, v, kind, off, len);
        r.payload = payload;
        let mut out = Outputs::default();
        self.engine.submit(self.now, r, &mut out);
        self.drain(out);
        let i = self
            .done
            .iter()
            .position(|c| c.id == id)
            .expect("request completed");
        self.done.remove(i)
    }

    fn write(&mut self, vol: &str, off: u64, data: &[u8]) {
        let c = self.req(
            vol,
            ReqKind::Write,
            off,
            data.len() as u64,
            Some(Bytes::copy_from_slice(data)),
        );
        assert_eq!(
            c.result,
            Ok(()),
            "write of {} bytes at {off} to {vol}",
            data.len()
        );
    }

    fn read(&mut self, vol: &str, off: u64, len: u64) -> Vec<u8> {
        let mut got = Vec::with_capacity(len as usize);
        // Stay under the 32 MiB request limit.
        for o in (off..off + len).step_by(8 * MIB as usize) {
            let n = (off + len - o).min(8 * MIB);
            let c = self.req(vol, ReqKind::Read, o, n, None);
            assert_eq!(c.result, Ok(()), "read of {n} bytes at {o} from {vol}");
            got.extend_from_slice(&c.data.unwrap());
        }
        got
    }

    fn flush(&mut self, vol: &str) {
        assert_eq!(self.req(vol, ReqKind::Flush, 0, 0, None).result, Ok(()));
    }

    fn tick(&mut self, dt: u64) {
        self.now += dt;
        let mut out = Outputs::default();
        self.engine.tick(self.now, &mut out);
        self.drain(out);
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i % 251) as u8))
        .collect()
}

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
    cfg.volumes[0].size_bytes = 80 * MIB;
    let mut e = Engine::new(cfg).unwrap();
    let mut out = Outputs::default();
    e.start(0, StartMode::Auto, &mut out);
    // Serve the superblock reads from the rig's devices.
    let mut q: VecDeque<DeviceOp> = out.ops.drain(..).collect();
    while let Some(op) = q.pop_front() {
        let dev = &r.devs[op.pool.0 as usize];
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
    match e.state() {
        EngineState::Failed(m) => assert!(m.contains("resizing"), "{m}"),
        s => panic!("mount should fail, state {s:?}"),
    }
}
