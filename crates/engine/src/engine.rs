//! The engine: a deterministic state machine. Inputs come through [`Engine::submit`],
//! [`Engine::device_done`], [`Engine::tick`] and the admin calls; everything the engine
//! wants done is appended to an [`Outputs`]. It performs no I/O, reads no clock, spawns
//! no threads and holds no randomness.

use bytes::{Bytes, BytesMut};
use slab::Slab;

use crate::alloc::ChunkAllocator;
use crate::config::{ConfigError, EngineConfig, PoolConfig};
pub(crate) use crate::devop::{Op, OpSpec, Owner, SINGLE};
use crate::inject::InjectedBug;
use crate::layout::Superblock;
use crate::reclaim::{Freed, Reclaim};
use crate::sched::{BACKGROUND_MAX_WAIT_NS, Classes, Dispatch, Lane};
use crate::stats::PoolStats;
use crate::types::{
    DevKind, DeviceCompletion, DeviceOp, EngineEvent, Errno, IoClass, IoContext, OpId, Outputs,
    PoolId, ReqKind, Tag, VmCompletion, VolumeId,
};
use crate::volume::Volume;

/// Where the engine is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineState {
    /// Created; `start` not called yet.
    New,
    /// Formatting or mounting.
    Starting,
    Ready,
    /// Finishing in-flight work and writing checkpoints; new requests are refused.
    Stopping,
    Stopped,
    Failed(String),
}

/// How to bring the pools up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartMode {
    /// Write fresh superblocks, volume table and journals (no reads needed).
    Format,
    /// Read the superblocks: format if no pool has one, mount if all do, refuse otherwise.
    Auto,
    /// Like `Auto`, but never format blank pools: a driver that was not told to create a
    /// system uses this, so a wrong path or an unmounted disk is refused, not formatted.
    /// (An interrupted format, seen from its superblocks, is still finished.)
    Mount,
}

pub(crate) struct Pool {
    pub cfg: PoolConfig,
    pub alloc: ChunkAllocator,
    /// The pool's scheduler behind its foreground/background classes.
    pub sched: Classes,
    pub in_flight: u32,
    /// Flushes among `in_flight` (see `EngineConfig::flush_takes_queue_slot`).
    pub flushes_in_flight: u32,
    pub stats: PoolStats,
    pub wait_until: Option<u64>,
    /// The longest a foreground or metadata operation waited in the scheduler.
    pub sched_wait_max_ns: u64,
    /// The virtual performance throttle holding this pool's completions (seed 003).
    pub throttle: Option<crate::throttle::Throttle>,
    /// The host write-back buffer (`direct` pools; disabled otherwise).
    pub wbuf: crate::wbuf::WriteBuffer,
    /// This shard's share of the pool's device and the gate holding it to it
    /// (`device_share.rs`; open unless the driver's broker sets a rate).
    pub share: crate::device_share::state::PoolShare,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReqStage {
    Data,
    AwaitCommit,
}

pub(crate) struct Req {
    pub id: u64,
    pub vol: u32,
    pub kind: ReqKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub fua: bool,
    pub no_hole: bool,
    pub payload: Option<Bytes>,
    pub arrival_ns: u64,
    pub outstanding: u32,
    pub error: Option<Errno>,
    pub buf: Option<BytesMut>,
    pub single: Option<Bytes>,
    pub stage: ReqStage,
    /// The monitor saw it continue a sequential stream.
    pub sequential: bool,
    /// Its issuer; the device operations done for it carry it to the scheduler.
    pub context: IoContext,
}

pub struct Engine {
    pub(crate) cfg: EngineConfig,
    pub(crate) state: EngineState,
    pub(crate) pools: Vec<Pool>,
    pub(crate) vols: Vec<Volume>,
    pub(crate) reqs: Slab<Req>,
    pub(crate) ops: Slab<Op>,
    /// Freed space waiting until reuse is safe, and the epochs of I/O in flight
    /// (`reclaim.rs`).
    pub(crate) reclaim: Reclaim,
    pub(crate) voltab: crate::voltab::state::VolTab,
    pub(crate) superblocks: Vec<Superblock>,
    pub(crate) startup: Option<crate::mount::state::Startup>,
    pub(crate) commit_timer_at: Option<u64>,
    pub(crate) last_now_ns: u64,
    /// The bandwidth, cap and timer tier moves share (`tier_moves.rs`).
    pub(crate) tier: crate::tier_moves::TierMoves,
    /// The log on every pool, its appends and gather timer (`log/mod.rs`).
    pub(crate) logs: crate::log::state::Logs,
    /// The clean-stop marker an orderly stop writes last, and the volumes a stop lost
    /// writes of (`stopmark.rs`).
    pub(crate) clean_stop: crate::stopmark::state::CleanStop,
    /// Copies between pools in flight (tier moves, migrations).
    pub(crate) copies: Slab<crate::jobs::copy::state::Copy>,
    pub(crate) migrations: crate::jobs::migrate::state::Migrations,
    /// Space lent to and borrowed from other shards being recorded (`loan.rs`).
    pub(crate) loans: crate::loan::state::Loans,
    /// Borrowed runs being given back (`give_back.rs`).
    pub(crate) give_backs: crate::give_back::state::GiveBacks,
    /// This shard's asks for space and the writes waiting for their answer (`loan_wait.rs`).
    pub(crate) loan_waits: crate::loan_wait::state::LoanWaits,
    /// Demand reports and budget changes between shards (`budgets.rs`).
    pub(crate) budgets: crate::budgets::state::BudgetMeter,
    /// A volume being created at run time (`create.rs`).
    pub(crate) creations: crate::create::state::Creations,
    /// A volume being grown at run time (`resize.rs`).
    pub(crate) resizes: crate::resize::state::Resizes,
    pub(crate) deletes: crate::delete::state::Deletes,
    /// A defect DST injected (`inject.rs`); always `None` without the `inject-bugs` feature.
    pub(crate) bug: Option<InjectedBug>,
    /// Operations the write buffer answered, completed at the end of the entry point.
    pub(crate) local: crate::wbuf::local::LocalQueue,
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Result<Engine, ConfigError> {
        cfg.validate()?;
        let pools = cfg
            .pools
            .iter()
            .map(|p| {
                Ok(Pool {
                    cfg: p.clone(),
                    alloc: ChunkAllocator::new(crate::layout::chunks_in(
                        p.capacity_bytes,
                        cfg.chunk_bytes,
                    )),
                    sched: Classes::new(
                        p.scheduler
                            .build()
                            .map_err(|e| ConfigError(format!("pool {}: {}", p.name, e.message)))?,
                        BACKGROUND_MAX_WAIT_NS,
                    ),
                    in_flight: 0,
                    flushes_in_flight: 0,
                    stats: PoolStats::default(),
                    wait_until: None,
                    sched_wait_max_ns: 0,
                    throttle: p
                        .throttle
                        .as_ref()
                        .map(|t| crate::throttle::Throttle::new(t, p.capacity_bytes)),
                    wbuf: crate::wbuf::WriteBuffer::new(p.write_buffer),
                    share: crate::device_share::state::PoolShare::new(p.queue_depth),
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let n_pools = pools.len();
        Ok(Engine {
            cfg,
            state: EngineState::New,
            pools,
            vols: Vec::new(),
            reqs: Slab::with_capacity(1024),
            ops: Slab::with_capacity(1024),
            reclaim: Reclaim::new(),
            voltab: Default::default(),
            superblocks: Vec::new(),
            startup: None,
            commit_timer_at: None,
            last_now_ns: 0,
            tier: crate::tier_moves::TierMoves::new(n_pools),
            logs: crate::log::state::Logs::new(n_pools),
            clean_stop: Default::default(),
            copies: Slab::new(),
            migrations: Default::default(),
            loans: Default::default(),
            give_backs: Default::default(),
            loan_waits: Default::default(),
            budgets: Default::default(),
            creations: Default::default(),
            resizes: Default::default(),
            deletes: Default::default(),
            bug: None,
            local: Default::default(),
        })
    }

    pub fn state(&self) -> &EngineState {
        &self.state
    }

    /// Volumes whose final commit failed while stopping (empty after a clean stop).
    pub fn lost_at_stop(&self) -> &[String] {
        &self.clean_stop.lost
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    pub fn volume_id(&self, name: &str) -> Option<VolumeId> {
        self.vols
            .iter()
            .position(|v| v.rec.name == name && !v.rec.deleted)
            .map(|i| VolumeId(i as u32))
    }

    /// (name, size in bytes) of every volume.
    pub fn volumes(&self) -> Vec<(String, u64)> {
        self.vols
            .iter()
            .map(|v| (v.rec.name.clone(), v.rec.size_bytes))
            .collect()
    }

    /// The home region of every thick volume: (volume name, pool, offset and length in
    /// bytes). Its space is promised, so it must stay allocated in a file pool.
    pub fn thick_regions(&self) -> Vec<(String, PoolId, u64, u64)> {
        let cb = self.cfg.chunk_bytes;
        self.vols
            .iter()
            .filter(|v| v.rec.provisioning == crate::config::Provisioning::Thick)
            .map(|v| {
                let r = &v.rec;
                let off = crate::layout::chunk_offset(r.home_base_chunk, cb);
                (r.name.clone(), r.home_pool, off, v.chunks * cb)
            })
            .collect()
    }

    pub fn volume_size(&self, v: VolumeId) -> Option<u64> {
        self.vols.get(v.0 as usize).map(|v| v.rec.size_bytes)
    }

    /// Whether a volume is thin or thick (its home region reserved at creation).
    pub fn volume_provisioning(&self, v: VolumeId) -> Option<crate::config::Provisioning> {
        self.vols.get(v.0 as usize).map(|v| v.rec.provisioning)
    }

    /// The pool a volume's new chunks go to.
    pub fn volume_home_pool(&self, v: VolumeId) -> Option<PoolId> {
        self.vols.get(v.0 as usize).map(|v| v.rec.home_pool)
    }

    /// The volume being resized at run time and its new size, if any
    /// (`Control::ResizeVolume`).
    pub fn volume_being_resized(&self) -> Option<(VolumeId, u64)> {
        self.resizes
            .in_progress()
            .map(|(v, size)| (VolumeId(v as u32), size))
    }

    /// The volume being deleted, if any (`Control::DeleteVolume`): it refuses requests.
    pub fn volume_being_deleted(&self) -> Option<VolumeId> {
        self.deletes.in_progress().map(|v| VolumeId(v as u32))
    }

    /// Whether volume `v` was deleted while running: its index is a hollow slot until
    /// the next start (which leaves it out).
    pub fn volume_deleted(&self, v: VolumeId) -> bool {
        self.vols
            .get(v.0 as usize)
            .is_some_and(|vol| vol.rec.deleted)
    }

    /// The volume being created at run time, if any (`Control::CreateVolume`).
    pub fn volume_being_created(&self) -> Option<&str> {
        self.creations.in_progress()
    }

    /// Change a volume's QoS on every pool's scheduler (takes effect at the next
    /// dispatch). Not durable: configuration restores it at the next start.
    pub fn set_volume_qos(&mut self, v: VolumeId, qos: crate::sched::VolumeQos) {
        if let Some(vol) = self.vols.get_mut(v.0 as usize) {
            vol.qos = qos;
        }
        for p in &mut self.pools {
            p.sched.set_volume_qos(v.0, qos);
        }
    }

    /// The longest any operation has waited in a pool's scheduler since start: DST bounds
    /// it so that no scheduler starves a request.
    pub fn sched_wait_max_ns(&self) -> u64 {
        self.pools
            .iter()
            .map(|p| p.sched_wait_max_ns)
            .max()
            .unwrap_or(0)
    }

    /// Tell the schedulers the configured QoS of the volume just added at index `v`.
    pub(crate) fn apply_configured_qos(&mut self, v: usize) {
        let name = &self.vols[v].rec.name;
        if let Some(q) = self
            .cfg
            .volumes
            .iter()
            .find(|c| &c.name == name)
            .map(|c| c.qos)
        {
            self.set_volume_qos(VolumeId(v as u32), q);
        }
    }

    /// Requests accepted and not yet completed.
    pub fn requests_in_flight(&self) -> usize {
        self.reqs.len()
    }

    /// Device operations queued or submitted and not yet completed.
    pub fn ops_in_flight(&self) -> usize {
        self.ops.len()
    }

    /// Whether the engine has nothing left to do (no requests, operations or commits).
    pub fn is_idle(&self) -> bool {
        self.reqs.is_empty()
            && self.ops.is_empty()
            && self
                .vols
                .iter()
                .all(|v| v.commit.is_none() && !v.has_commit_work())
    }

    pub(crate) fn fail(&mut self, reason: String, out: &mut Outputs) {
        self.state = EngineState::Failed(reason.clone());
        out.events.push(EngineEvent::Failed { reason });
    }

    /// Queue a device operation; the scheduler decides when it reaches the device.
    pub(crate) fn queue_op(&mut self, now: u64, spec: OpSpec, out: &mut Outputs) -> usize {
        let (pool, kind, class) = (spec.pool, spec.kind, spec.class);
        let spec = spec.resolve_context(|r| self.reqs.get(r).map(|r| r.context));
        let entry = self.ops.vacant_entry();
        let key = entry.key();
        entry.insert(Op::new(key, now, spec));
        // The epoch is taken when the operation is created, not when the scheduler lets
        // it reach the device: an operation waiting in the queue already targets its
        // location, and that location must not be reused before it is done.
        self.ops[key].epoch = self.reclaim.enter();
        if self.wbuf_queue(now, key, out) {
            return key;
        }
        if kind == DevKind::Flush {
            // A flush covers writes already completed; it need not wait its turn.
            self.emit(now, key, out);
        } else {
            let background = (class == IoClass::Migration
                && self
                    .migrations
                    .copy_in_background(self.ops[key].queued.volume))
                || (class == IoClass::Cleaner && !self.cleaner_urgent(pool.0 as usize))
                || matches!(self.ops[key].owner, Owner::WriteBack { background: true });
            let lane = if background {
                Lane::Background
            } else {
                Lane::Foreground
            };
            self.ops[key].lane = lane;
            let q = self.ops[key].queued;
            let p = &mut self.pools[pool.0 as usize];
            p.sched.add(now, q, lane);
            if lane == Lane::Foreground {
                if q.volume != crate::sched::NO_VOLUME {
                    p.share.queued(q.volume);
                }
                // A scheduler idling for a request (CFQ's, BFQ's, CATS's anticipation)
                // must see the arrival now, not when its wait runs out.
                p.wait_until = None;
            }
            self.pump(now, pool.0 as usize, out);
        }
        key
    }

    /// Dispatch from a pool's scheduler while the device has room (and the pool's
    /// device share lets it: `device_share.rs`).
    pub(crate) fn pump(&mut self, now: u64, pool: usize, out: &mut Outputs) {
        self.pump_inner(now, pool, out);
        let p = &mut self.pools[pool];
        p.share.dispatch_stopped(p.sched.scheduler_len() > 0);
    }

    fn pump_inner(&mut self, now: u64, pool: usize, out: &mut Outputs) {
        if let Some(t) = self.pools[pool].wait_until {
            if now < t {
                return;
            }
            self.pools[pool].wait_until = None;
        }
        while self.slots_taken(pool) < self.pools[pool].cfg.queue_depth {
            let p = &mut self.pools[pool];
            if !p.sched.is_empty()
                && let Some(t) = p.share.closed_until(now)
            {
                p.share.gate_waits += 1;
                p.wait_until = Some(t);
                break;
            }
            match self.pools[pool].sched.dispatch(now) {
                Dispatch::Op(q) => {
                    self.pools[pool].share.take(now);
                    if self.ops[q.key].lane == Lane::Foreground {
                        let p = &mut self.pools[pool];
                        p.sched_wait_max_ns = p.sched_wait_max_ns.max(now - q.arrival_ns);
                    }
                    self.emit(now, q.key, out)
                }
                Dispatch::Idle => break,
                Dispatch::WaitUntil(t) => {
                    self.pools[pool].wait_until = Some(t);
                    break;
                }
            }
        }
    }

    /// Operations holding one of the pool's `queue_depth` slots.
    fn slots_taken(&self, pool: usize) -> u32 {
        let p = &self.pools[pool];
        if self.cfg.flush_takes_queue_slot {
            p.in_flight
        } else {
            p.in_flight - p.flushes_in_flight
        }
    }

    pub(crate) fn emit(&mut self, now: u64, key: usize, out: &mut Outputs) {
        self.emit_counted(key);
        if let crate::wbuf::local::EmitAction::Device = self.wbuf_emit(now, key) {
            self.push_device_op(now, key, out);
        }
    }

    /// Count an operation as dispatched to its device.
    pub(crate) fn emit_counted(&mut self, key: usize) {
        let op = &mut self.ops[key];
        let p = &mut self.pools[op.pool as usize];
        p.in_flight += 1;
        match op.kind {
            DevKind::Read => {
                let c = p.stats.class_mut(op.class);
                c.read_ops += 1;
                c.read_bytes += op.len_bytes;
            }
            DevKind::Write | DevKind::WriteZeroes | DevKind::Punch => {
                let c = p.stats.class_mut(op.class);
                c.write_ops += 1;
                c.write_bytes += op.len_bytes;
            }
            DevKind::Flush => {
                p.stats.flushes += 1;
                p.flushes_in_flight += 1;
            }
            DevKind::Discard => {}
        }
    }

    /// Undo [`Engine::emit_counted`] for a write the buffer parked instead of sending:
    /// it is dispatched (and counted) again when the scheduler lets it go once more.
    pub(crate) fn emit_undone(&mut self, key: usize) {
        let op = &self.ops[key];
        let p = &mut self.pools[op.pool as usize];
        p.in_flight -= 1;
        if matches!(
            op.kind,
            DevKind::Write | DevKind::WriteZeroes | DevKind::Punch
        ) {
            let c = p.stats.class_mut(op.class);
            c.write_ops -= 1;
            c.write_bytes -= op.len_bytes;
        }
    }

    /// Send an operation to its device. A throttled pool's data operation gets its target
    /// here, when it reaches the device: one the write buffer answers from RAM, or parks
    /// behind a write in flight, has no device time to model yet.
    pub(crate) fn push_device_op(&mut self, now: u64, key: usize, out: &mut Outputs) {
        let op = &mut self.ops[key];
        if let Some(t) = &mut self.pools[op.pool as usize].throttle
            && op.kind != DevKind::Flush
        {
            let is_write = op.kind != DevKind::Read;
            let target = t.target(now, op.offset_bytes, op.len_bytes, is_write);
            op.throttle = Some((now, target));
        }
        out.ops.push(DeviceOp {
            id: OpId(key as u64),
            pool: PoolId(op.pool),
            kind: op.kind,
            offset_bytes: op.offset_bytes,
            len_bytes: op.len_bytes,
            fua: op.fua,
            payload: op.payload.take(),
            class: op.class,
            volume: op.volume,
            context: op.context,
            tag: Tag::for_op(op.kind, op.class, op.volume),
        });
    }

    /// A device operation finished.
    pub fn device_done(&mut self, now: u64, c: DeviceCompletion, out: &mut Outputs) {
        self.device_done_inner(now, c, out);
        self.drain_local(now, out);
        self.budget_settle(out);
    }

    fn device_done_inner(&mut self, now: u64, c: DeviceCompletion, out: &mut Outputs) {
        self.last_now_ns = self.last_now_ns.max(now);
        let key = c.id.0 as usize;
        // A throttled pool's completion waits for its target (the operation stays in
        // flight); `next_deadline` names the target and `tick` releases it.
        let mut c = c;
        let early = self.bug_is(InjectedBug::ThrottleEarlyRelease);
        if let Some(op) = self.ops.get(key)
            && let Some(times) = op.throttle
            && let Some(t) = &mut self.pools[op.pool as usize].throttle
            && !early
        {
            match t.arrive(now, times, c) {
                Ok(()) => return,
                Err(back) => c = back,
            }
        }
        self.finish_device_op(now, c, out);
    }

    /// A device operation's completion, once any throttle let it through (answers from
    /// the write buffer's RAM come here directly: no device time to throttle).
    pub(crate) fn finish_device_op(&mut self, now: u64, c: DeviceCompletion, out: &mut Outputs) {
        let key = c.id.0 as usize;
        let Some(op) = self.ops.try_remove(key) else {
            out.events.push(EngineEvent::Warning {
                message: format!("completion for unknown device operation {}", c.id.0),
            });
            return;
        };
        self.reclaim.leave(op.epoch);
        let pool = op.pool as usize;
        self.pools[pool].in_flight -= 1;
        if op.kind == DevKind::Flush {
            self.pools[pool].flushes_in_flight -= 1;
        }
        // The throttle's contract, checked where the completion leaves it.
        if let Some((_, target)) = op.throttle
            && let Some(t) = &mut self.pools[pool].throttle
        {
            t.handed_on(now, target);
        }
        if op.kind != DevKind::Flush {
            self.pools[pool].sched.completed(now, &op.queued, op.lane);
            self.pools[pool].share.completed();
        }
        let mut result = c.result;
        if let Err(errno) = result {
            self.note_device_error(&op, errno, out);
        }
        let mut data = c.data;
        self.wbuf_done(now, key, &op, result, &mut data, out);
        // A read that returns the wrong amount of data is a device error, not data.
        if op.kind == DevKind::Read && result.is_ok() && self.cfg.track_data {
            match &data {
                Some(d) if d.len() as u64 == op.len_bytes => {}
                _ => result = Err(Errno::Io),
            }
        }
        self.op_finished(now, key, op, result, data, out);
    }

    /// An operation's owner learns its result; then whatever it unblocks runs.
    pub(crate) fn op_finished(
        &mut self,
        now: u64,
        key: usize,
        op: Op,
        result: Result<(), Errno>,
        data: Option<Bytes>,
        out: &mut Outputs,
    ) {
        let pool = op.pool as usize;
        match op.owner {
            Owner::Read { req, dest } => self.read_done(now, req, dest, result, data, out),
            Owner::Write {
                req,
                vol,
                chunk,
                start,
                end,
                seq,
            } => self.write_done(
                now,
                req,
                vol,
                op.pool,
                chunk,
                (start, end, seq),
                result,
                out,
            ),
            Owner::Alloc { vol, chunk } => self.alloc_part_done(now, vol, chunk, result, out),
            Owner::Commit { vol } => self.commit_io_done(now, vol, result, out),
            Owner::Startup { tag } => self.startup_io_done(now, key, tag, result, data, out),
            Owner::Discard { free } => self.discard_done(free),
            Owner::Copy { slot } => self.copy_io_done(now, slot, result, data, out),
            Owner::MigWrite {
                req,
                chunk,
                start,
                end,
                home_seq,
            } => self.migration_dst_write_done(
                now,
                req,
                op.volume.map_or(u32::MAX, |v| v.0),
                op.pool,
                op.offset_bytes,
                chunk,
                (start, end, home_seq),
                result,
                out,
            ),
            Owner::MigDup { vol, chunk, req } => {
                self.migration_dup_done(now, vol, chunk, req, op.pool, result, out)
            }
            Owner::LogDrain { vol, chunk } => {
                self.log_drain_part_done(now, vol, chunk, result, out)
            }
            Owner::Append { slot } => self.append_done(now, slot, result, out),
            Owner::CleanRead { pool, idx } => {
                self.clean_read_done(now, pool as usize, idx as usize, result, data, out)
            }
            Owner::VolTab => self.volume_table_written(now, result, out),
            Owner::Create => self.create_write_done(now, result, out),
            Owner::WriteBack { .. } => {}
        }
        self.pump(now, pool, out);
        if !self.reclaim.is_empty() {
            self.release_frees(now, out);
        }
        self.log_resume_all(now, out);
        self.migration_step(now, out);
        self.delete_step(now, out);
        self.maybe_stopped(out);
    }

    /// Count a failed device operation and report it to the driver.
    fn note_device_error(&mut self, op: &Op, errno: Errno, out: &mut Outputs) {
        let stats = &mut self.pools[op.pool as usize].stats;
        stats.errors += 1;
        stats.nospace_errors += u64::from(errno == Errno::NoSpc);
        out.events.push(EngineEvent::DeviceError {
            pool: self.cfg.pools[op.pool as usize].name.clone(),
            volume: op.volume.map(|v| self.vols[v.0 as usize].rec.name.clone()),
            kind: op.kind,
            offset_bytes: op.offset_bytes,
            len_bytes: op.len_bytes,
            errno,
        });
    }

    /// When the engine next wants [`Engine::tick`]: its earliest timer (background commit,
    /// tier migration, log gather, cleaner budget, a scheduler's wait, a job's timer).
    /// Drivers pull it after every call rather than being told, so a timer the engine
    /// holds cannot be lost between driver and engine (the push design lost one twice). A
    /// time at or before now means "tick now". Drivers: `crate::host::Wakeups`.
    pub fn next_deadline(&self) -> Option<u64> {
        // The injected defect drops the scheduler's wait, as a driver losing it would.
        let sched_waits = !self.bug_is(InjectedBug::SchedLosesWakeup);
        let pools = self
            .pools
            .iter()
            .filter_map(|p| p.wait_until)
            .filter(|_| sched_waits);
        let cleaners = self.logs.iter().filter_map(|l| l.clean_wait_at);
        // A throttled pool's held completions pass at their targets.
        let throttles = self
            .pools
            .iter()
            .filter_map(|p| p.throttle.as_ref()?.next_release_at());
        let write_backs = self.pools.iter().filter_map(|p| p.wbuf.age_timer_at);
        [
            self.commit_timer_at,
            self.tier.timer_at,
            self.logs.gather_at,
            self.migrations.timer_at,
        ]
        .into_iter()
        .flatten()
        .chain(self.logs.nospace.retry_at())
        .chain(self.startup_retry_at())
        .chain(self.loan_waits.deadline())
        .chain(self.budgets.timer_at)
        .chain(self.give_backs.timer_at)
        .chain(pools)
        .chain(cleaners)
        .chain(throttles)
        .chain(write_backs)
        .min()
    }

    /// Time passed: run the timers due at `now` (see [`Engine::next_deadline`]); those not
    /// yet due are left alone.
    pub fn tick(&mut self, now: u64, out: &mut Outputs) {
        self.tick_inner(now, out);
        self.wbuf_tick(now, out);
        self.drain_local(now, out);
        self.budget_settle(out);
    }

    fn tick_inner(&mut self, now: u64, out: &mut Outputs) {
        self.last_now_ns = self.last_now_ns.max(now);
        self.release_throttled(now, out);
        for p in 0..self.pools.len() {
            if self.pools[p].wait_until.is_some_and(|t| t <= now) {
                self.pump(now, p, out);
            }
        }
        if self.logs.gather_at.is_some_and(|t| t <= now) {
            self.log_gather_tick(now, out);
        }
        self.append_nospace_tick(now, out);
        self.startup_space_tick(now, out);
        self.loan_wait_tick(now, out);
        self.budget_tick(now, out);
        self.give_back_tick(now, out);
        self.clean_wait_tick(now, out);
        self.migration_tick(now, out);
        // As the jobs are, so that no tick path that ends a deletion's last request can
        // leave it waiting (`check_deletion_stepped`).
        self.delete_step(now, out);
        if self.tier.timer_at.is_some_and(|t| t <= now) {
            self.tier.timer_at = None;
            if self.state == EngineState::Ready {
                self.tier_tick(now, out);
            }
        }
        if self.commit_timer_at.is_some_and(|t| t <= now) {
            self.commit_timer_at = None;
            if self.state == EngineState::Ready || self.state == EngineState::Stopping {
                for v in 0..self.vols.len() {
                    let vol = &self.vols[v];
                    let needed = vol.journal.has_pending()
                        || !vol.flush_waiters.is_empty()
                        || vol.checkpoint_wanted
                        || self.frees_wait_on(v as u32);
                    if needed && vol.commit.is_none() {
                        self.start_commit(now, v as u32, out);
                    }
                }
            }
            if !self.reclaim.is_empty() {
                self.release_frees(now, out);
            }
            if self.voltab.retry_due() {
                self.write_volume_table(now, out);
            }
            self.log_resume_all(now, out);
            self.arm_commit_timer(now);
        }
    }

    /// Ask for a background commit after the interval if there is anything to commit.
    /// A wanted checkpoint counts: a volume backing off after a failed round (commits
    /// retried by this timer only) may want nothing else, and a migration's pre-sync
    /// waits for that retry (before, it waited for a guest write).
    pub(crate) fn arm_commit_timer(&mut self, now: u64) {
        if self.commit_timer_at.is_some() {
            return;
        }
        let work =
            self.vols.iter().any(|v| {
                v.journal.has_pending() || !v.flush_waiters.is_empty() || v.checkpoint_wanted
            }) || !self.reclaim.is_empty()
                || self.voltab.retry_due();
        if work {
            let t = now + self.cfg.commit_interval_ns;
            self.commit_timer_at = Some(t);
        }
    }

    pub(crate) fn frees_wait_on(&self, v: u32) -> bool {
        self.reclaim.pending().any(|f| {
            f.needs
                .iter()
                .any(|&(vol, seq)| vol == v && self.vols[v as usize].journal.durable_seq < seq)
        })
    }

    /// Record that a location is free once `needs` are durable and in-flight I/O drained.
    pub(crate) fn defer_free(&mut self, what: Freed, needs: smallvec::SmallVec<[(u32, u64); 1]>) {
        if self.bug_is(InjectedBug::ReuseFreedImmediately) {
            return self.release_chunks(what);
        }
        self.reclaim.defer(what, needs);
    }

    /// Return to the allocators every pending free whose conditions hold. With
    /// `discard_freed`, the freed range is discarded (a hole punched in a file pool) first,
    /// and only now: until the records that free it (`needs`) are durable, a crash
    /// recovers the old state, in which the range still holds live data, and the
    /// in-flight I/O that targets it must have landed (`epoch`).
    pub(crate) fn release_frees(&mut self, now: u64, out: &mut Outputs) {
        if self.bug_is(InjectedBug::PunchBeforeFreeDurable) && self.cfg.discard_freed {
            self.discard_early(now, out);
        }
        let vols = &self.vols;
        let ready = self.reclaim.ready(|v, s| {
            vols.get(v as usize)
                .is_none_or(|vol| vol.journal.durable_seq >= s)
        });
        for k in ready {
            if self.cfg.discard_freed {
                let Freed::Chunks { pool, first, n } = self.reclaim.start_discard(k);
                let off = crate::layout::chunk_offset(first, self.cfg.chunk_bytes);
                let len = n * self.cfg.chunk_bytes;
                let owner = Owner::Discard { free: k };
                let spec = OpSpec::new(owner, pool, DevKind::Discard, IoClass::Metadata);
                self.queue_op(now, spec.at(off, len), out);
            } else {
                let what = self.reclaim.take(k);
                self.release_chunks(what);
            }
        }
    }

    /// The injected bug `punch-before-free-durable`: discard freed ranges as soon as their
    /// in-flight I/O has drained, before the records that free them are durable (the
    /// chunks still go back to the allocator only once they are).
    fn discard_early(&mut self, now: u64, out: &mut Outputs) {
        for k in self.reclaim.drained_not_discarded() {
            let Freed::Chunks { pool, first, n } = self.reclaim.start_early_discard(k);
            let off = crate::layout::chunk_offset(first, self.cfg.chunk_bytes);
            let owner = Owner::Discard { free: usize::MAX };
            let spec = OpSpec::new(owner, pool, DevKind::Discard, IoClass::Metadata);
            self.queue_op(now, spec.at(off, n * self.cfg.chunk_bytes), out);
        }
    }

    pub(crate) fn release_chunks(&mut self, what: Freed) {
        let Freed::Chunks { pool, first, n } = what;
        for c in first..first + n {
            self.pools[pool.0 as usize].alloc.release(c);
        }
    }

    fn discard_done(&mut self, free: usize) {
        // Even if the discard failed, the space is free: discard is advisory.
        if let Some(what) = self.reclaim.discard_done(free) {
            self.release_chunks(what);
        }
    }

    /// Finish a request: record statistics and emit its completion.
    pub(crate) fn finish_req(
        &mut self,
        now: u64,
        key: usize,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let r = self.reqs.remove(key);
        let data = if r.kind == ReqKind::Read && result.is_ok() && self.cfg.track_data {
            Some(
                r.single
                    .unwrap_or_else(|| r.buf.map(BytesMut::freeze).unwrap_or_default()),
            )
        } else {
            None
        };
        let vol = &mut self.vols[r.vol as usize];
        let latency = now.saturating_sub(r.arrival_ns);
        let ks = vol.stats.kind_mut(r.kind);
        ks.requests += 1;
        if result.is_err() {
            ks.errors += 1;
        } else if matches!(r.kind, ReqKind::Read | ReqKind::Write) {
            ks.bytes += r.len_bytes;
        }
        ks.latency.record(latency);
        vol.stats.all.record(latency);
        vol.stats.last_completion_ns = vol.stats.last_completion_ns.max(now);
        out.completions.push(VmCompletion {
            id: r.id,
            volume: VolumeId(r.vol),
            kind: r.kind,
            result,
            data,
        });
    }

    /// One unit of a request's work finished.
    pub(crate) fn req_end(
        &mut self,
        now: u64,
        key: usize,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let r = &mut self.reqs[key];
        if let Err(e) = result {
            // Keep the first error; an I/O error outranks others.
            if r.error.is_none() || e == Errno::Io {
                r.error = Some(e);
            }
        }
        r.outstanding -= 1;
        if r.outstanding > 0 {
            return;
        }
        let wants_commit = r.stage == ReqStage::Data
            && r.fua
            && r.error.is_none()
            && matches!(
                r.kind,
                ReqKind::Write | ReqKind::Trim | ReqKind::WriteZeroes
            );
        if wants_commit {
            r.stage = ReqStage::AwaitCommit;
            let v = r.vol;
            self.vols[v as usize].flush_waiters.push(key);
            self.kick_commit(now, v, out);
            return;
        }
        let res = match r.error {
            Some(e) => Err(e),
            None => Ok(()),
        };
        self.finish_req(now, key, res, out);
    }

    pub(crate) fn maybe_stopped(&mut self, out: &mut Outputs) {
        if self.state == EngineState::Stopping && self.is_idle() && !self.reclaim.discarding() {
            let now = self.last_now_ns;
            if self.wbuf_flush_at_stop(now, out) || self.mark_clean_stop(now, out) {
                return;
            }
            self.state = EngineState::Stopped;
            out.events.push(EngineEvent::Stopped);
        }
    }

    /// Stop accepting requests, finish in-flight work, checkpoint every volume.
    pub fn begin_shutdown(&mut self, now: u64, out: &mut Outputs) {
        match self.state {
            EngineState::Ready => {}
            EngineState::Stopping | EngineState::Stopped => return,
            _ => {
                self.state = EngineState::Stopped;
                out.events.push(EngineEvent::Stopped);
                return;
            }
        }
        self.state = EngineState::Stopping;
        self.loan_wait_stop(now, out);
        for v in 0..self.vols.len() {
            self.vols[v].checkpoint_wanted = true;
            self.kick_commit(now, v as u32, out);
        }
        self.maybe_stopped(out);
        self.drain_local(now, out);
        self.budget_settle(out);
    }
}

impl Engine {
    /// Hand on every throttled completion due by `now`.
    fn release_throttled(&mut self, now: u64, out: &mut Outputs) {
        for p in 0..self.pools.len() {
            while let Some(c) = self.pools[p].throttle.as_mut().and_then(|t| t.release(now)) {
                self.finish_device_op(now, c, out);
            }
        }
    }
}

impl Engine {
    /// Give this engine a defect (DST and tests only; not part of the configuration).
    /// Call it after `Engine::new`, before `start`; a restarted engine needs it again.
    #[cfg(feature = "inject-bugs")]
    pub fn inject_bug(&mut self, bug: Option<InjectedBug>) {
        self.bug = bug;
        if let Some(b) = bug {
            for p in &mut self.pools {
                p.sched.inject_bug(b);
            }
        }
    }

    /// Whether this engine was given defect `b`.
    #[inline]
    pub(crate) fn bug_is(&self, b: InjectedBug) -> bool {
        cfg!(feature = "inject-bugs") && self.bug == Some(b)
    }
}
