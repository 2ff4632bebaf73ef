//! A test rig: the engine on in-memory devices that complete operations in order,
//! either all at once (`drain`) or held for the test to release (`hold`).
#![allow(dead_code)]

use std::collections::VecDeque;

use bytes::Bytes;
use tiervisor_engine::*;

pub const MIB: u64 = 1 << 20;

/// A deterministic generator (the tests must not depend on a random crate's versions).
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Random small writes (logged), some 256 KiB ones, trims, reads, flushes and crashes on
/// volume "thin" of a logging `cfg`, against a reference, for `steps` steps; then a final
/// crash and a whole-volume check. The first mismatch or broken invariant as an error;
/// else the writes the log took (pool 1's `user_writes`, summed over the runs).
pub fn log_against_reference(
    cfg: EngineConfig,
    seed: u64,
    steps: u32,
    bug: Option<InjectedBug>,
) -> Result<u64, String> {
    let mut r = Rig::with_bug(cfg, bug);
    let user_writes =
        |r: &Rig| (r.engine.report().pools[1].log.as_ref()).map_or(0, |l| l.user_writes);
    let mut rng = Lcg(seed);
    let size = 6 * MIB as usize;
    let mut model = vec![0u8; size];
    let mut version = 0u8;
    let mut logged = 0;
    for step in 0..steps {
        let sectors = 1 + rng.next(16) as usize;
        let off = rng.next((size / 512 - sectors) as u64) as usize * 512;
        let len = sectors * 512;
        match rng.next(20) {
            // Mostly small writes (logged); sometimes big ones that go home.
            0..=13 => {
                version = version.wrapping_add(1);
                let d = pattern(version, len);
                r.write("thin", off as u64, &d);
                model[off..off + len].copy_from_slice(&d);
            }
            14 => {
                version = version.wrapping_add(1);
                let big = 256 << 10;
                let o = rng.next((size - big) as u64 / 4096) as usize * 4096;
                let d = pattern(version, big);
                r.write("thin", o as u64, &d);
                model[o..o + big].copy_from_slice(&d);
            }
            15 => {
                let c = r.req("thin", ReqKind::Trim, off as u64, len as u64, None);
                if c.result != Ok(()) {
                    return Err(format!("seed {seed} step {step}: trim {:?}", c.result));
                }
                model[off..off + len].fill(0);
            }
            16..=18 => {
                if r.read("thin", off as u64, len as u64) != model[off..off + len] {
                    return Err(format!("seed {seed} step {step}: read {len} at {off}"));
                }
            }
            _ => {
                r.flush("thin");
                if rng.next(4) == 0 {
                    logged += user_writes(&r);
                    r.crash_and_mount();
                }
            }
        }
        if step % 500 == 0 {
            r.engine
                .check_invariants()
                .map_err(|e| format!("seed {seed} step {step}: {e}"))?;
        }
    }
    if r.read("thin", 0, size as u64) != model {
        return Err(format!("seed {seed}: volume differs before the last mount"));
    }
    r.flush("thin");
    logged += user_writes(&r);
    r.crash_and_mount();
    if r.read("thin", 0, size as u64) != model {
        return Err(format!("seed {seed}: volume differs after mount"));
    }
    r.engine.check_invariants().map_err(|e| e.to_string())?;
    Ok(logged)
}

/// `config(1 MiB journals)` with the log on both pools: small segments and appends so the
/// cleaner has work.
pub fn log_config() -> EngineConfig {
    let mut cfg = config(1 << 20);
    for p in &mut cfg.pools {
        p.log = true;
    }
    cfg.log = tiervisor_engine::config::LogConfig {
        segment_bytes: 2 * MIB,
        append_bytes: 64 << 10,
        ..tiervisor_engine::config::LogConfig::default()
    };
    cfg
}

/// A pinned volume to create while running, on pool `pool`.
pub fn new_volume(
    name: &str,
    size_bytes: u64,
    pool: u16,
    provisioning: tiervisor_engine::config::Provisioning,
) -> tiervisor_engine::config::VolumeConfig {
    tiervisor_engine::config::VolumeConfig {
        name: name.into(),
        size_bytes,
        home_pool: PoolId(pool),
        fast_pool: None,
        provisioning,
        placement: tiervisor_engine::config::Placement::Pinned,
        log: None,
        qos: Default::default(),
    }
}

/// Free chunks per pool, from the engine's report.
pub fn free_chunks(r: &Rig) -> Vec<u64> {
    r.engine
        .report()
        .pools
        .iter()
        .map(|p| p.free_chunks)
        .collect()
}

/// Give the engine an admin command now and carry out what it asks.
pub fn control(r: &mut Rig, c: Control) -> Result<(), ControlError> {
    let mut out = Outputs::default();
    let res = r.engine.control(r.now, c, &mut out);
    r.drain(out);
    res
}

/// Picks the device writes that fail, and with what error.
pub type FailWriteIf = Box<dyn Fn(&DeviceOp) -> Option<Errno>>;

pub struct Rig {
    pub engine: Engine,
    pub cfg: EngineConfig,
    pub devs: Vec<Vec<u8>>,
    pub now: u64,
    pub done: Vec<VmCompletion>,
    pub events: Vec<EngineEvent>,
    pub next_id: u64,
    /// While set, device operations wait in `held` until released.
    pub hold: bool,
    pub held: VecDeque<DeviceOp>,
    /// Operations delivered and not yet executed (`drain` runs them in order).
    queued: VecDeque<DeviceOp>,
    /// While set, device operations wait in `held` once the engine is ready: a mount
    /// runs in full, and what it starts when ready (a resumed or cancelled migration)
    /// is held, operation by operation.
    pub hold_once_ready: bool,
    /// While set, every device write (data, zeroing, journal) fails with this error and
    /// changes nothing, as on a full or failing disk; reads, flushes and discards succeed.
    pub fail_writes: Option<Errno>,
    /// While set, device writes it picks fail with the error it gives and change nothing.
    pub fail_write_if: Option<FailWriteIf>,
    /// A defect every engine of this rig gets (also after `crash_and_mount`).
    pub bug: Option<InjectedBug>,
    /// While set, devices have a volatile write cache: what a write replaced is kept
    /// until its pool is flushed (FUA writes are durable at once), and `power_loss`
    /// undoes every write not yet flushed, the worst a power loss may do.
    pub volatile: bool,
    /// Per pool: (offset, bytes replaced) of each write since the pool's last flush.
    pub unflushed: Vec<Vec<(usize, Vec<u8>)>>,
}

/// Shard 0 of 2 (so it asks for loans of space), with an HDD slice of 16 MiB that the
/// thin volume (40 MiB) can fill: the loan tests' engine.
pub fn loaning_shard_config() -> EngineConfig {
    let mut cfg = config(4 * MIB);
    cfg.shard = tiervisor_engine::shard::ShardId { index: 0, count: 2 };
    cfg.pools[1].capacity_bytes = 16 * MIB;
    cfg.volumes.truncate(1);
    cfg
}

pub fn config(journal_bytes: u64) -> EngineConfig {
    EngineConfig {
        system_uuid: [9; 16],
        journal_bytes,
        pools: vec![
            PoolConfig {
                name: "ssd".into(),
                medium: Medium::Ssd,
                capacity_bytes: 64 * MIB,
                queue_depth: 8,
                scheduler: SchedSpec::default(),
                log: false,
                throttle: None,
                write_buffer: None,
            },
            PoolConfig {
                name: "hdd".into(),
                medium: Medium::Hdd,
                capacity_bytes: 96 * MIB,
                queue_depth: 2,
                scheduler: SchedSpec::default(),
                log: false,
                throttle: None,
                write_buffer: None,
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
                log: None,
                qos: Default::default(),
            },
            VolumeConfig {
                name: "thick".into(),
                size_bytes: 20 * MIB,
                home_pool: PoolId(0),
                fast_pool: None,
                provisioning: Provisioning::Thick,
                placement: Placement::Pinned,
                log: None,
                qos: Default::default(),
            },
        ],
        ..EngineConfig::default()
    }
}

impl Rig {
    pub fn new(cfg: EngineConfig) -> Rig {
        Rig::with_bug(cfg, None)
    }

    /// A rig whose engine carries an injected defect, for tests that must catch it.
    pub fn with_bug(cfg: EngineConfig, bug: Option<InjectedBug>) -> Rig {
        let devs = cfg
            .pools
            .iter()
            .map(|p| vec![0xEE; p.capacity_bytes as usize])
            .collect();
        let mut engine = Engine::new(cfg.clone()).unwrap();
        engine.inject_bug(bug);
        let mut r = Rig {
            engine,
            cfg,
            devs,
            now: 0,
            done: vec![],
            events: vec![],
            next_id: 1,
            hold: false,
            held: VecDeque::new(),
            queued: VecDeque::new(),
            hold_once_ready: false,
            fail_writes: None,
            fail_write_if: None,
            bug,
            volatile: false,
            unflushed: Vec::new(),
        };
        r.unflushed = vec![Vec::new(); r.devs.len()];
        r.start();
        r
    }

    pub fn start(&mut self) {
        let mut out = Outputs::default();
        self.engine.start(self.now, StartMode::Auto, &mut out);
        self.drain(out);
        // A throttled pool holds start-up I/O until its targets: run the timers.
        while self.engine.state() != &EngineState::Ready
            && let Some(t) = self.engine.next_deadline()
        {
            self.tick(t.saturating_sub(self.now));
        }
        assert_eq!(
            self.engine.state(),
            &EngineState::Ready,
            "events: {:?}",
            self.events
        );
    }

    /// Lose the engine (as in kill -9); devices keep what was written.
    pub fn crash_and_mount(&mut self) {
        // Held operations never happened.
        self.held.clear();
        self.hold = false;
        self.engine = Engine::new(self.cfg.clone()).unwrap();
        self.engine.inject_bug(self.bug);
        self.events.clear();
        self.start();
    }

    /// Power fails: every write not yet flushed is undone (newest first), then the
    /// engine is lost and mounts again.
    pub fn power_loss(&mut self) {
        for (p, undo) in self.unflushed.iter_mut().enumerate() {
            while let Some((o, old)) = undo.pop() {
                self.devs[p][o..o + old.len()].copy_from_slice(&old);
            }
        }
        self.crash_and_mount();
    }

    pub fn drain(&mut self, mut out: Outputs) {
        loop {
            let Ok(()) = host::deliver(&mut out, self);
            let Some(op) = self.queued.pop_front() else {
                break;
            };
            self.execute(op, &mut out);
        }
    }

    /// Complete the oldest held operation (its follow-ups are held too while `hold`).
    pub fn release_one(&mut self) -> Option<DeviceOp> {
        let op = self.held.pop_front()?;
        let mut out = Outputs::default();
        self.execute(op.clone(), &mut out);
        self.drain(out);
        Some(op)
    }

    /// Submit without waiting for completion.
    pub fn submit(
        &mut self,
        vol: &str,
        kind: ReqKind,
        off: u64,
        payload: Option<&[u8]>,
        len: u64,
    ) -> u64 {
        let v = self.engine.volume_id(vol).unwrap();
        let id = self.next_id;
        self.next_id += 1;
        let mut r = VmRequest::new(id, v, kind, off, len);
        r.payload = payload.map(Bytes::copy_from_slice);
        let mut out = Outputs::default();
        self.engine.submit(self.now, r, &mut out);
        self.drain(out);
        id
    }

    /// The completion of request `id`, if it has completed.
    pub fn take_done(&mut self, id: u64) -> Option<VmCompletion> {
        let i = self.done.iter().position(|c| c.id == id)?;
        Some(self.done.remove(i))
    }

    /// Let up to `cut` held device operations complete, one at a time; after every fifth,
    /// write 4 KiB of a new pattern to `vol` somewhere in its first `span_bytes` (mirrored
    /// in `reference`) and FLUSH it, so a crash at any point has flushed writes to keep.
    pub fn release_with_flushed_writes(
        &mut self,
        vol: &str,
        reference: &mut [u8],
        cut: usize,
        span_bytes: u64,
        what: &str,
    ) {
        let mut released = 0;
        let mut step = 0u64;
        while released < cut {
            if self.release_one().is_none() {
                break;
            }
            released += 1;
            if released % 5 == 0 {
                let off = (step * 997 * 4096) % (span_bytes - 4096);
                let d = pattern(30 + step as u8, 4096);
                let id = self.submit(vol, ReqKind::Write, off, Some(&d), 4096);
                reference[off as usize..off as usize + 4096].copy_from_slice(&d);
                while self.take_done(id).is_none() {
                    assert!(self.release_one().is_some(), "{what}: write stuck");
                }
                let f = self.submit(vol, ReqKind::Flush, 0, None, 0);
                while self.take_done(f).is_none() {
                    assert!(self.release_one().is_some(), "{what}: flush stuck");
                }
                step += 1;
            }
        }
    }

    fn execute(&mut self, op: DeviceOp, out: &mut Outputs) {
        {
            self.now += 1000;
            let dev = &mut self.devs[op.pool.0 as usize];
            let (o, l) = (op.offset_bytes as usize, op.len_bytes as usize);
            let mut data = None;
            let is_write = matches!(
                op.kind,
                DevKind::Write | DevKind::WriteZeroes | DevKind::Punch
            );
            let picked = self.fail_write_if.as_ref().and_then(|f| f(&op));
            if let Some(e) = self.fail_writes.or(picked).filter(|_| is_write) {
                let done = DeviceCompletion {
                    id: op.id,
                    result: Err(e),
                    data: None,
                };
                return self.engine.device_done(self.now, done, out);
            }
            if self.volatile {
                let undo = &mut self.unflushed[op.pool.0 as usize];
                match op.kind {
                    DevKind::Flush => undo.clear(),
                    _ if (is_write || op.kind == DevKind::Discard) && !op.fua => {
                        undo.push((o, dev[o..o + l].to_vec()))
                    }
                    _ => {}
                }
            }
            match op.kind {
                DevKind::Read => data = Some(Bytes::copy_from_slice(&dev[o..o + l])),
                DevKind::Write => dev[o..o + l].copy_from_slice(op.payload.as_ref().unwrap()),
                DevKind::WriteZeroes | DevKind::Punch | DevKind::Discard => dev[o..o + l].fill(0),
                DevKind::Flush => {}
            }
            self.engine.device_done(
                self.now,
                DeviceCompletion {
                    id: op.id,
                    result: Ok(()),
                    data,
                },
                out,
            );
        }
    }

    pub fn req(
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

    pub fn write(&mut self, vol: &str, off: u64, data: &[u8]) {
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

    pub fn read(&mut self, vol: &str, off: u64, len: u64) -> Vec<u8> {
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

    /// A read while operations are held: it must complete without the device.
    pub fn read_held(&mut self, vol: &str, off: u64, len: u64) -> Vec<u8> {
        let id = self.submit(vol, ReqKind::Read, off, None, len);
        let c = self
            .take_done(id)
            .expect("read completed without the device");
        assert_eq!(c.result, Ok(()));
        c.data.unwrap().to_vec()
    }

    pub fn flush(&mut self, vol: &str) {
        assert_eq!(self.req(vol, ReqKind::Flush, 0, 0, None).result, Ok(()));
    }

    pub fn tick(&mut self, dt: u64) {
        self.now += dt;
        let mut out = Outputs::default();
        self.engine.tick(self.now, &mut out);
        self.drain(out);
    }
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i % 251) as u8))
        .collect()
}

/// `len` bytes of `pattern(seed)` written at `off` of volume `vol`, and into `reference`
/// (the migration tests' model of the volume).
pub fn write_ref(r: &mut Rig, vol: &str, reference: &mut [u8], off: u64, seed: u8, len: usize) {
    let d = pattern(seed, len);
    r.write(vol, off, &d);
    reference[off as usize..off as usize + len].copy_from_slice(&d);
}

/// The migration tests' start: chunks `whole` of volume `vol` (1 MiB chunks) each written
/// whole with `pattern(chunk + 1)`; returns the reference of its first `chunks` chunks.
pub fn fill_ref(r: &mut Rig, vol: &str, chunks: u64, whole: std::ops::Range<u64>) -> Vec<u8> {
    let mut reference = vec![0u8; (chunks * MIB) as usize];
    for c in whole {
        write_ref(r, vol, &mut reference, c * MIB, c as u8 + 1, MIB as usize);
    }
    reference
}

/// Volume `vol` reads back as `reference` from its start.
pub fn check_ref(r: &mut Rig, vol: &str, reference: &[u8], what: &str) {
    let got = r.read(vol, 0, reference.len() as u64);
    let bad = got.iter().zip(reference).position(|(a, b)| a != b);
    assert!(bad.is_none(), "{what}: first difference at byte {bad:?}");
}

/// A job with scheme `s` to pool `to`, unthrottled, at 64 KiB granularity with a 256 KiB
/// copy buffer.
pub fn job_params(s: jobs::migrate::Scheme, to: PoolId) -> jobs::migrate::MigrationParams {
    jobs::migrate::MigrationParams {
        scheme: jobs::migrate::SchemeChoice::Fixed(s),
        rate_bytes_per_s: 1 << 40,
        granularity_bytes: 64 << 10,
        buffer_bytes: 256 << 10,
        ..jobs::migrate::MigrationParams::new(to)
    }
}

/// Start a migration of volume `vol` through `Control`, as an operator would.
pub fn start_job(
    r: &mut Rig,
    vol: &str,
    params: jobs::migrate::MigrationParams,
) -> Result<(), ControlError> {
    let volume = r.engine.volume_id(vol).unwrap();
    control(r, Control::StartMigration { volume, params })
}

/// The phase of volume `vol`'s migration, if it has one.
pub fn job_phase(r: &Rig, vol: &str) -> Option<jobs::migrate::MigrationPhase> {
    let v = r.engine.volume_id(vol).unwrap();
    r.engine.migration_status(v).map(|s| s.phase)
}

/// Cancel volume `vol`'s migration while the rig holds device operations, then let them
/// all complete and the job end, and check the volume against `reference`. A refusal is
/// allowed only once the pivot is being made durable or is done.
pub fn cancel_held_job(r: &mut Rig, vol: &str, reference: &[u8], what: &str) {
    use jobs::migrate::MigrationPhase;
    let volume = r.engine.volume_id(vol).unwrap();
    if let Err(e) = control(r, Control::CancelMigration { volume }) {
        assert!(
            matches!(
                job_phase(r, vol),
                Some(MigrationPhase::Committing { .. } | MigrationPhase::Done)
            ),
            "{what}: {e} in {:?}",
            job_phase(r, vol)
        );
    }
    r.hold = false;
    while r.release_one().is_some() {}
    finish_job(r, vol);
    check_ref(r, vol, reference, what);
    r.engine.check_invariants().unwrap();
}

/// Run until volume `vol`'s migration is over (ticks let rate-limited copies and the pivot
/// commit go).
pub fn finish_job(r: &mut Rig, vol: &str) {
    for _ in 0..10_000 {
        if job_phase(r, vol).is_some_and(|p| p.is_over()) {
            return;
        }
        r.tick(1_000_000);
    }
    panic!("migration did not finish: {:?}", job_phase(r, vol));
}

/// The rig's devices are byte vectors, written when `drain` executes an operation.
impl host::Driver for Rig {
    type Stop = std::convert::Infallible;

    fn device_op(&mut self, op: DeviceOp) -> Result<(), Self::Stop> {
        if self.hold || (self.hold_once_ready && self.engine.state() == &EngineState::Ready) {
            self.held.push_back(op);
        } else {
            self.queued.push_back(op);
        }
        Ok(())
    }

    fn event(&mut self, e: EngineEvent) -> Result<(), Self::Stop> {
        self.events.push(e);
        Ok(())
    }

    fn completed(&mut self, c: VmCompletion) -> Result<(), Self::Stop> {
        self.done.push(c);
        Ok(())
    }
}
