//! The rig the loan tests share (`rebalance.rs`, `give_back.rs`): two shards over one
//! pool on a byte array completing operations one at a time in order, so a completed
//! write is durable and a power loss drops what is still queued.
#![allow(dead_code)] // each test binary uses a different subset

use bytes::Bytes;
use tiervisor_engine::{
    EngineConfig, EngineEvent, EngineState, Errno, InjectedBug, Medium, Outputs, Placement,
    PoolConfig, PoolId, Provisioning, ReqKind, SchedSpec, StartMode, VmRequest, VolumeConfig,
    VolumeId,
};
use tiervisor_sim::shards::Sharded;

use crate::common;

pub const MIB: u64 = 1 << 20;
pub const POOL_BYTES: u64 = 200 * MIB;
/// What v0 writes: 70 % of the pool, where its slice holds under half.
pub const FILL_MIB: u64 = 140;

pub fn config() -> EngineConfig {
    EngineConfig {
        pools: vec![PoolConfig {
            name: "ssd".into(),
            medium: Medium::Ssd,
            capacity_bytes: POOL_BYTES,
            queue_depth: 4,
            scheduler: SchedSpec::default(),
            log: false,
            throttle: None,
            write_buffer: None,
        }],
        volumes: (0..2)
            .map(|i| VolumeConfig {
                name: format!("v{i}"),
                size_bytes: 180 * MIB,
                home_pool: PoolId(0),
                fast_pool: None,
                provisioning: Provisioning::Thin,
                placement: Placement::Pinned,
                log: None,
                qos: Default::default(),
            })
            .collect(),
        ..EngineConfig::default()
    }
}

/// The system, its device and a clock.
pub struct Rig {
    pub s: Sharded,
    pub disk: Vec<u8>,
    pub out: Outputs,
    pub now: u64,
    pub events: Vec<EngineEvent>,
    /// `run` gives up (returns `None`) once an event this matches was said.
    pub stop_at: fn(&EngineEvent) -> bool,
    /// The first invariant the checks found broken; with `strict` (the default) a broken
    /// invariant fails the test at once.
    pub broken: Option<String>,
    pub strict: bool,
}

impl Rig {
    pub fn new() -> Rig {
        Rig::with_loan_delay(0, None)
    }

    /// Each loan step (ask, lend, borrow) carried `delay_ns` after it was said.
    pub fn with_loan_delay(delay_ns: u64, bug: Option<InjectedBug>) -> Rig {
        Rig::with_config(config(), delay_ns, bug)
    }

    pub fn with_config(cfg: EngineConfig, delay_ns: u64, bug: Option<InjectedBug>) -> Rig {
        let mut s = Sharded::new(&cfg, 2, bug).unwrap();
        s.set_loan_delay_ns(delay_ns);
        let mut r = Rig {
            s,
            disk: vec![0; POOL_BYTES as usize],
            out: Outputs::default(),
            now: 0,
            events: Vec::new(),
            stop_at: |_| false,
            broken: None,
            strict: bug.is_none(),
        };
        r.s.start(0, StartMode::Format, &mut r.out);
        r.settle();
        assert_eq!(r.s.state(), EngineState::Ready, "{:?}", r.events);
        r
    }

    /// Complete one queued device operation (the oldest); false if none is queued.
    pub fn step(&mut self) -> bool {
        if self.out.ops.is_empty() {
            // Timers (and delayed loan steps) until one makes work or answers a request;
            // a few timers may fire with nothing to do.
            for _ in 0..100 {
                let Some(t) = self.s.next_deadline() else {
                    return false;
                };
                self.now = self.now.max(t);
                let done = self.out.completions.len();
                self.s.tick(self.now, &mut self.out);
                self.take_events();
                if !self.out.ops.is_empty() || self.out.completions.len() > done {
                    return true;
                }
            }
            return false;
        }
        let op = self.out.ops.remove(0);
        self.now += 10_000;
        let c = common::complete_on_disk(&mut self.disk, &op);
        self.s.device_done(self.now, c, &mut self.out);
        self.take_events();
        true
    }

    pub fn take_events(&mut self) {
        self.events.append(&mut self.out.events);
        // Checked as DST checks, whenever the system is up (mid-mount the allocators
        // are not rebuilt yet).
        if self.s.state() == EngineState::Ready
            && let Err(e) = self.s.check_invariants()
        {
            assert!(!self.strict, "{e}");
            self.broken.get_or_insert(e);
        }
    }

    pub fn settle(&mut self) {
        let mut n = 0;
        while self.step() {
            n += 1;
            assert!(n < 1_000_000, "does not settle");
        }
    }

    /// Submit `req` and complete operations until it completes; its result, or `None`
    /// if `stop_at` matched an event first.
    pub fn run(&mut self, req: VmRequest) -> Option<(Result<(), Errno>, Option<Bytes>)> {
        let id = req.id;
        self.s.submit(self.now, req, &mut self.out);
        loop {
            if self.events.iter().any(self.stop_at) {
                return None;
            }
            if let Some(i) = self.out.completions.iter().position(|c| c.id == id) {
                let c = self.out.completions.remove(i);
                return Some((c.result, c.data));
            }
            assert!(self.step(), "request {id} never completes");
        }
    }

    /// A power loss: everything queued is dropped, the engines are thrown away and the
    /// system mounts again.
    pub fn crash_and_mount(&mut self) {
        self.out = Outputs::default();
        self.events.clear();
        self.s.reset().unwrap();
        self.s.start(self.now, StartMode::Mount, &mut self.out);
        self.settle();
        assert_eq!(self.s.state(), EngineState::Ready, "{:?}", self.events);
    }
}

pub fn pattern(vol: u32, mib: u64) -> Bytes {
    let mut b = vec![0u8; MIB as usize];
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i as u64 ^ (mib * 131) ^ (u64::from(vol) * 7919)) as u8;
    }
    b.into()
}

/// Write MiB `mib` of volume `vol` and flush it; the write's result (`Ok(false)`: the
/// rig stopped at an event before both completed).
pub fn try_write_flushed(r: &mut Rig, id: &mut u64, vol: u32, mib: u64) -> Result<bool, Errno> {
    *id += 2;
    let mut w = VmRequest::new(*id, VolumeId(vol), ReqKind::Write, mib * MIB, MIB);
    w.payload = Some(pattern(vol, mib));
    let Some((res, _)) = r.run(w) else {
        return Ok(false);
    };
    res?;
    let f = VmRequest::new(*id + 1, VolumeId(vol), ReqKind::Flush, 0, 0);
    match r.run(f) {
        Some((res, _)) => res.map(|_| true),
        None => Ok(false),
    }
}

pub fn write_flushed(r: &mut Rig, id: &mut u64, vol: u32, mib: u64) -> Result<(), Errno> {
    try_write_flushed(r, id, vol, mib).map(|done| assert!(done))
}

pub fn check_data(r: &mut Rig, vol: u32, mibs: impl Iterator<Item = u64>) {
    for (i, mib) in mibs.enumerate() {
        let q = VmRequest::new(
            1_000_000 + i as u64,
            VolumeId(vol),
            ReqKind::Read,
            mib * MIB,
            MIB,
        );
        let (res, data) = r.run(q).unwrap();
        res.unwrap();
        assert!(
            data.unwrap() == pattern(vol, mib),
            "volume {vol} MiB {mib} lost its data"
        );
    }
}

pub fn loans_made(ev: &[EngineEvent]) -> usize {
    ev.iter()
        .filter(|e| matches!(e, EngineEvent::Borrowed { .. }))
        .count()
}
